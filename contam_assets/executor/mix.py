"""The decontaminated mix of a run's shards: which need a rewrite, the rewrites on the cores of this machine, the tables.

Three passes (the `decontaminated_mix` asset is a thin wrapper around ``write_mix``):

1. **plan**, in the step, one read-only connection: each shard's removals, rejects and
   status; a quarantined shard loses its mix file; a shard whose mix_state key is
   unchanged is verified, not rewritten; the others become a ``MixWork``;
2. **write**: the jobs' files, each written atomically by ``artifacts.write_mix_shard``, in
   a pool of worker processes (processes.map_in_order; one worker or one job: in the step),
   results coming back in shard order;
3. **record**, in the step (the only DuckDB writer): mix_stats, cuts and the shard's mix
   errors of several shards in one connection and one transaction (flushed every
   ``FLUSH_SHARDS`` shards or ``FLUSH_SECONDS``), then their mix_state files — the tables
   are the serial loop's, row for row.  A crash before a flush loses only the record: the
   next run rewrites those shards (no mix_state yet) or verifies them.

One shard that cannot be written (unreadable, changed since its scan, its worker died
twice) is a failure of that shard only: the others are written and recorded.

With a remote output (``outbox``, store/outbox.py) each shard's mix file and rejected lines are streamed to the store
as its result comes back, and the local copies removed; mix_state records the size uploaded, so an unchanged shard
is verified from its record, and its rejected lines are read back from the store when the plan needs them.  The
first upload the store refuses stops the uploads: the shards after it are failed with that one line.  A remote
output's shards are mixed already in the scan step, each as its scan rows are committed (``MixAsScanned``): the mix
step then verifies them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from contam_assets.detector.config import DetectConfig
from contam_assets.executor.processes import frozen_heap, map_in_order, workers_for
from contam_assets.store import artifacts, mix_state, outbox, table_parts, tables
from contam_assets.store import shards as shards_db
from contam_assets.store.cuts import SpanCutter, span_cutter
from contam_assets.store.location import Location, pool_root
from contam_assets.store.mirror import local_rel
from contam_assets.store.pool import shard_path

FLUSH_SHARDS = 256
FLUSH_SECONDS = 5.0


@dataclass
class MixWork:
    """One shard's mix file to write (what a worker needs; no database)."""

    pool_dir: str
    out_dir: str
    shard: str
    drop: set[int]
    rejected: set[int]
    expected_read: int | None
    max_doc_bytes: int
    accept_broken: bool
    cutter: SpanCutter | None = None


def write_mix_work(job: MixWork) -> tuple[dict, pl.DataFrame | None]:
    """The counts of the file written, and the cuts made (span removal; None for document removal)."""
    res = artifacts.write_mix_shard(pool_root(job.pool_dir), Path(job.out_dir), job.shard, job.drop, job.rejected,
                                    expected_read=job.expected_read, max_doc_bytes=job.max_doc_bytes,
                                    accept_broken=job.accept_broken, cut=job.cutter)
    return res, (job.cutter.frame() if job.cutter is not None else None)


@dataclass
class _Shard:
    shard: str
    res: dict | None = None  # the mix_stats row (quarantined / unchanged); set after the write otherwise
    job: MixWork | None = None  # to write
    key: dict | None = None
    mix_file: Path | None = None
    n_rejected: int = 0
    rewrite_cuts: bool = False
    cuts: pl.DataFrame | None = None
    size: int | None = None  # bytes of the mix file (uploaded: the object's)


@dataclass
class MixRun:
    totals: dict = field(default_factory=lambda: {"written": 0, "dropped": 0, "rejected": 0, "cut": 0, "quarantined": 0})
    unchanged: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    shards: dict[str, dict] = field(default_factory=dict)  # shard -> its own mix_stats row, as recorded
    upload_error: str = ""  # the first upload the store refused (one line), "" when none
    uploaded: int = 0  # objects streamed to a remote output


def _looked_up(con, shards: list[str]) -> tuple[dict[str, set[int]], dict[str, tuple]]:
    """The removed lines and the shard_stats figures of ``shards``, in two queries (not two per shard)."""
    in_run = "shard in (select unnest(?::varchar[]))"
    drops: dict[str, set[int]] = {}
    for shard, line in con.execute(f"select shard, line from removals where {in_run}", [shards]).fetchall():
        drops.setdefault(shard, set()).add(line)
    stats = {r[0]: r[1:] for r in con.execute(f"""select shard, read, rejected, coalesce(status, 'ok'), shard_fingerprint
                                                  from shard_stats where {in_run}""", [shards]).fetchall()}
    return drops, stats


def rejected_rel(shard: str) -> str:
    """A shard's rejected lines relative to the output (artifacts.rejected_path)."""
    return f"rejected/{local_rel(shard)}.jsonl"


