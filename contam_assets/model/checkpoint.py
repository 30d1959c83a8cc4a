"""Checkpoint folders: completeness check, metadata, discovery.

A checkpoint is a local Hugging Face folder (config, weights, tokenizer).  Its
metadata comes from ``contam_checkpoint.json`` when present (see
docs/tables.md), otherwise from the folder names:
``<experiments>/<experiment>/checkpoints/<stage>/``, step from ``step-000400``,
base when the stage is ``base``.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

META_FILE = "contam_checkpoint.json"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
# A tokenizer is complete with tokenizer.json, or with one of the slow-tokenizer vocabularies.
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "vocab.txt", "spiece.model")
_STEP_RE = re.compile(r"(?:step|ckpt|checkpoint|iter)[-_]?(\d+)", re.IGNORECASE)
_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]+")


class CheckpointError(RuntimeError):
    """A checkpoint folder is incomplete or cannot be loaded."""


@dataclass(frozen=True)
class CheckpointInfo:
    experiment: str
    stage: str
    path: str
    step: int | None = None
    is_base: bool = False
    recipe: str | None = None

    @property
    def key(self) -> str:
        """Partition key ``<experiment>/<stage>``."""
        return f"{_safe(self.experiment)}/{_safe(self.stage)}"

    def as_dict(self) -> dict:
        return {"checkpoint": self.key, **asdict(self)}


def _safe(part: str) -> str:
    return _KEY_UNSAFE.sub("_", part).strip("_") or "unnamed"


def missing_parts(folder: str | Path) -> list[str]:
    """What a folder lacks to be a loadable checkpoint (empty list = complete)."""
    folder = Path(folder)
    if not folder.is_dir():
        return [f"the folder itself ({folder} does not exist)"]
    missing = []
    if not (folder / "config.json").is_file():
        missing.append("config.json")
    if not _has_weights(folder, missing):
        missing.append("weights (" + " or ".join(WEIGHT_FILES + WEIGHT_INDEXES) + ")")
    if not any((folder / f).is_file() for f in TOKENIZER_FILES):
        missing.append("tokenizer (" + " or ".join(TOKENIZER_FILES) + ")")
    return missing


def _has_weights(folder: Path, missing: list[str]) -> bool:
    if any((folder / f).is_file() and (folder / f).stat().st_size > 0 for f in WEIGHT_FILES):
        return True
    for index_name in WEIGHT_INDEXES:
        index = folder / index_name
        if not index.is_file():
            continue
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, AttributeError) as exc:
            missing.append(f"a readable {index_name} ({exc})")
            return True  # reported above; do not also report "weights"
        absent = sorted(s for s in shards if not (folder / s).is_file())
        if absent:
            missing.append(f"weight shards listed in {index_name}: {', '.join(absent)}")
        return True
    return False


def check_complete(folder: str | Path) -> None:
    """Raise CheckpointError naming the folder and every missing part."""
    missing = missing_parts(folder)
    if missing:
        raise CheckpointError(f"checkpoint folder {folder} is incomplete: missing {'; '.join(missing)}")


def read_info(folder: str | Path) -> CheckpointInfo:
    """Metadata from contam_checkpoint.json, else inferred from the folder names."""
    folder = Path(folder).resolve()
    inferred = _infer(folder)
    meta_path = folder / META_FILE
    if not meta_path.is_file():
        return inferred
    try:
        meta = json.loads(meta_path.read_text())
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint folder {folder}: cannot read {META_FILE}: {exc}") from exc
    stage = str(meta.get("stage") or inferred.stage)
    step = meta.get("step", inferred.step)
    return CheckpointInfo(
        experiment=str(meta.get("experiment") or inferred.experiment),
        stage=stage,
        path=str(folder),
        step=int(step) if step is not None else None,
        is_base=bool(meta.get("is_base", stage == "base")),
        recipe=meta.get("recipe"),
    )


def _infer(folder: Path) -> CheckpointInfo:
    stage = folder.name
    parent = folder.parent
    experiment = parent.parent.name if parent.name == "checkpoints" else parent.name
    m = _STEP_RE.search(stage)
    return CheckpointInfo(
        experiment=experiment or "default",
        stage=stage,
        path=str(folder),
        step=int(m.group(1)) if m else None,
        is_base=stage.lower() == "base",
    )


def looks_like_checkpoint(folder: Path) -> bool:
    """A folder a trainer is writing a checkpoint into (it may still be incomplete)."""
    return (folder / "config.json").is_file() or (folder / META_FILE).is_file()


def discover(experiments_dir: str | Path | None, extra_dir: str | Path | None = None) -> list[CheckpointInfo]:
    """Checkpoint folders under ``<experiments>/*/checkpoints/*`` and, optionally, an extra folder.

    The extra folder may hold checkpoint folders directly (experiment = the
    extra folder's name) or as ``<experiment>/<stage>/``.
    """
    found: dict[str, CheckpointInfo] = {}
    candidates: list[Path] = []
    if experiments_dir and Path(experiments_dir).is_dir():
        candidates += sorted(Path(experiments_dir).glob("*/checkpoints/*"))
    if extra_dir and Path(extra_dir).is_dir():
        extra = Path(extra_dir)
        candidates += sorted(extra.glob("*")) + sorted(extra.glob("*/*"))
    for folder in candidates:
        if folder.is_dir() and looks_like_checkpoint(folder):
            try:
                info = read_info(folder)
            except CheckpointError:
                info = _infer(folder.resolve())  # the partition itself reports the bad metadata file
            found.setdefault(info.key, info)
    return sorted(found.values(), key=lambda i: i.key)


def newest_mtime(folder: Path) -> float:
    """Latest modification time of the folder or any file directly in it."""
    times = [folder.stat().st_mtime]
    times += [p.stat().st_mtime for p in folder.iterdir() if p.is_file()]
    return max(times)
