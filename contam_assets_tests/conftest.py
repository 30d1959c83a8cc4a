"""Shared fixtures.  Every test session gets its own DAGSTER_HOME and CONTAM_OUT."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("CONTAM_SHARED_DATA", PROJECT_ROOT.parent / "shared" / "data")).resolve()


def pytest_configure(config):
    # Set before anything imports dagster: never fall back to a temporary instance by accident.
    # one instance per xdist worker: two workers never share a SQLite event log
    home = PROJECT_ROOT / ".pytest_dagster_home" / os.environ.get("PYTEST_XDIST_WORKER", "main")
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").touch()
    os.environ["DAGSTER_HOME"] = str(home)
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"benchmark data folder not found: {SHARED_DATA} (set CONTAM_SHARED_DATA)")
    return SHARED_DATA


@pytest.fixture
def dagster_home(tmp_path, monkeypatch) -> Path:
    """A fresh DAGSTER_HOME for tests that need an isolated instance."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").touch()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def sandbox():
    """The pass@1 sandbox (bubblewrap); skipped where it cannot run, except in CI (CONTAM_REQUIRE_SANDBOX=1)."""
    from contam_assets.model.sandbox import sandbox_status

    status = sandbox_status()
    if not status.ok:
        if os.environ.get("CONTAM_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"sandbox required (CONTAM_REQUIRE_SANDBOX=1) but unavailable: {status.reason}")
        pytest.skip(f"sandbox unavailable: {status.reason}")
    return status


@pytest.fixture(scope="session")
def two_tasks(shared_data):
    """(config, reference records, index) of GSM8K and MBPP from the shared data, default preset (built once)."""
    from contam_assets.defs.resources import DEFAULT_TASKS_DIR
    from contam_assets.detector.config import preset
    from contam_assets.detector.index import build_index
    from contam_assets.detector.reference import build_reference_set
    from contam_assets.detector.registry import load_registry

    cfg = preset("default")
    records, _ = build_reference_set(load_registry(DEFAULT_TASKS_DIR, ["gsm8k", "mbpp"]), shared_data, cfg)
    return cfg, records, build_index(records, cfg)


# The end-to-end tests that take 25 s or more on CI's 2-core machine (its --durations list): marked `slow`, so
# `./dev test --fast` leaves them out, and their files collected first, so parallel workers start the longest
# files at once instead of ending on one of them alone.
SLOW = {
    "test_scale_run_benchmark.py": ("test_scale_run_at_a_tiny_size_reports_every_figure",
                                    "test_scale_run_with_the_compiled_steps_off_gives_the_same_tables"),
    "test_docs_commands.py": ("test_sensor_start_backfills_and_cli_commands_through_the_daemon",),
    "test_table_writes.py": ("test_table_writes_benchmark_as_documented",),
    "test_reference_reuse.py": ("test_unchanged_inputs_keep_the_reference_set_changed_ones_rebuild_it",
                                "test_a_build_killed_before_its_write_leaves_the_old_set_and_is_redone"),
    "test_scaleout_ray_cluster.py": ("test_backfill_on_two_ray_nodes_equals_in_process",
                                     "test_worker_node_killed_mid_shard_loses_only_that_shard"),
    "test_scaleout_ray.py": ("test_multi_shard_scan_on_a_local_ray_cluster_equals_single_process",),
    "test_catalogue_benchmark.py": ("test_the_docs_command_runs_as_written",),
    "test_hf_sources.py": ("test_detect_with_lm_eval_tasks_finds_the_planted_copies_of_tasks",),
    "test_incremental_rescan_benchmark.py": ("test_the_documented_rescan_benchmark_runs_and_its_rows_agree",),
    "test_quality_detector.py": ("*",),
    "test_thorough_commands.py": ("*",),
    "test_automation_concurrency.py": ("test_four_concurrent_shard_runs_hold_exactly_the_union_of_their_rows",),
    "test_tokenize_ahead.py": ("test_a_first_scan_from_a_shared_token_cache_keeps_the_rejects_out_of_the_mix",),
    "test_pool_formats.py": ("*",),
    "test_pool_s3.py": ("*",),
}


def pytest_collection_modifyitems(config, items):
    order = {name: i for i, name in enumerate(SLOW)}
    for item in items:
        names = SLOW.get(item.path.name, ())
        if "*" in names or item.originalname in names:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: order.get(item.path.name, len(order)))  # stable: files and tests keep their order
