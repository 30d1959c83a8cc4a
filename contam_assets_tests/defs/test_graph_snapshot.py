"""The graph as the UI shows it, held in a golden file, and the rules every definition follows.

``graph_golden.json`` lists each asset's key, group, kinds, owners, tags, partitions,
deps, automation condition, freshness policy, code version (its prefix: the digest
changes with every detector edit) and checks, plus the jobs (their assets), the sensors
and schedules with their default status.  A change to the graph shows up as a diff of
that file: regenerate it with CONTAM_REGEN_GRAPH_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from contam_assets.definitions import build_definitions

GOLDEN = Path(__file__).with_name("graph_golden.json")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def repo():
    return build_definitions().get_repository_def()


def _condition(c) -> str | None:
    """A condition's label and its labelled parts: on_new_scans(deps_settled, blocking_checks_passed, ...)."""
    if c is None:
        return None
    parts = [p.get_label() for p in getattr(c, "children", []) if p.get_label()]
    label = c.get_label() or c.name
    return f"{label}({', '.join(parts)})" if parts else label


def _partitions(p) -> str | None:
    if p is None:
        return None
    if isinstance(p, dg.DynamicPartitionsDefinition):
        return f"dynamic:{p.name}"
    return "static:" + ",".join(p.get_partition_keys())


def _freshness(p) -> dict | None:
    if p is None:
        return None
    windows = {k: getattr(p, k, None) for k in ("fail_window", "warn_window")}
    return {k: f"{(w.days * 86400 + w.seconds) / 3600:g}h" for k, w in windows.items() if w is not None}


def snapshot(repo) -> dict:
    g = repo.asset_graph
    assets = {}
    for key in sorted(g.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        n = g.get(key)
        if not n.is_materializable:
            continue
        checks = {}
        for ck in sorted(n.check_keys, key=lambda c: c.name):
            c = g.get(ck)
            checks[ck.name] = {"blocking": c.blocking, "automation": _condition(c.automation_condition)}
        assets[key.to_user_string()] = {
            "group": n.group_name,
            "kinds": sorted(n.kinds),
            "owners": list(n.owners),
            "tags": {k: v for k, v in sorted(n.tags.items()) if not k.startswith("dagster/kind/")},
            "partitions": _partitions(n.partitions_def),
            "deps": sorted(k.to_user_string() for k in n.parent_keys),
            "automation": _condition(n.automation_condition),
            "freshness": _freshness(n.freshness_policy),
            "code_version": n.code_version.split("-")[0] if n.code_version else None,
            "checks": checks,
        }
    jobs = {}
    for job in sorted(repo.get_all_jobs(), key=lambda j: j.name):
        if job.name.startswith("__"):
            continue
        jobs[job.name] = sorted(k.to_user_string() for k in job.asset_layer.selected_asset_keys)
    sensors = {s.name: {"default_status": s.default_status.value, "jobs": sorted(j.name for j in s.jobs) if s.has_jobs else []}
               for s in sorted(repo.sensor_defs, key=lambda s: s.name)}
    schedules = {s.name: {"cron": s.cron_schedule, "job": s.job_name, "default_status": s.default_status.value}
                 for s in sorted(repo.schedule_defs, key=lambda s: s.name)}
    return {"assets": assets, "jobs": jobs, "sensors": sensors, "schedules": schedules}


def test_graph_matches_the_golden_snapshot(repo):
    snap = snapshot(repo)
    text = json.dumps(snap, indent=1, sort_keys=True) + "\n"
    if os.environ.get("CONTAM_REGEN_GRAPH_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert json.loads(GOLDEN.read_text()) == snap, "graph changed: regenerate with CONTAM_REGEN_GRAPH_GOLDEN=1, review the diff"


def test_every_asset_says_what_and_who(repo):
    g = repo.asset_graph
    for key in g.get_all_asset_keys():
        n = g.get(key)
        name = key.to_user_string()
        assert n.description and len(n.description) > 20, name
        assert n.owners and all(o.startswith("team:") for o in n.owners), name
        assert n.kinds, name
        assert n.group_name and n.group_name != "default", name
        assert {"contam/side", "contam/domain"} <= set(n.tags), name
        for ck in n.check_keys:
            c = g.get(ck)
            assert c.description, ck
            assert "owners" in c.metadata and "guards" in c.metadata, ck


def test_downstream_of_the_sensors_moves_by_automation_conditions(repo):
    g = repo.asset_graph
    for name in ("removals", "removal_report", "decontaminated_mix", "evaluation_report", "evaluation_comparison"):
        assert g.get(dg.AssetKey(name)).automation_condition is not None, name
    for name in ("removal_report", "decontaminated_mix"):
        assert g.get(dg.AssetKey(name)).freshness_policy is not None, name
    for name in ("task_registry", "reference_set", "ngram_index", "shard_matches"):
        assert g.get(dg.AssetKey(name)).code_version, name
    # the consistency check of scan state is not part of a shard's run, and runs on its own schedule
    assert dg.AssetCheckKey(dg.AssetKey("shard_matches"), "scan_state_current") not in g.asset_check_keys
    check = g.get(dg.AssetCheckKey(dg.AssetKey("removals"), "scan_state_current"))
    assert check.automation_condition is not None
    scan_job = repo.get_job("scan_shards")
    assert {k.name for k in scan_job.asset_layer.asset_graph.asset_check_keys} >= {"shard_conservation"}


def test_sensors_and_schedules_are_described_and_stopped_by_default(repo):
    for s in [*repo.sensor_defs, *repo.schedule_defs]:
        assert s.description and len(s.description) > 30, s.name
        assert s.default_status.value == "STOPPED", s.name
    assert "contam_automation_sensor" in {s.name for s in repo.sensor_defs}


def test_loading_the_definitions_and_running_a_job_print_no_beta_preview_or_supersession_warning(tmp_path):
    """Every Dagster warning category is an error in a fresh process that loads the graph and runs a job of it."""
    script = """
import warnings
import dagster as dg
from dagster._utils.warnings import BetaWarning, PreviewWarning, SupersessionWarning
for cat in (BetaWarning, PreviewWarning, SupersessionWarning, DeprecationWarning):
    warnings.simplefilter("error", cat)
from contam_assets.definitions import build_definitions
defs = build_definitions()
defs.get_repository_def().get_all_jobs()
from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.runner import data_definitions
s = ContamSettings(out_dir=r"{out}")
job = data_definitions(s).resolve_job_def("build_reference")
result = job.execute_in_process(instance=dg.DagsterInstance.get())
assert result.success
print("OK", result.dagster_run.job_name)
""".format(out=tmp_path / "out")
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "DAGSTER_HOME": str(home)})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "OK build_reference" in r.stdout
    assert "Warning" not in r.stderr, r.stderr[-3000:]
