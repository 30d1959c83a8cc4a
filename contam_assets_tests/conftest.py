"""Shared fixtures.  Every test session gets its own DAGSTER_HOME and CONTAM_OUT."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from contam_assets.testing import SHARED_DATA  # CONTAM_SHARED_DATA, else ../shared/data

PROJECT_ROOT = Path(__file__).resolve().parents[1]


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
    # one torch (OpenMP) thread per process: the suite runs a worker per core, and two workers' tiny-model probes on
    # two threads each fight for the same cores (greedy generation took 23 s instead of 0.3 s on a busy 2-core machine)
    os.environ.setdefault("OMP_NUM_THREADS", "1")


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
def gsm8k_bench(shared_data, tmp_path_factory) -> Path:
    """A benchmark folder for `--tasks gsm8k` runs whose pools quote GSM8K test items: the test split whole, the
    train split's first 200 items (a run indexes 1,519 items, not 8,792; nothing in those pools quotes train)."""
    bench = tmp_path_factory.mktemp("gsm8k_bench")
    (bench / "gsm8k_test.jsonl").write_text((shared_data / "gsm8k_test.jsonl").read_text())
    train = (shared_data / "gsm8k_train.jsonl").read_text().splitlines(keepends=True)
    (bench / "gsm8k_train.jsonl").write_text("".join(train[:200]))
    return bench


@pytest.fixture(scope="session")
def two_tasks(shared_data):
    """(config, reference records, index) of GSM8K and MBPP from the shared data, default preset (built once)."""
    from contam_assets.defs.resources import DEFAULT_TASKS_DIR
    from contam_assets.detector.config import preset
    from contam_assets.detector.index_build import build_index
    from contam_assets.sources.reference import build_reference_set
    from contam_assets.sources.registry import load_registry

    cfg = preset("default")
    records, _ = build_reference_set(load_registry(DEFAULT_TASKS_DIR, ["gsm8k", "mbpp"]), shared_data, cfg)
    return cfg, records, build_index(records, cfg)


# durations.json: each test's seconds (setup, call and teardown) on CI's 2-core machine, for the tests of a second or
# more, from `./dev test --junitxml=...` (its "time" attributes).  Every test of a file that holds a test of SLOW_S
# or more, or whose tests sum to FILE_SLOW_S or more, is marked `slow` (a file's module fixtures are its expensive
# builds, and some files are one story told test by test): `./dev test --fast` leaves them out.  Files are collected
# longest first, so parallel workers start the longest files at once instead of ending on one of them alone.  A test
# missing from the file counts as fast; re-measure after adding a long one.
DURATIONS = json.loads((Path(__file__).parent / "durations.json").read_text())
SLOW_S, FILE_SLOW_S = 5.0, 20.0


def pytest_collection_modifyitems(config, items):
    per_file: dict[str, float] = {}
    slow_files: set[str] = set()
    for nodeid, seconds in DURATIONS.items():
        path = nodeid.split("::")[0]
        per_file[path] = per_file.get(path, 0.0) + seconds
        if seconds >= SLOW_S:
            slow_files.add(path)
    slow_files |= {path for path, seconds in per_file.items() if seconds >= FILE_SLOW_S}
    for item in items:
        if item.nodeid.split("::")[0] in slow_files:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: -per_file.get(item.nodeid.split("::")[0], 0.0))  # stable: each file keeps its order
