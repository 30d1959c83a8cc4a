"""Work items of a run on the cores of this machine: a pool of worker processes, results in the items' order.

The shard scans (pool_scan.py) and the mix writes (mix.py) share this: ``map_in_order``
hands ``fn(item)`` to ``workers`` processes, at most ``4 x workers`` items in flight, and
yields ``(item, result or exception)`` **in the order of the items**, so the caller (the
step process, the only DuckDB writer) writes what a serial loop would, in the same order.

An item whose ``fn`` raises yields its exception; the others go on.  A worker that dies
(OOM killer, SIGKILL) breaks the pool: its item is tried again alone in a fresh pool, the
others in flight in another fresh pool, and only an item that kills its worker twice fails
(``WorkerDied``).  A fault kill point (store/faults.py) inside a worker kills the step too (an
operator's kill of the run), and a worker whose step is gone exits within a second.  Workers
start from a forkserver, so no step thread is forked.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import wait as wait_for
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager

from contam_assets import settings
from contam_assets.detector.build_budget import available_cpus  # noqa: F401 - the cores a pool may use (re-exported)
from contam_assets.store import faults


class WorkerDied(RuntimeError):
    """The process working on an item died (killed, out of memory) twice in a row."""


def workers_for(n_items: int, workers: int) -> int:
    """Processes a run of ``n_items`` uses with ``workers`` configured (0 = every core; 1 = the step's own process)."""
    return max(1, min(workers if workers > 0 else available_cpus(), n_items))


def workers_from_env(n_items: int, env=os.environ) -> int:
    """``workers_for`` with the scan_workers setting (default 0 = every core)."""
    return workers_for(n_items, settings.env_value("scan_workers", env))


@contextmanager
def frozen_heap():
    """Work done in the step's own process (one worker) without the cyclic collector walking the step's heap.

    A step holds Dagster, DuckDB, the index and the reference records: hundreds of thousands of
    objects that every full collection triggered by the scan's allocations would traverse again (a
    shard scanned in the step took ~25 % more CPU than in a fresh worker).  ``gc.freeze`` sets them
    aside until the work is done; what the work itself allocates is collected as usual.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


# every module a pool of this package runs its work in (scan, mix, tokenizing ahead), and preload.py (the compiled
# steps and the tokenizer, loaded): `warm_forkserver` has the server import them all once, and the workers of
# every pool start from that copy
# items submitted ahead per worker: enough that the workers keep busy while the caller writes a batch of results
# (a second or so), when each item is a small shard's few milliseconds
WINDOW_PER_WORKER = 4
WORKER_MODULES = ["contam_assets.executor.ahead", "contam_assets.executor.mix", "contam_assets.executor.pool_scan",
                  "contam_assets.executor.preload"]


def warm_forkserver(env=os.environ) -> bool:
    """Start this process's forkserver now, importing every worker module in its own process while this one goes
    on (`contam detect` imports Dagster meanwhile): the first pool then starts without waiting for those imports,
    and no worker imports them again.  False where no local pool would start (one worker, Ray, no forkserver)."""
    if ("forkserver" not in mp.get_all_start_methods() or workers_from_env(2, env) < 2
            or settings.env_value("scan_engine", env) == "ray"):
        return False
    from multiprocessing import forkserver

    mp.get_context("forkserver").set_forkserver_preload(WORKER_MODULES)
    try:
        forkserver.ensure_running()
    except OSError:  # e.g. a TMPDIR too long for its socket's path: the pool starts its workers without the head start
        return False
    return True


def _context(preload: list[str]):
    # forkserver: workers never fork a step process's threads (Dagster's, DuckDB's); the server
    # imports the worker code once, so each worker starts in a fraction of a second
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(preload)
        return ctx
    return mp.get_context("spawn")


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def _watch_step(step_pid: int, every_s: float = 1.0) -> None:
    """A worker outlives a killed step otherwise (its forkserver parent is not the step): leave with it."""
    while True:
        time.sleep(every_s)
        try:
            os.kill(step_pid, 0)
            if _zombie(step_pid):  # killed, not yet reaped by its parent: gone all the same
                os._exit(1)
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:  # a pid taken by another user's process: the step is gone
            os._exit(1)


def _start(step_pid: int, init: Callable | None, initargs: tuple) -> None:
    faults.in_scan_worker(step_pid)
    threading.Thread(target=_watch_step, args=(step_pid,), daemon=True, name="contam-watch-step").start()
    if init is not None:
        init(*initargs)


class _Pools:
    def __init__(self, preload: list[str], init: Callable | None, initargs: tuple):
        self.preload, self.init, self.initargs = preload, init, initargs

    def new(self, n: int) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=n, mp_context=_context(self.preload), initializer=_start,
                                   initargs=(os.getpid(), self.init, self.initargs))


def start_pool(workers: int, preload: list[str]) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes started as the scan's are (forkserver, each leaves with its step)."""
    return _Pools(preload, None, ()).new(workers)


def _alone(fn: Callable, item, pools: _Pools, label: str):
    """One item in a pool of its own (after its worker died once)."""
    pool = pools.new(1)
    try:
        return pool.submit(fn, item).result()
    except BrokenProcessPool:
        return WorkerDied(f"the worker {label} died twice (killed or out of memory)")
    except Exception as exc:  # noqa: BLE001 - the item's own error
        return exc
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _finished(fut: Future) -> bool:
    return fut.done() and not fut.cancelled() and not isinstance(fut.exception(), BrokenProcessPool)


def map_in_order(fn: Callable, items: Iterable, workers: int, *, preload: list[str], init: Callable | None = None,
                 initargs: tuple = (), label: Callable[[object], str] = str, idle: Callable[[], None] | None = None,
                 idle_every_s: float = 1.0) -> Iterator[tuple[object, object]]:
    """(item, fn(item) or its exception) for every item, in the items' order, computed by ``workers`` processes.

    ``fn`` and ``init`` are module-level functions of a module in ``preload``; ``init(*initargs)`` runs once
    in each worker.  ``idle()`` is called (every ``idle_every_s``) while the next result is not ready yet.
    """
    todo = deque(items)
    window: deque[tuple[object, Future]] = deque()
    pools = _Pools(preload, init, initargs)
    pool = pools.new(workers)
    try:
        while todo or window:
            while todo and len(window) < WINDOW_PER_WORKER * workers:
                item = todo.popleft()
                window.append((item, pool.submit(fn, item)))
            item, fut = window.popleft()
            while idle is not None and not fut.done():
                idle()
                wait_for([fut], timeout=idle_every_s)
            try:
                yield item, fut.result()
                continue
            except BrokenProcessPool:
                pass
            except Exception as exc:  # noqa: BLE001 - one bad item does not lose the others' results
                yield item, exc
                continue
            # a worker died: the items in flight with it are lost with the pool; this one runs alone,
            # the others (except those already done) are computed again by a fresh pool, in place
            pool.shutdown(wait=True, cancel_futures=True)
            yield item, _alone(fn, item, pools, label(item))
            pool = pools.new(workers)
            window = deque((i, f) if _finished(f) else (i, pool.submit(fn, i)) for i, f in window)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