def _rejected_text(out: Path, shard: str, n_rejected: int, store: Location | None) -> str | None:
    """The shard's rejected-lines file: the local one, else (uploaded earlier) the store's."""
    rej_path = artifacts.rejected_path(out, shard)
    if rej_path.exists():
        return rej_path.read_text(encoding="utf-8")
    if store is not None and n_rejected:
        return outbox.read_text(store, rejected_rel(shard))
    return None


def _plan(con, out: Path, pool_dir: Path, shard: str, removal: str, cfg: DetectConfig, content_key: str,
          run: MixRun, warn: Callable[[str], None], drop: set[int], stats: tuple | None,
          store: Location | None = None) -> _Shard | None:
    if stats is None:
        run.failed[shard] = "not scanned; materialize shard_matches for it first"
        return None
    if not (stats[2] == "ok" or shards_db.accepted(con, shard, stats[3])):
        gone = artifacts.remove_outputs(out, shard, rejected=False)
        mix_state.forget(out, shard)
        warn(f"{shard}: {stats[2]} stream, quarantined (no mix file{'; stale one removed' if gone else ''})")
        run.totals["quarantined"] += 1
        return _Shard(shard, res={"shard": shard, "written": 0, "dropped": 0, "rejected": 0, "path": None,
                                  "status": "quarantined", "cut": 0}, rewrite_cuts=True)
    text = _rejected_text(out, shard, stats[1] or 0, store)
    # one record per "\n" (a raw line may hold U+2028 and other characters str.splitlines would split at)
    rejected = {json.loads(line)["line"] for line in text.split("\n") if line} if text else set()
    mix_file = artifacts.mix_path(out, pool_dir, shard)
    key = mix_state.state_key(shard_path(pool_dir, shard), drop, rejected) | {
        "status": stats[2], "removal": removal, "detector": cfg.digest() if removal == "span" else None}
    res = mix_state.current(out, shard, key, mix_file, remote=store is not None)
    if res is not None:
        run.unchanged += 1
        return _Shard(shard, res=res, mix_file=mix_file, key=key)
    cutter = span_cutter(con, shard, cfg, content_key) if removal == "span" else None  # --removal span: cut the spans instead
    job = MixWork(pool_dir=str(pool_dir), out_dir=str(out), shard=shard, drop=drop, rejected=rejected,
                 expected_read=stats[0] if stats[2] == "ok" else None, max_doc_bytes=cfg.max_doc_bytes,
                 accept_broken=stats[2] != "ok", cutter=cutter)
    return _Shard(shard, job=job, key=key, mix_file=mix_file, n_rejected=len(rejected), rewrite_cuts=True)


def _written(jobs: list[MixWork], workers: int, idle: Callable[[], None]) -> Iterator[tuple[MixWork, object]]:
    n = workers_for(len(jobs), workers)
    if n > 1:
        yield from map_in_order(write_mix_work, jobs, n, preload=["contam_assets.executor.mix"],
                                label=lambda j: f"writing the mix of {j.shard}", idle=idle)
        return
    for job in jobs:
        try:
            with frozen_heap():
                res = write_mix_work(job)
        except Exception as exc:  # noqa: BLE001 - one shard's failure does not stop the others
            yield job, exc
            continue
        yield job, res


def _why(exc: Exception) -> str:
    return str(exc) if isinstance(exc, (artifacts.MixError, OSError)) else f"{type(exc).__name__}: {exc}"


def _upload(store: Location, out: Path, p: _Shard, run: MixRun) -> None:
    """The shard's mix file and rejected lines streamed to the store, the local copies removed (UploadError)."""
    if p.mix_file is not None and p.mix_file.is_file():
        rel = p.mix_file.relative_to(out).as_posix()
        p.size = outbox.upload(store, p.mix_file, rel, remove=True)
        p.res = {**p.res, "path": store.url(rel)}
        run.uploaded += 1
    rej = artifacts.rejected_path(out, p.shard)
    if rej.is_file():
        outbox.upload(store, rej, rejected_rel(p.shard), remove=True)
        run.uploaded += 1


