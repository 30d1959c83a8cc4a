"""`dagster dev` loads the whole graph through workspace.yaml."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_workspace_validates(dagster_home):
    dagster = Path(sys.executable).with_name("dagster")
    r = subprocess.run([str(dagster), "definitions", "validate", "-w", "workspace.yaml"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600, env={**os.environ, "DAGSTER_HOME": str(dagster_home)})
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "All code locations passed validation" in r.stdout + r.stderr


def test_every_domain_is_in_the_graph():
    from contam_assets.definitions import build_definitions

    repo = build_definitions().get_repository_def()
    keys = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    # data side, model side, evaluation
    assert {"task_registry", "reference_set", "ngram_index", "shard_matches", "removals", "removal_report",
            "decontaminated_mix", "evaluation_report", "evaluation_comparison"} <= keys
