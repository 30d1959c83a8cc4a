"""Helpers shared by the model-side assets: partition key -> checkpoint folder, model loading, writing rows."""

from pathlib import Path

import dagster as dg

from contam_assets.defs.model.resources import CheckpointLoader
from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.model.checkpoint import CheckpointError, CheckpointInfo, discover, newest_mtime, read_info
from contam_assets.model.loader import describe
from contam_assets.report.inert import md_text
from contam_assets.store import table_exists

_CACHE: dict = {}  # the last loaded model, reused by the probes of one in-process run


def resolve_checkpoint(key: str, settings: ContamSettings, loader: CheckpointLoader, db: ContamDB) -> CheckpointInfo:
    """The folder behind a partition key: the watched folders first, then the `checkpoints` table."""
    for info in discover(settings.experiments_path, loader.extra_path):
        if info.key == key:
            return info
    with db.connect(read_only=True) as con:
        row = None
        if table_exists(con, "checkpoints"):
            row = con.execute("select path from checkpoints where checkpoint = ?", [key]).fetchone()
    if row and Path(row[0]).is_dir():
        return read_info(row[0])
    watched = ", ".join(str(p) for p in (settings.experiments_path, loader.extra_path) if p)
    raise dg.Failure(description=f"checkpoint {key!r}: no folder found under {watched} (nor in the checkpoints table)")


def load_model(context: dg.AssetExecutionContext, loader: CheckpointLoader, info: CheckpointInfo):
    """Load (or reuse) the checkpoint's model; a bad folder fails only this partition, with a clear message."""
    path = Path(info.path)
    try:
        key = (str(path), newest_mtime(path), loader.options())
        if _CACHE.get("key") != key:
            release_model()  # free the previous model before loading the next
            context.log.info(f"loading {path} (device={loader.device}, dtype={loader.dtype})")
            _CACHE.update(key=key, lm=loader.load(path))
            context.log.info(f"loaded {describe(_CACHE['lm'])}")
        return _CACHE["lm"]
    except (CheckpointError, OSError, ValueError) as exc:  # ValueError: a bad dtype, or vLLM asked for but absent
        raise dg.Failure(description=str(exc), metadata={"path": str(path)}) from exc


def release_model() -> None:
    """Forget the cached model (before another one, e.g. the baseline, loads)."""
    lm = _CACHE.pop("lm", None)
    _CACHE.clear()
    if lm is not None:
        from contam_assets.model.probe_run import free

        free(lm)


def probe_options(settings: ContamSettings, probe_settings):
    return probe_settings.options(settings.benchmarks_path, settings.tasks_path)


def write_rows(db: ContamDB, checkpoint: str, probe: str, metrics: dict, items=()) -> tuple[int, int]:
    from contam_assets.model.tables import replace_probe_rows

    with db.connect() as con:
        return replace_probe_rows(con, checkpoint, probe, metrics, items)


def skipped_md(skipped: dict[str, str]) -> str:
    return "\n".join(f"- **{md_text(k)}**: {md_text(v)}" for k, v in skipped.items()) or "none"
