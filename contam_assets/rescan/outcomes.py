"""The step's writes of scan outcomes, several shards in one connection and one transaction.

A run's outcomes come back in the jobs' order (engine.py); ``OutcomeWriter`` keeps them
until ``FLUSH_SHARDS`` have come back or the oldest waited ``FLUSH_SECONDS`` (checked as
each arrives and, with the local pool, while the step waits for the next), then merges
them in order with ``state.write_outcomes``: one lock, one connection, one schema check
and one commit for the lot, instead of one each per shard (~0.3 s of fixed cost per
shard at 1 GB, docs/scale.md).  The rows and their order are those of one write per
shard.  A kill before a flush commits nothing of it (those shards are scanned again by
the next run).  When a batch's write fails, its shards are written one at a time, so
only the shard whose rows cannot be written fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from contam_assets import store
from contam_assets.rescan import state as scan_state

FLUSH_SHARDS = 256  # small shards: a flush costs ~0.2 s of connection and schema check, whatever it holds
FLUSH_SECONDS = 10.0


class OutcomeWriter:
    """``add(job, outcome or exception)`` in the jobs' order; ``done(job, outcome or exception, stats rows)`` is
    called for each, in the same order, once its rows are committed (or could not be)."""

    def __init__(self, connect, sigs: dict[str, tuple[int, int]], done: Callable, *, flush_shards: int = FLUSH_SHARDS,
                 flush_seconds: float = FLUSH_SECONDS, **write_kw):
        self.connect, self.sigs, self.done, self.write_kw = connect, sigs, done, write_kw
        self.flush_shards, self.flush_seconds = flush_shards, flush_seconds
        self.pending: list[tuple[object, object]] = []
        self.since = 0.0
        self.write_seconds = 0.0
        self.flushes = 0

    def add(self, job, out) -> None:
        if not self.pending:
            self.since = time.monotonic()
        self.pending.append((job, out))
        self.idle()

    def idle(self) -> None:
        """Flush when the batch is full or old enough (the engine calls this while it waits)."""
        if self.pending and (len(self.pending) >= self.flush_shards or time.monotonic() - self.since >= self.flush_seconds):
            self.flush()

    def _write(self, batch: list) -> dict[str, list[dict]]:
        with self.connect() as con:
            scan_state.write_outcomes(con, [(out, *self.sigs[job.shard]) for job, out in batch],
                                      clear_errors=("scan", "write"), **self.write_kw)
            rows = store.query_df(con, "select * from shard_stats where shard in (select unnest(?::varchar[]))",
                                  [[job.shard for job, _ in batch]]).to_dicts()
        by_shard: dict[str, list[dict]] = {job.shard: [] for job, _ in batch}
        for r in rows:
            by_shard[r["shard"]].append(r)
        return by_shard

    def flush(self) -> None:
        batch, self.pending = self.pending, []
        good = [(job, out) for job, out in batch if not isinstance(out, Exception)]
        stats: dict[str, list[dict] | Exception] = {}
        t0 = time.perf_counter()
        if good:
            self.flushes += 1
            try:
                stats.update(self._write(good))
            except Exception as exc:  # noqa: BLE001 - find the shard whose rows cannot be written; the others are
                for job, out in good if len(good) > 1 else []:
                    try:
                        stats.update(self._write([(job, out)]))
                    except Exception as one:  # noqa: BLE001
                        stats[job.shard] = one
                if len(good) == 1:
                    stats[good[0][0].shard] = exc
        self.write_seconds += time.perf_counter() - t0
        for job, out in batch:
            got = stats.get(job.shard, [])
            if isinstance(got, Exception):
                self.done(job, RuntimeError(f"writing its rows: {type(got).__name__}: {got}"), [])
            else:
                self.done(job, out, got)
