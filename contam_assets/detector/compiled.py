"""Whether the scan's compiled steps run (numba): the word walk, the key table, the non-ASCII cleaning step, the
prefilter's byte pass.  Each has a plain reference path that gives the same answer; ``CONTAM_COMPILED=off`` keeps
to those (a platform where numba misbehaves, or a benchmark of the paths side by side)."""

from __future__ import annotations

import os
from functools import lru_cache


@lru_cache(maxsize=1)
def _numba() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:  # pragma: no cover - numba is a dependency
        return False
    return True


def enabled() -> bool:
    return os.environ.get("CONTAM_COMPILED", "on").strip().lower() not in ("off", "0", "false", "no") and _numba()
