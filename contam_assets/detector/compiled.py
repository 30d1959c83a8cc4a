"""Whether the scan's compiled steps run (numba): the word walk, the key table, the non-ASCII cleaning step, the
prefilter's byte pass.  Each has a plain reference path that gives the same answer; the compiled setting off keeps
to those (a platform where numba misbehaves, or a benchmark of the paths side by side)."""

from __future__ import annotations

import os
from functools import lru_cache

from contam_assets.settings import FALSE, resolve, var


@lru_cache(maxsize=1)
def numba_installed() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:  # pragma: no cover - numba is a dependency
        return False
    return True


def enabled() -> bool:
    # read on every call (a test or a benchmark may set it in between), its answer kept per value: the scan asks
    # a few hundred times per shard
    value = os.environ.get(_VAR, "")
    got = _ENABLED.get(value)
    if got is None:
        setting = resolve("compiled", env={_VAR: value})  # ValueError naming the variable when bad
        got = _ENABLED[value] = setting not in FALSE and numba_installed()
    return got


_VAR = var("compiled")
_ENABLED: dict[str, bool] = {}


def njit(fn=None, **options):
    """numba's ``njit`` with its on-disk cache where one can be written (beside the module, or the user's
    cache folder), and without it where none can (a read-only install and no writable home: numba refuses
    ``cache=True`` there, so such a process compiles its kernels once itself instead of failing to import)."""
    from numba import njit as _njit

    def wrap(f):
        try:
            return _njit(cache=True, **options)(f)
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return _njit(**options)(f)

    return wrap(fn) if fn is not None else wrap
