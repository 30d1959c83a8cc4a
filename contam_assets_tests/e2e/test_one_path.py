"""One path: a pool brought through the daemon (sensor ticks, their runs, automation ticks and the runs they request)
and the same pool through `contam detect` (the command's entry, contam_assets.cli.main, in this process) leave the
same output files.

Normalized before the files are compared, and nothing else:
- the output folder's own path (run.json and mix_stats.path record it): replaced by ``OUT`` in text files and in
  the string columns of the tables;
- contam.duckdb is compared table by table, and Parquet files and the index's records.arrow (its string-view
  buffers are laid out as the table was built) as rows, without the columns holding times
  (timestamp columns, ``seconds``, ``scanned_at``-like fields: every datetime column and the ``seconds`` column);
- report.html without its lines that carry a time;
- a temporary file's name in an error message (``.tmp-<pid>-<random>``: store/files.temp_path): ``.tmp-X``;
- the saved token ids' stamp of the records file (index/reference/records.tokens.json): its size kept, its time and
  inode (each folder's own file) left out;
- the Dagster instances live outside the output folders (their own home folders), so run ids never enter them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from contam_assets import store
from contam_assets.defs.data import runs as runs_mod
from contam_assets.defs.data.sensors import new_shards_sensor, new_tasks_sensor
from contam_assets.runner import StepFailed, data_definitions, data_side, execute, run_apply, run_detect
from contam_assets.store.door import check_units  # noqa: F401 - the door the listing asset applies
from contam_assets_tests.support.automation import (
    TEMP_NAME,
    contam_detect,
    instance,
    make_tasks_dir,
    settings,
    write_pool,
)

# dg.evaluate_automation_conditions (Dagster's own tester) selects with a beta parameter; our definitions do not
pytestmark = pytest.mark.filterwarnings("ignore:Parameter `include_sources`:dagster._utils.warnings.BetaWarning")
TIME_COLUMNS = {"seconds", "build_seconds", "write_seconds"}


def _apply(result, inst: dg.DagsterInstance) -> None:
    """A sensor's dynamic partition requests, applied as the daemon applies them."""
    for r in result.dynamic_partitions_requests or []:
        if isinstance(r, dg.AddDynamicPartitionsRequest):
            inst.add_dynamic_partitions(r.partitions_def_name, list(r.partition_keys))
        else:
            for k in r.partition_keys:
                inst.delete_dynamic_partition(r.partitions_def_name, k)


def _tick(sensor, inst, s, cursor=None):
    return sensor(dg.build_sensor_context(instance=inst, cursor=cursor, resources={"contam_settings": s}))


def daemon(s, inst) -> list[str]:
    """Sensor ticks and the runs they request, then automation ticks and theirs until nothing more is requested;
    the jobs run, in order."""
    defs = data_definitions(s)
    assets, checks = data_side(defs)
    auto_defs = dg.Definitions(assets=assets, asset_checks=checks, resources=defs.resources)
    # the automation sensor ticks all along: its first tick, before anything ran, is the baseline of "updated"
    cursor = dg.evaluate_automation_conditions(defs=auto_defs, instance=inst).cursor
    ran = []
    for sensor in (new_tasks_sensor, new_shards_sensor):
        res = _tick(sensor, inst, s)
        _apply(res, inst)
        for req in res.run_requests:
            req = dg.RunRequest(run_key=req.run_key, run_config=req.run_config, tags=req.tags, partition_key=req.partition_key,
                                asset_selection=req.asset_selection, job_name=req.job_name or sensor.job_name)
            execute(defs, req, inst, log=lambda _: None)
            ran.append(req.job_name or sensor.job_name)
    for _ in range(8):
        tick = dg.evaluate_automation_conditions(defs=auto_defs, instance=inst, cursor=cursor)
        cursor = tick.cursor
        wanted = {a.key: tick.get_requested_partitions(a.key) for a in assets if tick.get_num_requested(a.key)}
        if not wanted:
            break
        plain = [k for k, parts in wanted.items() if parts == {None}]
        if plain:  # the unpartitioned assets requested together: one run
            assert dg.materialize(assets + checks, selection=plain, resources=auto_defs.resources, instance=inst).success
            ran.append("+".join(sorted(k.to_user_string() for k in plain)))
        for k, parts in wanted.items():
            for p in sorted(p for p in parts if p is not None):  # a run per partition
                ok = dg.materialize(assets + checks, selection=[k], partition_key=p, resources=auto_defs.resources,
                                    instance=inst, raise_on_error=False).success
                ran.append(f"{k.to_user_string()}[{p}]" + ("" if ok else " failed"))
    return ran


