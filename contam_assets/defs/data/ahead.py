"""Tokenizing ahead: while the reference set is built, the shards a scan will surely read in full are tokenized
into the token cache on the cores the build leaves (executor/ahead.py).  reference_set starts it (it alone knows
whether it builds), so `contam detect` and a daemon-started build get it alike; the tokenize_ahead setting (auto, on or off).
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from typing import Callable

import duckdb

from contam_assets import settings as setting
from contam_assets import store
from contam_assets.defs.data.engine import RayScanEngine, ScanEngine, engine_from_env
from contam_assets.defs.resources import ContamSettings
from contam_assets.executor.ahead import TokenizeAhead, shards_to_tokenize
from contam_assets.rescan import state as scan_state
from contam_assets.store import tables

# auto: a reference build from fewer bytes of benchmark files is over in a few seconds, before a shard is tokenized
AHEAD_MIN_SOURCE_BYTES = 8 << 20
AHEAD_DB_WAIT_S = 5.0  # how long tokenizing ahead waits for the database before the build goes on without it


def ahead_mode(env=os.environ) -> str:
    """The tokenize_ahead setting: auto, on or off; auto (the default): on where the reference set will be built from at least
    AHEAD_MIN_SOURCE_BYTES of benchmark files (`build_ahead_pays`)."""
    how = (setting.env_raw("tokenize_ahead", env) or "auto").strip().lower() or "auto"
    for mode, words in (("on", ("on", "1", "true", "yes")), ("off", ("off", "0", "false", "no")), ("auto", ("auto",))):
        if how in words:
            return mode
    raise ValueError(f"{setting.var('tokenize_ahead')} must be auto, on or off, got {how!r}")


def build_ahead_pays(settings: ContamSettings, con) -> bool:
    """True where the reference set will be built again (reference_set's rule: its inputs digest changed) from at
    least AHEAD_MIN_SOURCE_BYTES of benchmark files: a build long enough for a shard or more to be tokenized beside
    it.  A kept set takes a second or two, and a small registry a few: tokenizing ahead would only be thrown away."""
    from contam_assets.defs.meta import DETECTOR_VERSION
    from contam_assets.defs.resources import load_task_specs
    from contam_assets.sources.registry import inputs_digest, source_bytes

    if settings.lm_eval_list:  # lm_eval reads its tasks in the task_registry step, not before it
        return False
    try:
        specs = load_task_specs(settings)
    except Exception:  # noqa: BLE001 - a bad spec fails the build itself, with its message
        return False
    if source_bytes(specs, settings.benchmarks_path) < AHEAD_MIN_SOURCE_BYTES:
        return False
    state = tables.reference_state(con) if con is not None and store.table_exists(con, "reference_state") else None
    cfg = settings.detect_config()[0]
    return state is None or state["inputs"] != inputs_digest(specs, settings.benchmarks_path, cfg.reference_key(),
                                                             DETECTOR_VERSION)


def tokenize_ahead(settings: ContamSettings, shards: list[str], log: Callable[[str], None] = print,
                   env=os.environ, engine: ScanEngine | None = None) -> TokenizeAhead | None:
    """Tokenize the shards a scan will surely read in full while the reference set is built, on the cores the
    build leaves (executor/ahead.py); None where nothing is to be gained (`ahead_mode`)."""
    mode = ahead_mode(env)
    if mode == "off":
        return None
    engine = engine if engine is not None else engine_from_env()
    cache_root = engine.cache_root(settings.out_path, not settings.pool_location.is_local)
    cfg = settings.detect_config()[0]
    if isinstance(engine, RayScanEngine) or cache_root is None or cfg.prefilter or engine.processes(len(shards)) < 2:
        return None  # Ray workers tokenize on their nodes; the prefilter tokenizes only what it must
    states = {}
    try:  # a database another process holds, or one that cannot be read: the run goes on without tokenizing ahead
        with (store.connect(settings.db_path, read_only=True, timeout_s=AHEAD_DB_WAIT_S) if settings.db_path.exists()
              else nullcontext()) as con:
            if mode == "auto" and not build_ahead_pays(settings, con):
                return None
            if con is not None and scan_state.has_state(con):
                states = scan_state.load_states(con, shards)
    except (duckdb.Error, OSError) as exc:
        log(f"  not tokenizing ahead: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return None
    todo = shards_to_tokenize(settings.pool_path, shards, cfg, settings.content_key, cache_root, states,
                              settings.follow_links)
    workers = min(engine.processes(len(shards)) - 1, len(todo))
    if workers < 1:
        return None
    try:
        ahead = TokenizeAhead(todo, cfg, settings.content_key, cache_root, workers)
    except OSError as exc:  # e.g. a token cache folder it cannot write: the scan meets it and reports it per shard
        log(f"  not tokenizing ahead: {type(exc).__name__}: {exc}")
        return None
    log(f"  tokenizing {len(todo)} new shard(s) ahead on {workers} process(es) while the reference set is built")
    return ahead
