"""Digests of the project's own source files: the code version a result was computed with.

A result is stale when the code that computed it changed: the Dagster assets carry these digests as
code versions (``defs/meta.py``), and a shard's scan record carries the digest of the optional parts that
ran on it (``rescan/plan.scan_config_digest``), so an upgraded verifier rescans the shards it ran on.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


@functools.cache  # the source of a running process does not change under it
def source_digest(*packages: str) -> str:
    """12-hex digest of the .py files of the given subpackages (or single modules, ``store/compression.py``) of
    contam_assets (paths and bytes)."""
    h = hashlib.sha256()
    for name in packages:
        root = PACKAGE / name
        for p in [root] if root.is_file() else sorted(root.rglob("*.py")):
            h.update(p.relative_to(PACKAGE).as_posix().encode())
            h.update(b"\0")
            h.update(p.read_bytes())
    return h.hexdigest()[:12]
