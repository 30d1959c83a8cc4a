"""The reference set written again with the records of unchanged units taken from the last build
(`reference_reuse.write_reference_set_reusing`, what `reference_set` runs) gives the files and stats a build from
scratch (`write_reference_set`) gives: a task added, removed or changed; suites that span files (the same-answer rule
and the duplicate check across them), whose files are then read again; the registry's own specs; and the answer
suites, built whole."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from contam_assets.defs.resources import DEFAULT_TASKS_DIR
from contam_assets.detector.config import DECON_MODE, preset
from contam_assets.sources import reference, reference_reuse
from contam_assets.sources.registry import decon_spec, load_registry
from contam_assets.store import artifacts

WORDS = ("river stone lamp orchard violet copper meadow signal harbor lantern quiet ember falcon thistle marble "
         "cobalt willow saddle canyon beacon").split()


def task_lines(name: str, n: int, seed: int, answer=None, fingerprints=True) -> list[dict]:
    out = []
    for i in range(n):
        q = " ".join(WORDS[(i * 7 + k * (seed % 5 + 1) + seed) % len(WORDS)] for k in range(14)) + f" {name} item {i % (n - 3)}"
        line = dict(eval_key=name, eval_instance_index=i, split="test" if seed % 2 else "train",
                    question=q if i % 11 else "too short", answer=answer if answer is not None else f"answer {seed} {i}",
                    doc_id=seed * 1000 + i)
        if fingerprints:
            line["fingerprint"] = f"{name}-{i % (n - 2)}"
        out.append(line)
    return out


def write(folder, name, lines) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.jsonl").write_text("# a comment line\n" + "".join(json.dumps(r) + "\n" for r in lines))


def registry(folder, n_tasks=6, size=40):
    for t in range(n_tasks):
        write(folder, f"task{t:02d}", task_lines(f"task{t:02d}", size, t))
    (folder / "task03.jsonl").write_text((folder / "task03.jsonl").read_text() + "not json\n")  # an unreadable row
    return folder


def scratch(tmp_path, specs, bench, cfg):
    folder = tmp_path / f"scratch-{len(list(tmp_path.glob('scratch-*')))}"
    n, stats = reference.write_reference_set(specs, bench, cfg, folder)
    return folder, n, stats


def grown(out, specs, bench, cfg, inputs):
    lines: list[str] = []
    n, stats = reference_reuse.write_reference_set_reusing(specs, bench, cfg, out, "v", inputs, say=lines.append)
    artifacts.mark_reference_records(out, inputs, n)  # as `reference_set` marks them once its tables hold them
    units = json.loads((artifacts.reference_records_dir(out) / reference_reuse.UNITS).read_text())
    return n, stats, lines, units


def assert_same(out, folder, n, stats, expected_n, expected):
    got = artifacts.reference_records_dir(out)
    assert n == expected_n
    assert_frame_equal(artifacts.read_records(got), artifacts.read_records(folder))
    assert_frame_equal(pl.read_parquet(got / artifacts.RECORDS_FILE), pl.read_parquet(folder / artifacts.RECORDS_FILE))
    assert reference_reuse._batch_rows(got) == reference_reuse._batch_rows(folder)  # the same tables written
    assert (stats.same_answer_suites, stats.availability, stats.bad_rows, list(stats.row_skips.items()),
            list(stats.notes.items())) == (expected.same_answer_suites, expected.availability, expected.bad_rows,
                                           list(expected.row_skips.items()), list(expected.notes.items()))
    assert not [p.name for p in got.iterdir() if p.name.startswith(".")]  # the spill and temporaries gone


@pytest.fixture()
def small_tables(monkeypatch):
    monkeypatch.setattr(reference, "COLUMNS_CHUNK", 37)  # tables span units, units span tables
    monkeypatch.setattr(reference, "FILTER_CHUNK", 11)


@pytest.mark.parametrize("mode", ["default", "decon"])
def test_added_removed_and_changed_tasks_give_what_a_build_gives(tmp_path, small_tables, mode):
    cfg = preset("default") if mode == "default" else preset("default", **DECON_MODE)
    evals, out = registry(tmp_path / "evals"), tmp_path / "out"
    specs = [decon_spec(str(evals), name="decon_evals")]
    n, stats, lines, units = grown(out, specs, None, cfg, "in-0")
    folder, m, expected = scratch(tmp_path, specs, None, cfg)
    assert_same(out, folder, n, stats, m, expected)
    assert lines == [] and len(units["units"]) == 6 and all(u["alone"] for u in units["units"])

    write(evals, "task02-added", task_lines("task02-added", 55, 9))  # sorts in the middle: the records after it move
    (evals / "task05.jsonl").unlink()
    lines5 = (evals / "task04.jsonl").read_text().splitlines(keepends=True)
    (evals / "task04.jsonl").write_text("".join(lines5[:-5]))  # a task changed
    n, stats, lines, units = grown(out, specs, None, cfg, "in-1")
    folder, m, expected = scratch(tmp_path, specs, None, cfg)
    assert_same(out, folder, n, stats, m, expected)
    assert lines[0].startswith("  reference set: 4 of 6 unit(s) unchanged,")  # task00, 01, 02, 03 reused
    assert 0 < expected.row_skips[("decon_evals", "*", "unreadable")] and expected.bad_rows

    (evals / "task00.jsonl").unlink()  # the first task removed: every record after it moves
    n, stats, lines, _ = grown(out, specs, None, cfg, "in-2")
    folder, m, expected = scratch(tmp_path, specs, None, cfg)
    assert_same(out, folder, n, stats, m, expected)
    assert lines[0].startswith("  reference set: 5 of 5 unit(s) unchanged,")


def test_suites_that_span_files_are_read_again_together(tmp_path, small_tables):
    cfg = preset("default")
    evals, out = registry(tmp_path / "evals", n_tasks=4), tmp_path / "out"
    # a suite over two files, every answer the same (the same-answer rule) and fingerprints repeated (the duplicates)
    write(evals, "same-a", task_lines("same", 30, 5, answer="yes"))
    write(evals, "same-b", task_lines("same", 30, 5, answer="yes"))
    specs = [decon_spec(str(evals), name="decon_evals")]
    n, stats, lines, units = grown(out, specs, None, cfg, "in-0")
    folder, m, expected = scratch(tmp_path, specs, None, cfg)
    assert_same(out, folder, n, stats, m, expected)
    assert expected.same_answer_suites == ["same"] and [u["alone"] for u in units["units"]].count(False) == 2

    write(evals, "same-c", task_lines("same", 30, 6, answer="no"))  # the suite no longer has one answer
    n, stats, lines, _ = grown(out, specs, None, cfg, "in-1")
    folder, m, expected = scratch(tmp_path, specs, None, cfg)
    assert_same(out, folder, n, stats, m, expected)
    assert expected.same_answer_suites == [] and lines[0].startswith("  reference set: 4 of 7 unit(s) unchanged,")

    (evals / "same-c.jsonl").unlink()
    (evals / "same-b.jsonl").unlink()  # the suite in one file again: its rule and duplicates that file's alone
    (evals / "task01.jsonl").rename(evals / "task01.jsonl.moved")  # and a task gone
    (evals / "extra.jsonl").write_text("".join(json.dumps(dict(r, eval_key="task02")) + "\n"
                                               for r in task_lines("task02", 12, 2)))  # a file adding to task02's suite
    n, stats, lines, _ = grown(out, specs, None, cfg, "in-2")
    folder, m, expected = scratch(tmp_path, specs, None, cfg)
    assert_same(out, folder, n, stats, m, expected)
    assert lines[0].startswith("  reference set: 2 of 5 unit(s) unchanged,")  # task00, task03


def test_the_registrys_own_specs_added_and_removed(shared_data, tmp_path, small_tables, monkeypatch):
    monkeypatch.setattr(reference, "COLUMNS_CHUNK", 997)
    bench = tmp_path / "bench"
    bench.mkdir()
    for name in ("gsm8k_test.jsonl", "HumanEval.jsonl.gz", "gsm8k_train.jsonl"):
        shutil.copy(shared_data / name, bench / name)
    cfg, out = preset("default"), tmp_path / "out"
    for step, names in enumerate((["gsm8k"], ["humaneval", "gsm8k"], ["gsm8k"])):
        specs = load_registry(DEFAULT_TASKS_DIR, names)
        n, stats, lines, units = grown(out, specs, bench, cfg, f"in-{step}")
        folder, m, expected = scratch(tmp_path, specs, bench, cfg)
        assert_same(out, folder, n, stats, m, expected)
        if step:
            assert lines[0].startswith(f"  reference set: 1 of {len(names)} unit(s) unchanged,")
    assert m > 8_000 and any(s["task"] == "gsm8k" for s in expected.availability)


def test_answer_suites_are_built_whole_and_leave_no_units(shared_data, tmp_path, monkeypatch):
    monkeypatch.setattr(reference, "COLUMNS_CHUNK", 997)
    specs = load_registry(DEFAULT_TASKS_DIR, ["gsm8k"])
    out = tmp_path / "out"
    grown(out, specs, shared_data, preset("default"), "in-0")
    cfg = preset("default", answer_suites=True)
    n, stats = reference_reuse.write_reference_set_reusing(specs, shared_data, cfg, out, "v", "in-1")
    folder, m, expected = scratch(tmp_path, specs, shared_data, cfg)
    assert_same(out, folder, n, stats, m, expected)
    assert stats.answer_suites == ["gsm8k_answer"] and not (artifacts.reference_records_dir(out) / reference_reuse.UNITS).exists()


def test_a_build_that_was_not_marked_is_not_reused(tmp_path, small_tables):
    cfg, evals, out = preset("default"), registry(tmp_path / "evals", n_tasks=4), tmp_path / "out"
    specs = [decon_spec(str(evals), name="decon_evals")]
    grown(out, specs, None, cfg, "in-0")
    artifacts.forget_reference_records(out)  # a build that stopped before its tables held it
    n, stats, lines, _ = grown(out, specs, None, cfg, "in-1")
    assert lines == []  # every unit read
    n, stats, lines, _ = grown(out, specs, None, preset("default", eval_min_token_length=3), "in-2")
    assert lines == []  # other knobs: every unit read
    folder, m, expected = scratch(tmp_path, specs, None, preset("default", eval_min_token_length=3))
    assert_same(out, folder, n, stats, m, expected)


def test_contam_detect_with_a_task_added_keeps_the_others_and_fills_the_tables_a_build_fills(tmp_path):
    from contam_assets_tests.sources.test_reference_reuse import contam, table

    evals, pool = registry(tmp_path / "evals", n_tasks=5, size=60), tmp_path / "pool"
    pool.mkdir()
    item = task_lines("task01", 60, 1)[4]
    docs = [{"text": f"Notes.\n{item['question']} {item['answer']}\nThe end."}]
    docs += [{"text": "A clean note about tomatoes and the rain in the garden this week. " * 3} for _ in range(3)]
    (pool / "shard.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    out, home = tmp_path / "out", tmp_path / "home"
    contam("detect", "--evals-dir", evals, "--pool", pool, "--out", out, "--allow-missing", home=home)
    write(evals, "task02-added", task_lines("task02-added", 50, 9))
    r = contam("detect", "--evals-dir", evals, "--pool", pool, "--out", out, "--allow-missing", home=home)
    assert "reference set: 5 of 6 unit(s) unchanged" in r.stdout
    fresh = tmp_path / "fresh"
    contam("detect", "--evals-dir", evals, "--pool", pool, "--out", fresh, "--allow-missing",
           home=tmp_path / "fresh-home")
    for sql in ("select * from instances order by record_id", "select * from reference_summary order by all",
                "select * exclude (seconds, built_at) from reference_state", "select * from detect_settings order by all",
                "select shard, line, suite, instance_index from matches where flagged order by all"):
        assert table(out / "contam.duckdb", sql) == table(fresh / "contam.duckdb", sql), sql
    assert len(table(out / "contam.duckdb", "select * from instances")) == 5 * 60 + 50
    assert table(out / "contam.duckdb", "select sum(removed) from shard_stats") == [(1,)]
