"""Inputs of the arms from the data side's outputs: the removals table, the mix folder, the pool.

The decontaminated documents are read from ``<out_dir>/mix/<shard>`` (what the
data side wrote; their ``shard`` is reported as ``mix/<shard>``, their line is
the line in the mix shard).  The removed documents are read from the pool at
the (shard, line) the ``removals`` table names.  Unusable lines are counted by
reason, never dropped silently.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from contam_assets import store
from contam_assets.model.arms.mix import PoolDoc
from contam_assets.store import pool as pool_io
from contam_assets.store.location import StoreRoot, redact

MIX_PREFIX = "mix/"


def source_of(source: str | None, shard: str) -> str:
    """The document's dataset type: its ``source`` field, else the shard's top folder, else ``other``."""
    if source:
        return str(source)
    parts = shard.split("/")
    return parts[0] if len(parts) > 1 else "other"


def iter_docs(folder: Path, content_key: str = "text", skipped: Counter | None = None,
              wanted: dict[str, set[int]] | None = None, shard_prefix: str = "") -> Iterator[PoolDoc]:
    """Documents of every shard in ``folder`` (or only the ``wanted`` lines), rejects counted in ``skipped``."""
    folder = Path(folder)
    shards = pool_io.list_shards(folder) if wanted is None else sorted(wanted)
    for shard in shards:
        path = pool_io.shard_path(folder, shard)  # a key too long for a file name: its bounded name
        if not path.is_file():
            if skipped is not None:
                skipped["shard_missing"] += len(wanted[shard]) if wanted else 1
            continue
        lines = wanted.get(shard) if wanted is not None else None
        for item in pool_io.read_shard(path, shard, content_key):
            if lines is not None and item.line not in lines:
                continue
            if isinstance(item, pool_io.Reject):
                if skipped is not None:
                    skipped[item.reason.split(" ")[0]] += 1
                continue
            yield PoolDoc(shard_prefix + shard, item.line, source_of(item.source, shard), item.text)


@dataclass
class ArmInputs:
    decontaminated: list[PoolDoc]
    removed: list[PoolDoc]
    removals_rows: int
    skipped_mix: Counter = field(default_factory=Counter)
    skipped_removed: Counter = field(default_factory=Counter)

    @property
    def missing_removed(self) -> int:
        return self.removals_rows - len(self.removed)


def read_removals(db_path: Path) -> list[tuple[str, int]]:
    """(shard, line) of every removed document, from the ``removals`` table."""
    db_path = Path(db_path)
    if not db_path.is_file():
        raise FileNotFoundError(f"no database at {db_path}: run `contam detect` (or the data assets) first")
    with store.connect(db_path, read_only=True) as con:
        if not store.table_exists(con, "removals"):
            raise LookupError(f"{db_path} has no `removals` table: run `contam detect` (or the data assets) first")
        rows = con.execute("select distinct shard, line from removals order by shard, line").fetchall()
    return [(str(s), int(l)) for s, l in rows]


def local_pool_only(pool_dir) -> None:
    """The arms read the pool as a local folder: a pool in object storage is refused in one line."""
    if isinstance(pool_dir, StoreRoot):
        raise FileNotFoundError(f"the arms read a local pool folder; {redact(str(pool_dir))} is in object storage "
                                "(copy the pool to a local folder for the arms)")


def load_arm_inputs(pool_dir: Path, mix_dir: Path, db_path: Path, content_key: str = "text") -> ArmInputs:
    local_pool_only(pool_dir)
    removals = read_removals(db_path)
    mix_dir = Path(mix_dir)
    if not mix_dir.is_dir() or not pool_io.list_shards(mix_dir):
        raise FileNotFoundError(f"no decontaminated mix under {mix_dir}: run `contam detect` (or the data assets) first")
    wanted: dict[str, set[int]] = {}
    for shard, line in removals:
        wanted.setdefault(shard, set()).add(line)
    skipped_removed: Counter = Counter()
    removed = list(iter_docs(Path(pool_dir), content_key, skipped_removed, wanted))
    skipped_mix: Counter = Counter()
    decon = list(iter_docs(mix_dir, content_key, skipped_mix, shard_prefix=MIX_PREFIX))
    found = {d.key for d in removed}
    lost = sum(1 for k in removals if k not in found) - sum(skipped_removed.values())
    if lost > 0:
        skipped_removed["line_not_in_shard"] += lost
    return ArmInputs(decon, removed, len(removals), skipped_mix, skipped_removed)
