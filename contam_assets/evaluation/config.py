"""The evaluation config: which benchmarks give the evaluation items, and the tracker.

A YAML or JSON file (the eval_config setting, the ``contam_evaluation``
resource's ``config_file``, or ``contam evaluate --config``)::

    benchmarks:                      # optional; default: the known files of the benchmarks_dir setting
      - name: gsm8k-test
        path: /data/gsm8k_test.jsonl # relative paths resolve against the config file's folder
        format: gsm8k                # optional: inferred from the first row
        metric: gsm8k-test-ppl       # optional: the score shown as benchmarks.<name>.value
        limit: 500                   # optional: first rows only
      - name: mteb-sts
        format: mteb                 # embedding task: contamination null
    tracker:
      enabled: true
      project: contam-evals
      entity: null                   # optional
      mode: offline                  # offline (default; or WANDB_MODE) | online
      dir: null                      # default <experiments_dir>/wandb

Only ``benchmarks`` shapes a report; ``tracker`` never does (it is not part
of the report's identity).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from contam_assets.evaluation.items import BenchmarkSpec

_BENCH_KEYS = {"name", "path", "format", "metric", "limit", "fields", "separator"}
_TRACKER_KEYS = {"enabled", "project", "entity", "mode", "dir"}


class ConfigError(ValueError):
    """A malformed evaluation config."""


@dataclass(frozen=True)
class TrackerConfig:
    enabled: bool = False
    project: str = ""
    entity: str | None = None
    mode: str | None = None  # None: WANDB_MODE if set, else offline
    dir: str | None = None


@dataclass(frozen=True)
class EvaluationConfig:
    benchmarks: tuple[BenchmarkSpec, ...] | None = None  # None: defaults from the benchmarks folder
    tracker: TrackerConfig = field(default_factory=TrackerConfig)


def _benchmark(raw: object, base: Path, i: int) -> BenchmarkSpec:
    if not isinstance(raw, dict):
        raise ConfigError(f"benchmarks[{i}] must be a mapping, got {type(raw).__name__}")
    unknown = set(raw) - _BENCH_KEYS
    if unknown:
        raise ConfigError(f"benchmarks[{i}]: unknown keys {sorted(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name or "/" in name:
        raise ConfigError(f"benchmarks[{i}]: `name` must be a non-empty string without '/'")
    path = raw.get("path") or ""
    if path and not Path(path).is_absolute():
        path = str((base / path).resolve())
    fmt = raw.get("format") or ""
    if not path and fmt != "mteb":
        raise ConfigError(f"benchmarks[{i}] ({name}): `path` is required")
    limit = raw.get("limit")
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ConfigError(f"benchmarks[{i}] ({name}): `limit` must be a non-negative integer")
    fields = raw.get("fields") or ()
    if not isinstance(fields, (list, tuple)) or not all(isinstance(f, str) for f in fields):
        raise ConfigError(f"benchmarks[{i}] ({name}): `fields` must be a list of strings")
    return BenchmarkSpec(
        name=name,
        path=str(path),
        format=str(fmt),
        metric=str(raw.get("metric") or ""),
        limit=limit,
        fields=tuple(fields),
        separator=str(raw.get("separator", " ")),
    )


def parse_config(data: object, base: Path) -> EvaluationConfig:
    if data is None:
        return EvaluationConfig()
    if not isinstance(data, dict):
        raise ConfigError("the evaluation config must be a mapping")
    unknown = set(data) - {"benchmarks", "tracker"}
    if unknown:
        raise ConfigError(f"unknown top-level keys {sorted(unknown)} (expected benchmarks, tracker)")
    benchmarks = None
    if data.get("benchmarks") is not None:
        if not isinstance(data["benchmarks"], list):
            raise ConfigError("`benchmarks` must be a list")
        benchmarks = tuple(_benchmark(b, base, i) for i, b in enumerate(data["benchmarks"]))
        names = [b.name for b in benchmarks]
        if len(set(names)) != len(names):
            raise ConfigError(f"benchmark names must be unique: {names}")
    raw_t = data.get("tracker") or {}
    if not isinstance(raw_t, dict):
        raise ConfigError("`tracker` must be a mapping")
    unknown = set(raw_t) - _TRACKER_KEYS
    if unknown:
        raise ConfigError(f"tracker: unknown keys {sorted(unknown)}")
    tracker = TrackerConfig(
        enabled=bool(raw_t.get("enabled", False)),
        project=str(raw_t.get("project") or ""),
        entity=raw_t.get("entity"),
        mode=raw_t.get("mode"),
        dir=str((base / raw_t["dir"]).resolve()) if raw_t.get("dir") else None,
    )
    if tracker.enabled and not tracker.project:
        raise ConfigError("tracker.enabled needs tracker.project")
    if tracker.mode not in (None, "offline", "online"):
        raise ConfigError("tracker.mode must be offline or online")
    return EvaluationConfig(benchmarks, tracker)


def load_config(path: str | Path | None) -> EvaluationConfig:
    """Read a YAML/JSON config file; no path gives the defaults."""
    if not path:
        return EvaluationConfig()
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"evaluation config {p} not found")
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # yaml.YAMLError / json.JSONDecodeError
        raise ConfigError(f"evaluation config {p} is not valid YAML/JSON: {exc}") from exc
    return parse_config(data, p.resolve().parent)
