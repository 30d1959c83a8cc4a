"""Resources shared by every domain: settings (paths, preset) and the DuckDB file."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from contam_assets import store

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TASKS_DIR = PROJECT_ROOT / "data" / "tasks"


class ContamSettings(dg.ConfigurableResource):
    """Where things are.  Every field has an environment variable default."""

    out_dir: str = "contam_out"  # CONTAM_OUT: contam.duckdb, index cache, report.html, mix/
    pool_dir: str = ""  # CONTAM_POOL: folder of .jsonl/.jsonl.gz/.jsonl.zst shards ("" = <out_dir>/demo_pool)
    benchmarks_dir: str = ""  # CONTAM_BENCHMARKS: benchmark files ("" = embedded default: HumanEval from its package)
    tasks_dir: str = ""  # CONTAM_TASKS_DIR: task specs ("" = the project's data/tasks)
    tasks: str = ""  # CONTAM_TASKS: comma-separated task names to use ("" = every available task)
    preset: str = "default"  # CONTAM_PRESET: default | olmo-web | olmo-synth | thorough
    parts: str = ""  # CONTAM_PARTS: comma-separated thorough parts added to the preset (detector.config.THOROUGH_PARTS)
    removal: str = "document"  # CONTAM_REMOVAL: document (drop it) | span (cut the matched spans, store/cuts.py)
    unescape: bool = True  # CONTAM_UNESCAPE=0 for exact decon parity
    tokenizer: str = "cl100k"  # CONTAM_TOKENIZER: cl100k | word
    content_key: str = "text"  # CONTAM_CONTENT_KEY
    experiments_dir: str = ""  # CONTAM_EXPERIMENTS: "<out_dir>/experiments" when empty

    @property
    def out_path(self) -> Path:
        return Path(self.out_dir).resolve()

    @property
    def db_path(self) -> Path:
        return self.out_path / "contam.duckdb"

    @property
    def pool_path(self) -> Path:
        return Path(self.pool_dir).resolve() if self.pool_dir else self.out_path / "demo_pool"

    @property
    def benchmarks_path(self) -> Path | None:
        return Path(self.benchmarks_dir).resolve() if self.benchmarks_dir else None

    @property
    def tasks_path(self) -> Path:
        return Path(self.tasks_dir).resolve() if self.tasks_dir else DEFAULT_TASKS_DIR

    @property
    def task_filter(self) -> list[str]:
        return [t.strip() for t in self.tasks.split(",") if t.strip()]

    @property
    def part_list(self) -> list[str]:
        return [t.strip() for t in self.parts.split(",") if t.strip()]

    @property
    def experiments_path(self) -> Path:
        return Path(self.experiments_dir).resolve() if self.experiments_dir else self.out_path / "experiments"

    @classmethod
    def from_env(cls, **overrides) -> "ContamSettings":
        env = os.environ
        values = dict(
            out_dir=env.get("CONTAM_OUT", "contam_out"),
            pool_dir=env.get("CONTAM_POOL", ""),
            benchmarks_dir=env.get("CONTAM_BENCHMARKS", ""),
            tasks_dir=env.get("CONTAM_TASKS_DIR", ""),
            tasks=env.get("CONTAM_TASKS", ""),
            preset=env.get("CONTAM_PRESET", "default"),
            parts=env.get("CONTAM_PARTS", ""),
            removal=env.get("CONTAM_REMOVAL", "document"),
            unescape=env.get("CONTAM_UNESCAPE", "1") not in ("0", "false", "no"),
            tokenizer=env.get("CONTAM_TOKENIZER", "cl100k"),
            content_key=env.get("CONTAM_CONTENT_KEY", "text"),
            experiments_dir=env.get("CONTAM_EXPERIMENTS", ""),
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


class ContamDB(dg.ConfigurableResource):
    """The DuckDB file; connections are taken under a cross-process lock (contam_assets.store)."""

    path: str = ""  # "" = <CONTAM_OUT>/contam.duckdb

    def resolved(self) -> Path:
        if self.path:
            return Path(self.path).resolve()
        return Path(os.environ.get("CONTAM_OUT", "contam_out")).resolve() / "contam.duckdb"

    @contextmanager
    def connect(self, read_only: bool = False):
        with store.connect(self.resolved(), read_only=read_only) as con:
            yield con


def load_task_specs(settings: ContamSettings):
    """The task specs the settings select; a bad spec or unknown task fails the asset with its message."""
    from contam_assets.detector.registry import TaskSpecError, load_registry

    try:
        return load_registry(settings.tasks_path, settings.task_filter or None)
    except TaskSpecError as exc:
        raise dg.Failure(str(exc)) from exc


def automation_on() -> bool:
    """CONTAM_AUTOMATION=1: sensors and schedules start RUNNING when the code location loads."""
    return os.environ.get("CONTAM_AUTOMATION", "").strip().lower() in ("1", "true", "yes", "on")


def sensor_default_status() -> dg.DefaultSensorStatus:
    return dg.DefaultSensorStatus.RUNNING if automation_on() else dg.DefaultSensorStatus.STOPPED


def shared_resources(**settings_overrides) -> dict:
    settings = ContamSettings.from_env(**settings_overrides)
    return {"contam_settings": settings, "contam_db": ContamDB(path=str(settings.db_path))}


defs = dg.Definitions(resources=shared_resources())
