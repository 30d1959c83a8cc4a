"""Tokenizing ahead: a run's new shards tokenized into the token cache while the reference set is built.

`contam detect` builds the reference set and the index in one process before any shard can be
scanned (11–14 s at the 60 k-instance registry, minutes at a production one), and the other
cores would wait.  Tokenizing needs no index (token_cache.py), so while the build runs,
``workers`` processes (the cores the build leaves) write the token streams of the shards a scan
will surely read in full: shards the scan state does not know with their current identity, and
without a stream for their current key.  The scan then reads those streams (a full plan with a
valid stream: executor/shard_work.py), with the same rows as a scan from the text.

When the build is done, `stop` ends it: shards not started are left to the scan, and a shard in
progress stops at its next batch without caching anything (a stop file the workers look at).
A shard that cannot be read here is only left to the scan, which reports it as before.
"""

from __future__ import annotations

import os
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from contam_assets.detector.config import DetectConfig
from contam_assets.executor.processes import start_pool
from contam_assets.executor.shard_work import cache_stream
from contam_assets.rescan.plan import ShardState, shard_identity
from contam_assets.store import token_cache
from contam_assets.store.pool import check_shard
from contam_assets.store.readers import is_jsonl


@dataclass
class AheadWork:
    shard: str
    path: str
    cfg: DetectConfig
    content_key: str
    cache_root: str
    fingerprint: str
    identity: str
    stop_file: str


def _cache(job: AheadWork) -> str:
    stop = Path(job.stop_file)
    return cache_stream(job.path if "://" in job.path else Path(job.path), job.shard, job.cfg, job.content_key, Path(job.cache_root), job.fingerprint,
                        job.identity, stop=stop.exists)


def shards_to_tokenize(pool_dir: Path, shards: list[str], cfg: DetectConfig, content_key: str, cache_root: Path,
                       states: dict[str, ShardState], follow_symlinks: bool = False) -> list[tuple[str, Path, str, str]]:
    """(shard, path, fingerprint, identity) of the shards whose next scan surely tokenizes them: not known to
    the scan state with this identity, and no cached stream for their key."""
    out = []
    for shard in shards:
        if not is_jsonl(shard):
            continue  # token streams are cached for JSON/JSONL units only (executor/shard_work.py)
        path, _ = check_shard(pool_dir, shard, follow_symlinks)
        if path is None:
            continue  # the scan reports it
        try:
            fp, identity = shard_identity(path)
        except OSError:
            continue
        if shard in states:
            continue  # known to the scan state: its plan decides (a changed shard's full plan reads the text)
        if token_cache.exists(cache_root, shard, token_cache.cache_key(identity, cfg, content_key), with_rejects=True):
            continue
        out.append((shard, path, fp, identity))
    return out


class TokenizeAhead:
    """A pool of ``workers`` processes caching the token streams of ``todo`` until `stop`."""

    def __init__(self, todo: list[tuple[str, Path, str, str]], cfg: DetectConfig, content_key: str, cache_root: Path,
                 workers: int):
        cache_root.mkdir(parents=True, exist_ok=True)
        # a temporary's name (store.files): a run killed between touching and removing it leaves it to the sweep
        self.stop_file = cache_root / f".ahead-stop.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.jobs = [AheadWork(s, str(p), cfg, content_key, str(cache_root), fp, ident, str(self.stop_file))
                     for s, p, fp, ident in todo]
        self.pool = start_pool(workers, ["contam_assets.executor.ahead"]) if self.jobs else None
        try:
            self.futures: list[tuple[str, Future]] = [(j.shard, self.pool.submit(_cache, j)) for j in self.jobs]
        except BaseException:
            self.pool.shutdown(wait=True, cancel_futures=True)
            raise

    def stop(self) -> dict[str, int]:
        """Stop and wait for the workers; how many shards were cached, stopped, broken, not started, failed."""
        counts = dict(cached=0, stopped=0, broken=0, not_started=0, failed=0)
        if self.pool is None:
            return counts
        try:
            self.stop_file.touch()
            for _, fut in self.futures:
                fut.cancel()
            self.pool.shutdown(wait=True, cancel_futures=True)
            for _, fut in self.futures:
                if fut.cancelled():
                    counts["not_started"] += 1
                elif fut.exception() is not None:
                    counts["failed"] += 1  # the scan reads the shard from its text and reports what is wrong
                else:
                    counts[fut.result()] += 1
        finally:
            self.stop_file.unlink(missing_ok=True)
        return counts