def _frame(df: pl.DataFrame, out: Path) -> pl.DataFrame:
    drop = [c for c, t in df.schema.items() if c in TIME_COLUMNS or t.is_temporal()]
    df = df.drop(drop).with_columns(pl.col(pl.Utf8).str.replace_all(str(out), "OUT", literal=True)
                                    .str.replace_all(TEMP_NAME, ".tmp-X"))
    return df.sort(df.columns) if df.columns and df.height else df


def _tables(out: Path) -> dict[str, pl.DataFrame]:
    with store.connect(out / "contam.duckdb", read_only=True) as con:
        names = [r[0] for r in con.execute("select table_name from information_schema.tables order by 1").fetchall()]
        return {n: _frame(store.query_df(con, f'select * from "{n}"'), out) for n in names}


def _text(p: Path, out: Path) -> str:
    text = re.sub(TEMP_NAME, ".tmp-X", p.read_text(errors="replace").replace(str(out), "OUT"))
    if p.name == "records.tokens.json":
        stamp = json.loads(text)
        return json.dumps(stamp | {"records": stamp["records"][:1]}, sort_keys=True)
    if p.name == "report.html":
        text = "\n".join(line for line in text.splitlines() if not re.search(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d", line))
    return text


def outputs(out: Path) -> dict[str, object]:
    """Every file under the output folder: relative path -> comparable content (see the module's docstring)."""
    found = {}
    for p in sorted(out.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(out).as_posix()
        if rel == "contam.duckdb":
            found[rel] = _tables(out)
        elif p.suffix == ".parquet":
            found[rel] = _frame(pl.read_parquet(p), out)
        elif p.suffix == ".arrow":  # the records as the scan maps them: the same rows, buffers laid out as built
            found[rel] = _frame(pl.read_ipc(p), out)
        elif p.suffix in (".json", ".jsonl", ".html", ".txt", ".md") and p.stat().st_size < 50 << 20:
            found[rel] = _text(p, out)
        else:
            found[rel] = p.read_bytes()
    return found


def _same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, pl.DataFrame):
        return isinstance(b, pl.DataFrame) and a.equals(b)
    return a == b


@pytest.fixture(scope="module")
def both(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("one_path")
    pool, tasks = root / "pool", make_tasks_dir(root / "tasks")
    write_pool(pool, shared_data, n_shards=3, docs=20)
    by_daemon = settings(root / "daemon", pool, tasks, shared_data)
    by_cli = settings(root / "cli", pool, tasks, shared_data)
    ran = daemon(by_daemon, instance(root / "home-daemon"))
    rc, printed = contam_detect(by_cli, root / "home-cli")
    return dict(pool=pool, tasks=tasks, shared=shared_data, root=root, daemon=by_daemon, cli=by_cli, ran=ran,
                rc=rc, printed=printed)


def differences(d: dict, c: dict) -> list[str]:
    return [f"{k}:{t}" if isinstance(d[k], dict) else k for k in d
            for t in (sorted(set(d[k]) | set(c[k])) if isinstance(d[k], dict) else [None])
            if not _same(d[k].get(t) if t else d[k], c[k].get(t) if t else c[k])]


def test_the_daemon_and_contam_detect_leave_the_same_output_files(both):
    ran = both["ran"]
    assert ran[:2] == ["build_reference", "scan_shards"] and "pool_tables" in ran[-1], ran  # published last
    assert not any(r.endswith(" failed") for r in ran), ran
    assert both["rc"] == 0, both["printed"][-3000:]
    assert "3 pool file(s) listed, 3 ok, 0 incomplete, 0 failed, 0 skipped" in both["printed"].splitlines()
    d, c = outputs(both["daemon"].out_path), outputs(both["cli"].out_path)
    assert sorted(d) == sorted(c)
    assert {"run.json", "report.html", "contam.duckdb", "tables/matches/part-0.parquet"} <= set(d)
    assert any(k.startswith("mix/") for k in d)
    assert differences(d, c) == []
    assert json.loads(d["run.json"])["files"]["ok"] == 3  # counted by pool_tables on both paths
    assert d["contam.duckdb"]["removals"].height > 0


def test_a_mix_that_fails_is_named_in_the_report_on_both_paths(both, tmp_path):
    """The mix of part-001.jsonl cannot be written (its mix file's path is taken by a folder) on both paths: the
    report is written before the mix (contam detect) or beside it (the daemon), and rendered again by pool_tables,
    which runs after the mix on both; the two output folders are the same, the report names the failure."""
    s = {}
    for side in ("daemon", "cli"):
        s[side] = settings(tmp_path / side, both["pool"], both["tasks"], both["shared"])
        (s[side].out_path / "mix" / "part-001.jsonl" / "taken").mkdir(parents=True)
    ran = daemon(s["daemon"], instance(tmp_path / "home-daemon"))
    assert "decontaminated_mix[part-001.jsonl] failed" in ran and "pool_tables" in ran[-1], ran
    rc, printed = contam_detect(s["cli"], tmp_path / "home-cli")
    assert rc == 1 and any(line.startswith("FAILED part-001.jsonl") for line in printed.splitlines()), printed[-3000:]
    d, c = outputs(s["daemon"].out_path), outputs(s["cli"].out_path)
    assert sorted(d) == sorted(c) and differences(d, c) == []
    errors = d["contam.duckdb"]["shard_errors"]
    assert errors.select("shard", "step").rows() == [("part-001.jsonl", "mix")]
    report = d["report.html"]
    section = report[report.index("shards that failed a step"):]
    assert "part-001.jsonl" in section[:2000] and "mix" in section[:2000]
    assert json.loads(d["run.json"])["files"] == json.loads(c["run.json"])["files"]
    assert json.loads(d["run.json"])["files"]["failed"] == 1


def test_a_file_that_left_the_pool_is_retired_by_the_one_rule(both, tmp_path):
    """The sensor plans (deletes the partition, requests pool_listing alone) and changes no table; the listing run
    retires the rows and files; `contam detect` retires by the same asset."""
    import shutil

    pool = tmp_path / "pool"
    shutil.copytree(both["pool"], pool)
    s = settings(tmp_path / "out", pool, both["tasks"], both["shared"])
    inst = instance(tmp_path / "home")
    run_detect(s, inst, log=lambda _: None)
    (pool / "part-001.jsonl").unlink()
    plan = runs_mod.pool_plan(s, inst)
    assert plan.gone == ["part-001.jsonl"] and plan.delete == ["part-001.jsonl"] and plan.add == []
    # `contam apply` runs no listing: it retires nothing and deletes no partition (the file keeps its rows, its
    # partition and its mix file until a listing run retires it), and does not mix it
    said: list[str] = []
    run_apply(s, inst, log=said.append)
    assert "part-001.jsonl" in inst.get_dynamic_partitions("shards") and (s.out_path / "mix" / "part-001.jsonl").exists()
    assert any("left the pool" in line and "part-001.jsonl" in line for line in said), said
    with store.connect(s.db_path, read_only=True) as con:
        assert con.execute("select count(*) from shard_stats where shard = 'part-001.jsonl'").fetchone()[0] == 1
        assert con.execute("select count(*) from shard_errors where shard = 'part-001.jsonl'").fetchone()[0] == 0
    assert runs_mod.pool_plan(s, inst).delete == ["part-001.jsonl"]
    second = run_detect(s, inst, log=lambda _: None)
    assert second["retired"] == ["part-001.jsonl"] and "part-001.jsonl" not in inst.get_dynamic_partitions("shards")
    with store.connect(s.db_path, read_only=True) as con:
        assert con.execute("select count(*) from shard_stats where shard = 'part-001.jsonl'").fetchone()[0] == 0
        assert con.execute("select count(*) from retired_shards where shard = 'part-001.jsonl'").fetchone()[0] == 1
    assert not (s.out_path / "mix" / "part-001.jsonl").exists()
    # a file of the pool that this output folder never scanned is not this folder's to retire
    assert runs_mod.plan_for({"a.jsonl": (1, 1)}, ["a.jsonl", "other.jsonl"], []).delete == []


def test_a_refused_door_fails_a_daemon_started_run_before_any_scan(tmp_path, shared_data):
    pool, tasks = tmp_path / "pool", make_tasks_dir(tmp_path / "tasks")
    pool.mkdir()
    (pool / "part-0.jsonl").write_text("\n".join(json.dumps({"id": i, "content": f"doc {i}"}) for i in range(5)) + "\n")
    s = settings(tmp_path / "out", pool, tasks, shared_data)
    inst = instance(tmp_path / "home")
    res = _tick(new_shards_sensor, inst, s)
    _apply(res, inst)
    assert [r.partition_key for r in res.run_requests] == ["part-0.jsonl"]
    with pytest.raises(StepFailed) as exc:
        execute(data_definitions(s), res.run_requests[0], inst, log=lambda _: None)
    assert str(exc.value) == "no 'text' in part-0.jsonl; it has: id, content — pass --content-key content"
    run = inst.get_runs(limit=1)[0]
    mats = inst.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
    assert mats == []  # neither the listing nor any scan materialized
    # with the right key the door passes, and remembers it: a second listing reads no file again
    s2 = settings(tmp_path / "out", pool, tasks, shared_data, content_key="content")
    defs = data_definitions(s2)
    first = execute(defs, runs_mod.listing_request(), inst, log=lambda _: None)
    again = execute(defs, runs_mod.listing_request(), inst, log=lambda _: None)
    md = [r.asset_materializations_for_node("pool_listing")[0].metadata for r in (first, again)]
    assert (md[0]["door_checked"].value, md[1]["door_checked"].value, md[1]["door_unchanged"].value) == (1, 0, 1)


def test_cut_runs_one_rule_for_the_sensors_and_the_cli():
    order = ["a", "b", "c", "d", "e", "f"]
    assert runs_mod.cut_runs(order, {"a", "b", "d", "e", "f"}) == [["a", "b"], ["d", "e", "f"]]  # the CLI: stretches
    assert runs_mod.cut_runs(order, set(order), max_files=1) == [[k] for k in order]  # a run per partition
    sizes = {"a": 5, "b": 5, "c": 5, "d": 20, "e": 1, "f": 1}
    counts = {"e": 3}
    assert runs_mod.cut_runs(order, set(order), sizes, counts, max_bytes=10, max_files=4) == [
        ["a", "b"], ["c"], ["d"], ["e", "f"]]  # d alone over the byte limit; e stands for 3 files
    assert runs_mod.cut_runs(order, set(order), sizes, counts, max_bytes=100, max_files=3) == [
        ["a", "b", "c"], ["d"], ["e"], ["f"]]
    plan = runs_mod.plan_for({"a": (4, 1), "b": (4, 1)}, ["a", "b"], [])
    assert runs_mod.sensor_runs(plan, {"a", "b"}) == [["a", "b"]]
    req = runs_mod.scan_request(["a", "b"], run_key="k")
    assert req.job_name == "scan_shards" and req.partition_key is None and req.tags["contam/shards"] == "2"