def write_mix(connect, out: Path, pool_dir: Path, shards: list[str], removal: str, cfg: DetectConfig, content_key: str,
              workers: int, warn: Callable[[str], None] = print, store: Location | None = None,
              progress=None) -> MixRun:
    """Plan, write and record the mix of ``shards`` (``connect(read_only=...)`` opens the database); with ``store``
    (a remote output) each shard's files are uploaded as they come (store/outbox.py); ``progress``
    (executor/progress.RunProgress) hears of each shard done."""
    out, pool_dir, run = Path(out), pool_root(pool_dir), MixRun()  # a remote pool: its URL, read in place
    plans: list[_Shard] = []
    with connect(read_only=True) as con:
        drops, stats = _looked_up(con, shards)
        for shard in shards:
            try:
                p = _plan(con, out, pool_dir, shard, removal, cfg, content_key, run, warn, drops.get(shard, set()),
                          stats.get(shard), store)
            except (artifacts.MixError, OSError) as exc:
                run.failed[shard] = str(exc)
                continue
            if p is not None:
                plans.append(p)
    pending: list[_Shard] = []
    since = [0.0]

    def flush() -> None:
        if not pending:
            return
        # one delete and one insert per table for the whole batch, rows in the shards' order (a statement per shard
        # costs more than a small shard's mix)
        in_batch = "shard in (select unnest(?::varchar[]))"
        shards = [p.shard for p in pending]
        recut = [p for p in pending if p.rewrite_cuts]  # cuts of span removal follow the file written (none for document removal)
        cuts = [p.cuts for p in recut if p.cuts is not None and p.cuts.height]
        with connect() as con:
            tables.ensure_schema(con)
            tables.replace_many(con, [
                ("mix_stats", in_batch, [shards], pl.DataFrame([p.res for p in pending], infer_schema_length=None)),
                ("cuts", in_batch, [[p.shard for p in recut]], pl.concat(cuts, how="vertical_relaxed") if cuts else None),
                ("shard_errors", f"{in_batch} and step = 'mix'", [shards], None)])
        for p in pending:
            if p.job is not None or p.size is not None:  # written, or an unchanged one uploaded now
                mix_state.record(out, p.shard, p.key, p.res, p.mix_file, size=p.size, uploaded=store is not None)
        if store is not None:  # the shards' table rows as Parquet parts beside their mix (store/table_parts.py)
            try:
                run.uploaded += len(table_parts.sync(connect, store, out, shards).upload)
            except outbox.UploadError as exc:
                run.upload_error = run.upload_error or str(exc)
                run.failed.setdefault(shards[0], str(exc))
        pending.clear()

    def flush_if_due() -> None:
        if pending and (len(pending) >= FLUSH_SHARDS or time.monotonic() - since[0] >= FLUSH_SECONDS):
            flush()

    results = _written([p.job for p in plans if p.job is not None], workers, flush_if_due)
    for p in plans:
        if p.job is not None:
            job, got = next(results)
            assert job is p.job
            if isinstance(got, Exception):
                run.failed[p.shard] = _why(got)
                continue
            p.res, p.cuts = got
            p.res["rejected"] = p.n_rejected
        if store is not None and p.res.get("status") != "quarantined":
            if run.upload_error:  # the store refused an earlier object: this shard is not uploaded either
                run.failed[p.shard] = f"not uploaded: {run.upload_error}"
                continue
            try:
                _upload(store, out, p, run)
            except outbox.UploadError as exc:
                run.upload_error = run.failed[p.shard] = str(exc)
                continue
        if progress is not None:
            progress.shard_done(p.shard, read=p.job is not None)
        if not pending:
            since[0] = time.monotonic()
        pending.append(p)
        run.shards[p.shard] = {**p.res, "unchanged": p.job is None and p.res.get("status") != "quarantined"}
        for k in ("written", "dropped", "rejected", "cut"):
            run.totals[k] += p.res.get(k) or 0
        flush_if_due()
    flush()
    if run.failed:
        with connect() as con:
            for shard, why in run.failed.items():
                shards_db.record_error(con, shard, "mix", why)
    return run


class MixAsScanned:
    """A remote output's mix written during the scan step: each shard whose scan rows are committed (``ready``, from
    the OutcomeWriter's callback) is mixed, uploaded with its rejected lines and table parts, and recorded at the
    step's next ``drain`` (the engine's idle calls, after each outcome), in the step process, while the workers scan
    the next shards.  A shard's mix needs only its own removals (its matches and the review decisions and translation
    links known before the scan: store/tables.recompute_removals runs per shard as its rows are written), so it is the
    file the mix step would write; the mix step then finds it current (mix_state) and verifies it.  A shard whose
    mix fails here is left to the mix step, which writes it again or fails it with its one line."""

    def __init__(self, connect, out: Path, pool_dir: Path, removal: str, cfg: DetectConfig, content_key: str,
                 store: Location, warn: Callable[[str], None] = print):
        self.connect, self.out, self.pool_dir, self.store, self.warn = connect, out, pool_dir, store, warn
        self.removal, self.cfg, self.content_key = removal, cfg, content_key
        self.ready: list[str] = []
        self.stopped = False  # the store refused an object, or mixing raised: no more mixing here (the mix step does it)

    def add(self, shard: str) -> None:
        if not self.stopped:
            self.ready.append(shard)

    def drain(self) -> None:
        if not self.ready:
            return
        shards, self.ready = self.ready, []
        try:
            run = write_mix(self.connect, self.out, self.pool_dir, shards, self.removal, self.cfg, self.content_key, 1,
                            warn=self.warn, store=self.store)
        except Exception as exc:  # noqa: BLE001 - the scan goes on; the mix step writes these shards
            self.stopped = True
            self.warn(f"mixing during the scan stopped ({type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}); "
                      "the mix step writes the remaining shards")
            return
        self.stopped = bool(run.upload_error)
