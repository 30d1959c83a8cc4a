"""What each decontaminated mix shard was written from, so an unchanged shard is verified instead of rewritten.

``<out>/mix_state/<shard>.json`` (beside the mix, not in it) holds the key of the last
write — the pool file's size and mtime, a digest of the dropped and of the rejected line
numbers — and the counts and byte size of the file written.  When the key is unchanged
and the mix file still has that size, the shard's mix is current.  A mix uploaded to a remote output
(store/outbox.py) has no local copy: its record says so (``uploaded``), and with the key unchanged it is current.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from contam_assets.store.files import atomic_write_text
from contam_assets.store.location import unit_info
from contam_assets.store.mirror import local_rel, remove_literal

FORMAT = 1


def _digest(lines: set[int]) -> str:
    return hashlib.sha256(",".join(map(str, sorted(lines))).encode()).hexdigest()[:16]


def state_key(pool_file: Path, drop: set[int], rejected: set[int]) -> dict:
    size, mtime_ns = unit_info(pool_file)  # a remote object: its size and version (ETag or generation)
    return {"format": FORMAT, "size": size, "mtime_ns": mtime_ns, "drop": _digest(drop),
            "rejected": _digest(rejected)}


def _path(out_dir: Path, shard: str) -> Path:
    return Path(out_dir) / "mix_state" / f"{local_rel(shard)}.json"


def current(out_dir: Path, shard: str, key: dict, mix_file: Path, remote: bool = False) -> dict | None:
    """The counts of the last write when it was made from `key` and `mix_file` is still the one written (``remote``:
    or it was uploaded to the remote output and removed here); else None."""
    p = _path(out_dir, shard)
    try:
        state = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    mix = Path(mix_file)
    if state.get("key") != key:
        return None
    if remote and state.get("uploaded") and not mix.exists():
        return state["result"]
    if not mix.is_file() or mix.stat().st_size != state.get("bytes"):
        return None
    return state["result"]


def record(out_dir: Path, shard: str, key: dict, result: dict, mix_file: Path, size: int | None = None,
           uploaded: bool = False) -> None:
    """The write of `mix_file` from `key` (``uploaded``: its ``size`` bytes went to the remote output)."""
    size = Path(mix_file).stat().st_size if size is None else size
    state = {"key": key, "bytes": size, "result": result} | ({"uploaded": True} if uploaded else {})
    atomic_write_text(_path(out_dir, shard), json.dumps(state, indent=1))
    remove_literal(Path(out_dir) / "mix_state", shard, ".json")  # a copy an earlier version named literally


def forget(out_dir: Path, shard: str) -> None:
    """The shard has no mix file any more (quarantined or retired)."""
    _path(out_dir, shard).unlink(missing_ok=True)
    remove_literal(Path(out_dir) / "mix_state", shard, ".json")


def recorded_bytes(out_dir: Path, shard: str) -> int | None:
    """The size of the shard's mix file as last written (uploaded or not), None without a record."""
    try:
        return json.loads(_path(out_dir, shard).read_text()).get("bytes")
    except (OSError, ValueError):
        return None
