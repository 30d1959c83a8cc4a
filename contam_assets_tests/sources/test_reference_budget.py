"""A reference build that cannot fit is refused in one line before it starts; a long build prints progress."""

from __future__ import annotations

import pytest

from contam_assets.detector import build_budget as bb
from contam_assets_tests.e2e.test_cli_data import contam
from contam_assets_tests.support import decon_fixtures as fx


def test_estimate_counts_compressed_files_at_their_text_size(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(b"x" * 1000)
    (tmp_path / "b.jsonl.gz").write_bytes(b"y" * 100)
    est = bb.estimate([tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz", tmp_path / "missing.jsonl"])
    assert est.files == 3 and est.source_bytes == 1000 + 100 * bb.COMPRESSED_RATIO
    assert est.need_bytes == int(bb.BASE_BYTES + bb.BYTES_PER_SOURCE_BYTE * est.source_bytes)


def test_check_memory_refuses_in_one_line_with_the_way_on(monkeypatch):
    monkeypatch.delenv(bb.MEMORY_CHECK_ENV, raising=False)
    est = bb.Estimate(files=226, source_bytes=4_000_000_000, need_bytes=37 * 2**30)
    with pytest.raises(bb.MemoryRefused) as e:
        bb.check_memory(est, available=20 * 2**30)
    msg = str(e.value)
    assert "\n" not in msg
    assert "4,000 MB of benchmark text in 226 file(s) needs about 37.0 GiB" in msg and "20.0 GiB is available" in msg
    assert "more memory" in msg and "--tasks" in msg and "CONTAM_MEMORY_CHECK=off" in msg
    bb.check_memory(est, available=40 * 2**30)  # fits
    monkeypatch.setenv(bb.MEMORY_CHECK_ENV, "off")
    bb.check_memory(est, available=1)
    monkeypatch.setenv(bb.MEMORY_CHECK_ENV, "36GiB")
    with pytest.raises(bb.MemoryRefused, match="36.0 GiB is available"):
        bb.check_memory(est)
    monkeypatch.setenv(bb.MEMORY_CHECK_ENV, "lots")
    with pytest.raises(bb.MemoryRefused, match="must be off, auto or a size"):
        bb.check_memory(est)


def test_progress_lines_only_for_a_long_build(tmp_path):
    files = []
    for k in range(2):
        files.append(tmp_path / f"t{k}.jsonl")
        files[-1].write_bytes(b"z" * 500)
    now = [0.0]
    lines: list[str] = []
    p = bb.BuildProgress(lines.append, 1000, every=10, clock=lambda: now[0], phases=("read", "filter"))
    for i in range(4096):
        p.row(str(files[0]))
    assert lines == []  # under 10 s: nothing
    now[0] = 30.0
    for i in range(4096):
        p.row(str(files[1]))
    assert lines == ["  reference set: 2 file(s), 8,192 instances read, 30s so far, about 5m35s left"]
    now[0] = 45.0
    p.filtered(4096, 8192)
    assert lines[-1] == "  reference set: 8,192 instances read; decon filters 50% done, 45s so far, about 32s left"
    now[0] = 50.0
    p.filtered(8000, 8192)
    assert len(lines) == 2  # 5 s after the last line
    q = bb.BuildProgress(lines.append, 1000, every=10, clock=lambda: now[0], phases=("index",))
    now[0] = 70.0
    q.indexed("token frequencies and answer n-grams", 0.75)
    assert lines[-1] == "  reference set: index 75% (token frequencies and answer n-grams), 20s so far, about 7s left"
    whole = bb.BuildProgress(lines.append, 1000, every=10, clock=lambda: now[0])  # the three phases in one
    now[0] = 190.0
    whole.indexed("question n-grams", 0.5)
    assert lines[-1] == "  reference set: index 50% (question n-grams), 2m00s so far, about 14s left"


def test_detect_refuses_a_registry_over_the_memory_limit_before_building(tmp_path):
    pool = tmp_path / "pool"
    fx.write_jsonl(pool / "a.jsonl", [fx.full_copy(fx.BRIDGE)])
    evals = tmp_path / "evals"
    evals.mkdir()
    (evals / "toy-1.jsonl").write_text("\n".join(fx.reference_lines()) + "\n")
    env = {"DAGSTER_HOME": str(tmp_path / "home"), bb.MEMORY_CHECK_ENV: "100MB"}
    r = contam("detect", "--pool", pool, "--out", tmp_path / "o", "--evals-dir", evals, env_extra=env)
    assert r.returncode == 2, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    assert "needs about" in line and "0.1 GiB is available" in line and "CONTAM_MEMORY_CHECK=off" in line
    assert "Traceback" not in r.stderr
    index = tmp_path / "o" / "index"  # nothing built: at most the benchmark files' hash cache
    assert {p.name for p in index.iterdir()} <= {"source_hashes.json"} if index.exists() else True


def test_available_memory_leaves_the_cgroups_page_cache_out(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       67108864 kB\nMemAvailable:   33554432 kB\n")  # 32 GiB
    cg = tmp_path / "cgroup"
    cg.mkdir()
    (cg / "memory.max").write_text(f"{8 * 2**30}\n")
    (cg / "memory.current").write_text(f"{7 * 2**30}\n")  # near the limit, mostly page cache
    (cg / "memory.stat").write_text(f"anon {2**30}\nfile {6 * 2**30}\ninactive_file {5 * 2**30}\n")
    # used = 7 GiB - 5 GiB inactive cache = 2 GiB; 8 GiB limit leaves 6 GiB
    assert bb.available_memory(meminfo, cg) == 6 * 2**30
    (cg / "memory.stat").unlink()
    assert bb.available_memory(meminfo, cg) == 2**30
    (cg / "memory.max").write_text("max\n")
    assert bb.available_memory(meminfo, cg) == 32 * 2**30
    assert bb.available_memory(tmp_path / "absent", cg) is None
