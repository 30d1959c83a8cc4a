"""Builders shared by the evaluation and API tests: experiment folders and DuckDB rows."""

from __future__ import annotations

import json
from pathlib import Path

from contam_assets import store


def write_jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(r if isinstance(r, str) else json.dumps(r))
            f.write("\n")
    return path


def add_checkpoint(experiments: Path, experiment: str, stage: str, step: int | None, is_base: bool = False,
                   recipe: str | None = None) -> Path:
    folder = experiments / experiment / "checkpoints" / stage
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"experiment": experiment, "stage": stage, "step": step, "is_base": is_base, "recipe": recipe}
    (folder / "contam_checkpoint.json").write_text(json.dumps(meta))
    return folder


def write_probe_metrics(db_path: Path, rows: list[tuple[str, str, str, float | None]]) -> None:
    """Rows (checkpoint, probe, metric, value) in the model side's long table."""
    with store.connect(db_path) as con:
        con.execute(
            "create table if not exists probe_metrics(checkpoint varchar, probe varchar, metric varchar, "
            "value double, computed_at timestamp)"
        )
        con.executemany("insert into probe_metrics values (?, ?, ?, ?, now())", rows)


def gsm8k_rows(shared_data: Path) -> list[dict]:
    with open(shared_data / "gsm8k_test.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]
