"""The decon filters' order-free part computed by worker processes (`reference_filters.spilled_verdicts`, the
build_workers setting) gives the files and stats one process gives, byte for byte: planted duplicates across table
boundaries (by content, and by the files' fingerprints in decon mode), records under the token and unique-word
minimums, empty questions, a same-answer suite; and the workers are other processes."""

from __future__ import annotations

import json
import os

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from contam_assets.detector import build_budget as bb
from contam_assets.detector.config import DECON_MODE, preset
from contam_assets.detector.record_tokens import TOKENS_FILE
from contam_assets.sources import reference, reference_filters, reference_reuse
from contam_assets.sources.registry import decon_spec
from contam_assets.store import artifacts

WORDS = ("amber birch cedar delta ember fjord glacier harbor island juniper kettle lagoon meadow nectar orchid pebble "
         "quartz raven spruce tundra").split()


def lines_of(task: int, n: int = 70) -> list[dict]:
    out = []
    for i in range(n):
        q = " ".join(WORDS[(i * 3 + k * (task + 1)) % len(WORDS)] for k in range(16)) + f" task {task} item {i}"
        line = dict(eval_key=f"task{task}", eval_instance_index=i, split="test", question=q, answer=f"answer {i}",
                    doc_id=task * 1000 + i, fingerprint=f"t{task}-{i % 50}")  # fingerprints repeat after 50 lines
        if i % 9 == 4:
            line.update(question="too short", answer="no")  # under the token minimum
        elif i % 9 == 6:
            line.update(question=" ".join(["lagoon", "raven"] * 15), answer="raven")  # many tokens, two words
        elif i % 9 == 7:
            line.update(question="?!", passage=" ".join(WORDS), answer="amber")  # cleaned question empty
        elif i >= 40 and i % 5 == 0:
            line.update(question=out[i - 40]["question"], answer=out[i - 40]["answer"])  # a copy 40 lines back
        out.append(line)
    return out


def planted(folder):
    folder.mkdir(parents=True)
    for t in range(4):
        lines = lines_of(t)
        (folder / f"task{t}.jsonl").write_text("# planted\n" + "".join(json.dumps(r) + "\n" for r in lines))
    same = [dict(eval_key="same", eval_instance_index=i, question=f"{' '.join(WORDS[i % 7:])} item {i}", answer="yes")
            for i in range(30)]  # every answer the same: indexed on the question alone
    (folder / "same.jsonl").write_text("".join(json.dumps(r) + "\n" for r in same))
    return folder


@pytest.fixture()
def small_tables(monkeypatch):
    monkeypatch.setattr(reference, "COLUMNS_CHUNK", 37)  # 310 records: 9 tables, duplicates across their bounds
    monkeypatch.setattr(reference, "FILTER_CHUNK", 11)


def recorded(monkeypatch) -> list[int]:
    """The process ids of the workers that computed each table's order-free part, in the builds that follow."""
    pids: list[int] = []

    class Recorded(reference_filters.FilterPool):
        def __init__(self, cfg, workers):
            super().__init__(cfg, workers)
            self.pids = pids

    monkeypatch.setattr(reference_filters, "FilterPool", Recorded)
    return pids


def built(folder, specs, cfg, workers):
    n, stats = reference.write_reference_set(specs, None, cfg, folder, workers=workers)
    return n, stats


@pytest.mark.parametrize("mode", ["default", "decon"])
def test_two_workers_write_what_one_process_writes(tmp_path, small_tables, monkeypatch, mode):
    cfg = preset("default") if mode == "default" else preset("default", **DECON_MODE)
    specs = [decon_spec(str(planted(tmp_path / "evals")), name="planted")]
    pids = recorded(monkeypatch)
    one, two = tmp_path / "one", tmp_path / "two"
    n1, s1 = built(one, specs, cfg, 1)
    assert pids == []  # one process: no pool
    n2, s2 = built(two, specs, cfg, 2)
    assert n1 == n2 == 310 and s1 == s2
    assert len(pids) == 9 and os.getpid() not in pids  # every table's order-free part from a worker
    for name in (artifacts.RECORDS_FILE, TOKENS_FILE):
        assert (one / name).read_bytes() == (two / name).read_bytes(), name
    recs = artifacts.read_records(two)
    assert_frame_equal(recs, artifacts.read_records(one))
    reasons = recs.group_by("skip_reason").len()
    got = dict(zip(reasons["skip_reason"], reasons["len"]))
    assert {"min_tokens", "min_unique_words", "empty_question", "duplicate"} <= set(got)
    dup = recs.filter(pl.col("skip_reason") == "duplicate")
    assert dup.height and (dup["instance_index"] >= 40).all()  # each 40 or more lines after its first: another table
    taken = 30 if cfg.same_answer_rule else 0  # decon mode leaves the same-answer rule off
    assert s2.same_answer_suites == (["same"] if taken else []) and recs.filter(pl.col("suite") == "same")["answer"].null_count() == taken


def test_the_reused_build_with_workers_writes_what_one_process_writes(tmp_path, small_tables, monkeypatch):
    cfg = preset("default")
    evals = planted(tmp_path / "evals")
    specs = [decon_spec(str(evals), name="planted")]
    pids = recorded(monkeypatch)
    for step in range(2):  # from scratch, then one task changed: the others' records reused, its own read and filtered
        got = {}
        for workers in (1, 2):
            out = tmp_path / f"out-{workers}"
            pids.clear()
            got[workers] = reference_reuse.write_reference_set_reusing(specs, None, cfg, out, "v", f"in-{step}",
                                                                        workers=workers)
            artifacts.mark_reference_records(out, f"in-{step}", got[workers][0])
            assert len(pids) == (0 if workers == 1 else 9 if step == 0 else 2) and os.getpid() not in pids
        assert got[1] == got[2]
        one, two = (artifacts.reference_records_dir(tmp_path / f"out-{w}") for w in (1, 2))
        assert (one / artifacts.RECORDS_FILE).read_bytes() == (two / artifacts.RECORDS_FILE).read_bytes()
        assert_frame_equal(artifacts.read_records(one), artifacts.read_records(two))
        assert (one / TOKENS_FILE).is_file() == (step == 0) == (two / TOKENS_FILE).is_file()
        if step == 0:
            assert (one / TOKENS_FILE).read_bytes() == (two / TOKENS_FILE).read_bytes()
        lines = (evals / "task2.jsonl").read_text().splitlines(keepends=True)
        (evals / "task2.jsonl").write_text("".join(lines[:-8]))


def test_fewer_than_two_tables_or_one_worker_run_in_the_process():
    assert reference_filters.filter_workers(1, 4) == 1
    assert reference_filters.filter_workers(9, 1) == 1
    assert reference_filters.filter_workers(9, 2) == 2
    assert reference_filters.filter_workers(3, 8) == 3
    assert reference_filters.filter_workers(9, 0) == min(9, bb.available_cpus())


def test_the_memory_estimate_counts_each_worker_that_can_start(tmp_path):
    with open(tmp_path / "a.jsonl", "wb") as f:  # sparse: three tables' worth of benchmark text, nothing on disk
        f.truncate(int(3 * bb.BYTES_PER_TABLE))
    one, two = bb.estimate([tmp_path / "a.jsonl"]), bb.estimate([tmp_path / "a.jsonl"], 2)
    assert two.need_bytes - one.need_bytes == 2 * bb.BYTES_PER_FILTER_WORKER and two.workers == 2
    assert bb.estimate([tmp_path / "a.jsonl"], 32).workers == 4  # at most one a table
    with pytest.raises(bb.MemoryRefused) as e:
        bb.check_memory(two, available=one.need_bytes // 2)
    assert f"CONTAM_BUILD_WORKERS=1 needs {one.need_bytes / 2**30:.1f} GiB" in str(e.value)
    # fewer processes where that fits, the build's own where only it fits, one line where nothing does
    assert bb.fitting(two, available=two.need_bytes) == two
    assert bb.fitting(two, available=one.need_bytes) == one
    with pytest.raises(bb.MemoryRefused):
        bb.fitting(two, available=one.need_bytes - 1)
    # a registry of under two tables starts no worker and counts none, however many cores
    (tmp_path / "b.jsonl").write_bytes(b"x" * 1000)
    tiny = bb.estimate([tmp_path / "b.jsonl"], 64)
    assert tiny.workers == 1 and tiny.need_bytes == bb.estimate([tmp_path / "b.jsonl"]).need_bytes


def dying_table(raw, batch, *args):
    """A worker's table, except the third: the worker is killed there, as the kernel would kill it."""
    if batch == 2:
        os._exit(9)
    return reference_filters._spilled_table(raw, batch, *args)


def test_a_killed_worker_leaves_the_rest_to_the_build_with_the_same_files(tmp_path, small_tables, monkeypatch):
    cfg = preset("default")
    specs = [decon_spec(str(planted(tmp_path / "evals")), name="planted")]
    one, two = tmp_path / "one", tmp_path / "two"
    n1, s1 = built(one, specs, cfg, 1)
    monkeypatch.setattr(reference_filters, "_spilled_table", dying_table)  # sent by name: the workers import this module
    pools = []

    class Kept(reference_filters.FilterPool):
        def __init__(self, cfg, workers):
            super().__init__(cfg, workers)
            pools.append(self)

    monkeypatch.setattr(reference_filters, "FilterPool", Kept)
    n2, s2 = built(two, specs, cfg, 2)
    assert pools and pools[0].broken and len(pools[0].pids) <= 2  # at most two tables from the workers, then the break
    assert n1 == n2 == 310 and s1 == s2
    for name in (artifacts.RECORDS_FILE, TOKENS_FILE):
        assert (one / name).read_bytes() == (two / name).read_bytes(), name
