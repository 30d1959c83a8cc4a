"""decon's sampled walk, its cluster expansion and the question-floor bound compiled (numba).

For a document whose exact index key is known at every position (scan.scan_many looks them all up at
once), `clusters` is clusters.find_clusters written as one walk over the index's arrays: the same
clusters in the same order, each record's matched keys in the same insertion order (the order
score_clusters sums their idf in), the same bounds and ends.  Beside the walk it sums each record's
matched idf and keeps only the records that may reach the question floor (a relative slack of 1e-6, far
above any difference of summation order), so score_clusters builds and scores Python objects for those
only: it would skip every other one on the same bound.  `reach` is scan.can_reach_floor, and `answer_hits`
the hashing, lookup and span merging of boundaries.long_answer's window (the idf sum stays there, in numpy).

Both need numba; clusters.py and scan.py keep the plain paths (the reference, with the thorough rules'
short questions, and with the compiled setting off).  test_walk_kernel.py holds them equal.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from contam_assets.detector import compiled, reach_kernel
from contam_assets.detector.clusters import Cluster
from contam_assets.detector.ngrams import PRIME, SEED, _mix

AVAILABLE = compiled.numba_installed()
SLACK = 1e-6  # the survivors' bound: kept when within this relative distance of the floor


def _grow(a, need):
    if need <= len(a):
        return a
    b = np.empty(max(need, 2 * len(a)), dtype=a.dtype)
    b[: len(a)] = a
    return b


def _bisect(a, v, right):
    """np.searchsorted(a, v, side="right" if right else "left") on ascending ``a`` (a plain loop: numba compiles
    it in a fraction of the time its searchsorted takes)."""
    lo, hi = 0, len(a)
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < v or (right and a[mid] == v):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _find(sorted_a, v):
    """Position of ``v`` in ascending ``sorted_a``, or -1."""
    s = _bisect(sorted_a, v, False)
    if s < len(sorted_a) and sorted_a[s] == v:
        return s
    return -1


def _hit(s, k, t, idx, side, drop, bounds, head, tail, nxt, ev_key, ne, nmatch, sidf, q_idf, max_misses):
    """Record slot ``s`` hit by key ``k`` at step ``t`` (position ``idx``); returns the events used.  A record's
    matched keys are a chain of events (``head``, ``nxt``, ``tail``) in the order they were first matched."""
    e = head[s]
    seen = False
    while e >= 0:  # is k among the record's matched keys?
        if ev_key[e] == k:
            seen = True
            break
        e = nxt[e]
    if not seen:
        ev_key[ne] = k
        nxt[ne] = -1
        nxt[tail[s]] = ne
        tail[s] = ne
        ne += 1
        nmatch[s] += 1
        sidf[s] += q_idf[k]
        drop[s] = t + max_misses  # decon rule: a new unique matched n-gram resets the miss count
    else:
        drop[s] += 1  # a repeated n-gram is not a miss
    bounds[s, side] = idx
    return ne


def _traverse(keys, cand, start, step, side, recs, drop, bounds, head, tail, nxt, ev_key, ne, nmatch, sidf,
              q_offsets, q_docs, q_idf, max_misses):
    """clusters._traverse over arrays; returns (last position visited, events used, the event arrays).  Only the
    records still in the walk are looked at (``alive``, in record order): a record dropped at step t stays dropped,
    for only a hit moves its drop step, and a hit needs it in the walk; each record's hits and events are those of a
    pass over all of them."""
    R = len(recs)
    alive = np.empty(R, dtype=np.int64)
    for s in range(R):
        drop[s] = max_misses
        alive[s] = s
    na = R
    last = max_misses
    nc = len(cand)
    if step > 0:
        j = _bisect(cand, start, True)
        room0 = len(keys) - 1
    else:
        j = _bisect(cand, start, False) - 1
        room0 = 0
    idx, t = start, 0
    while t < last:
        room = room0 - idx if step > 0 else idx
        if 0 <= j < nc:
            gap = abs(cand[j] - idx)
        else:
            gap = room + 1
        if gap > room or t + gap > last:  # only misses until every record is dropped, or the edge
            idx += step * min(last - t, room)
            break
        idx, t, j = cand[j], t + gap, j + step
        k = keys[idx]
        a, b = q_offsets[k], q_offsets[k + 1]
        kept = 0
        for j2 in range(na):  # the records dropped before this step leave the walk
            s = alive[j2]
            if drop[s] >= t:
                alive[kept] = s
                kept += 1
        na = kept
        if ne + min(na, b - a) > len(ev_key):
            ev_key = _grow(ev_key, ne + na + 16)
            nxt = _grow(nxt, len(ev_key))
        # the alive records that are in the key's postings, both ascending: a search of the smaller in the larger
        # where one is under an eighth of the other, else one merge of the two; the hits come in record order
        if na * 8 < b - a:
            post = q_docs[a:b]
            for j2 in range(na):
                s = alive[j2]
                if _find(post, recs[s]) >= 0:
                    ne = _hit(s, k, t, idx, side, drop, bounds, head, tail, nxt, ev_key, ne, nmatch, sidf, q_idf, max_misses)
                    if drop[s] > last:
                        last = drop[s]
        elif (b - a) * 8 >= na:
            p = a
            for j2 in range(na):
                s = alive[j2]
                r = recs[s]
                while p < b and q_docs[p] < r:
                    p += 1
                if p == b:
                    break
                if q_docs[p] == r:
                    ne = _hit(s, k, t, idx, side, drop, bounds, head, tail, nxt, ev_key, ne, nmatch, sidf, q_idf, max_misses)
                    if drop[s] > last:
                        last = drop[s]
        else:
            for p in range(a, b):
                s = _find(recs, q_docs[p])
                if s >= 0 and drop[s] >= t:
                    ne = _hit(s, k, t, idx, side, drop, bounds, head, tail, nxt, ev_key, ne, nmatch, sidf, q_idf, max_misses)
                    if drop[s] > last:
                        last = drop[s]
    # decon rule: a record is dropped after 11 consecutive misses; the walk ends when none is left
    return idx, ne, ev_key, nxt


def _walk(keys, hot, q_offsets, q_docs, q_idf, q_idf_sum, max_idf, only, use_only, sample_every, max_misses, floor):
    """clusters.find_clusters with exact keys.  Returns per cluster its end and survivor count, per survivor its
    record, bounds and matched-key count, and the survivors' matched keys back to back in insertion order."""
    m = len(keys)
    cand = np.flatnonzero(keys >= 0)  # with exact keys every candidate position is a hit
    nc = len(cand)
    cl_end = np.empty(m, dtype=np.int64)
    cl_count = np.empty(m, dtype=np.int64)
    sv_local = np.empty(16, dtype=np.int64)
    sv_first = np.empty(16, dtype=np.int64)
    sv_last = np.empty(16, dtype=np.int64)
    sv_count = np.empty(16, dtype=np.int64)
    sv_keys = np.empty(64, dtype=np.int64)
    ev_key = np.empty(64, dtype=np.int64)
    nxt = np.empty(64, dtype=np.int64)
    n_cl, n_sv, n_keys = 0, 0, 0
    bound = floor * (1.0 - SLACK)
    i, ci = 0, 0
    while i < m:
        # decon rule: look up every `sample_every`-th n-gram; a miss moves `sample_every` tokens
        while ci < nc and cand[ci] < i:
            ci += 1
        hit = -1
        for j in range(ci, nc):
            if (cand[j] - i) % sample_every == 0:
                hit = cand[j]
                break
        if hit < 0:
            break
        i = hit
        key = keys[hit]
        if hot[key]:
            i += 1  # decon rule: a hot n-gram moves one token and starts no cluster
            continue
        recs = q_docs[q_offsets[key] : q_offsets[key + 1]]
        R = len(recs)
        if R == 0:  # a key without records (none in a built index): clusters._traverse stops at once both ways
            cl_end[n_cl] = hit
            cl_count[n_cl] = 0
            n_cl += 1
            i = max(i, hit + 1)
            continue
        drop = np.empty(R, dtype=np.int64)
        bounds = np.empty((R, 2), dtype=np.int64)  # first position, last position
        head = np.empty(R, dtype=np.int64)
        tail = np.empty(R, dtype=np.int64)
        nmatch = np.zeros(R, dtype=np.int64)
        sidf = np.zeros(R, dtype=np.float64)
        ev_key = _grow(ev_key, R)
        nxt = _grow(nxt, len(ev_key))
        for s in range(R):  # every record of the key's postings starts with it matched
            ev_key[s] = key
            nxt[s] = -1
            head[s] = s
            tail[s] = s
            bounds[s, 0] = hit
            bounds[s, 1] = hit
            nmatch[s] = 1
            sidf[s] = q_idf[key]
        ne = R
        # decon rule: expand left first, then right, each from the hit with fresh miss counts
        _, ne, ev_key, nxt = _traverse(keys, cand, hit, -1, 0, recs, drop, bounds, head, tail, nxt, ev_key, ne, nmatch,
                                       sidf, q_offsets, q_docs, q_idf, max_misses)
        end, ne, ev_key, nxt = _traverse(keys, cand, hit, 1, 1, recs, drop, bounds, head, tail, nxt, ev_key, ne, nmatch,
                                         sidf, q_offsets, q_docs, q_idf, max_misses)
        kept = 0
        for s in range(R):
            d = recs[s]
            if use_only and not only[d]:
                continue
            need = bound * q_idf_sum[d]
            if nmatch[s] * max_idf[d] < need or sidf[s] < need:
                continue  # score_clusters drops it on the same bound, without the slack
            if n_sv == len(sv_local):
                sv_local, sv_first = _grow(sv_local, n_sv + 1), _grow(sv_first, n_sv + 1)
                sv_last, sv_count = _grow(sv_last, n_sv + 1), _grow(sv_count, n_sv + 1)
            sv_local[n_sv] = d
            sv_first[n_sv] = bounds[s, 0]
            sv_last[n_sv] = bounds[s, 1]
            sv_count[n_sv] = nmatch[s]
            sv_keys = _grow(sv_keys, n_keys + nmatch[s])
            e = head[s]
            while e >= 0:
                sv_keys[n_keys] = ev_key[e]
                n_keys += 1
                e = nxt[e]
            n_sv += 1
            kept += 1
        cl_end[n_cl] = end
        cl_count[n_cl] = kept
        n_cl += 1
        i = max(i, end + 1)  # decon rule: resume after the cluster's end
    return cl_end[:n_cl], cl_count[:n_cl], sv_local[:n_sv], sv_first[:n_sv], sv_last[:n_sv], sv_count[:n_sv], sv_keys[:n_keys]


def _walk_many(keys, starts, lens, maybe, n, min_doc, hot, q_offsets, q_docs, q_idf, q_idf_sum, max_idf, only,
               use_only, sample_every, max_misses, floor):
    """scan.scan_many's loop over documents in one call: for each document ``maybe[j]`` (its keys at
    ``keys[starts[i]:]``, ``lens[i]`` tokens) long enough to scan, the walk (`_walk`; the floor bound is
    reach_kernel's, before).  Returns `_walk`'s arrays for all of them back to back, and per cluster its document."""
    cl_doc = np.empty(16, dtype=np.int64)
    cl_end = np.empty(16, dtype=np.int64)
    cl_count = np.empty(16, dtype=np.int64)
    sv = np.empty((16, 4), dtype=np.int64)  # per survivor: record, first position, last position, matched keys
    sv_keys = np.empty(64, dtype=np.int64)
    n_cl, n_sv, n_keys = 0, 0, 0
    for j in range(len(maybe)):
        i = maybe[j]
        if lens[i] < min_doc:
            continue  # decon rule: documents under min_doc_tokens are not scanned
        doc_keys = keys[starts[i] : starts[i] + lens[i] - n + 1]
        ends, counts, local, first, last, count, flat = _walk(doc_keys, hot, q_offsets, q_docs, q_idf, q_idf_sum,
                                                              max_idf, only, use_only, sample_every, max_misses, floor)
        c, r, k = len(ends), len(local), len(flat)
        if n_cl + c > len(cl_doc):
            cl_doc, cl_end, cl_count = _grow(cl_doc, n_cl + c), _grow(cl_end, n_cl + c), _grow(cl_count, n_cl + c)
        if n_sv + r > len(sv):
            bigger = np.empty((max(n_sv + r, 2 * len(sv)), 4), dtype=np.int64)
            bigger[:n_sv] = sv[:n_sv]
            sv = bigger
        sv_keys = _grow(sv_keys, n_keys + k)
        for t in range(c):
            cl_doc[n_cl + t] = i
            cl_end[n_cl + t] = ends[t]
            cl_count[n_cl + t] = counts[t]
        for t in range(r):
            sv[n_sv + t, 0] = local[t]
            sv[n_sv + t, 1] = first[t]
            sv[n_sv + t, 2] = last[t]
            sv[n_sv + t, 3] = count[t]
        sv_keys[n_keys : n_keys + k] = flat
        n_cl, n_sv, n_keys = n_cl + c, n_sv + r, n_keys + k
    return cl_doc[:n_cl], cl_end[:n_cl], cl_count[:n_cl], sv[:n_sv], sv_keys[:n_keys]


def _answer_hits(tokens, ws, we, an, keys, pos, spans):
    """The ``an``-grams of ``tokens[ws:we]`` found in ``keys`` (ascending): their positions in ``keys``, ascending and
    each once, as np.unique gives them (ngrams.py's hash, numpy's searchsorted), and their spans merged as
    boundaries.long_answer merges them; returns (positions, spans) written into ``pos`` and ``spans``."""
    found = 0
    n_spans = 0
    nk = len(keys)
    for p in range(ws, we - an + 1):
        h = SEED
        for j in range(an):  # ngrams.py: h = SEED; h = (h ^ mix(t)) * PRIME per token; mix(h ^ n)
            h = (h ^ _mix(np.uint64(tokens[p + j]))) * PRIME
        h = _mix(h ^ np.uint64(an))
        i = _bisect(keys, h, False)
        if i < nk and keys[i] == h:
            pos[found] = i
            found += 1
            if n_spans and p <= spans[n_spans - 1, 1] + an:  # decon: positions within ngram_size of the cluster merge
                spans[n_spans - 1, 1] = max(spans[n_spans - 1, 1], p + an - 1)
            else:
                spans[n_spans, 0] = p
                spans[n_spans, 1] = p + an - 1
                n_spans += 1
    hits = pos[:found]
    hits.sort()  # the hits as np.unique gives them: ascending, each once
    u = 0
    for t in range(found):
        if u == 0 or hits[t] != pos[u - 1]:
            pos[u] = hits[t]
            u += 1
    return u, n_spans


if AVAILABLE:
    _grow = compiled.njit()(_grow)
    _bisect = compiled.njit()(_bisect)
    _find = compiled.njit()(_find)
    _hit = compiled.njit()(_hit)
    _traverse = compiled.njit()(_traverse)
    _walk = compiled.njit(nogil=True)(_walk)
    _walk_many = compiled.njit(nogil=True)(_walk_many)
    _mix = compiled.njit(inline="always")(_mix)
    _answer_hits = compiled.njit(nogil=True)(_answer_hits)

_NO_ONLY = np.zeros(1, dtype=bool)
_ARRAYS: dict[int, tuple] = {}


def _arrays(index) -> tuple:
    """What the kernels read of an index: contiguous, of the kernels' types (views of its own arrays where they are
    already).  Kept here, not on the index: whatever its ``__dict__`` holds travels to the scan workers."""
    held = _ARRAYS.get(id(index))
    if held is not None and held[0]() is index:
        return held[1]
    got = (np.ascontiguousarray(index.hot, dtype=np.bool_), np.ascontiguousarray(index.q_offsets, dtype=np.int64),
           np.ascontiguousarray(index.q_docs), np.ascontiguousarray(index.q_idf, dtype=np.float64),
           np.ascontiguousarray(index.q_idf_sum, dtype=np.float64),
           np.ascontiguousarray(index.record_max_idf(), dtype=np.float64),
           np.ascontiguousarray(index.key_min_total(), dtype=np.float64))
    if len(_ARRAYS) >= 8:
        _ARRAYS.clear()
    key = id(index)
    # the entry goes with the index (a weak reference whose callback drops it): no old postings are kept alive
    _ARRAYS[key] = (weakref.ref(index, lambda _ref, key=key: _ARRAYS.pop(key, None)), got)
    return got


def clusters(index, keys: np.ndarray, cfg, floor: float, only: np.ndarray | None = None) -> list[Cluster]:
    """clusters.find_clusters(index, tokens, cfg, keys=keys) (exact keys, no short questions), each cluster holding
    only the records that may reach question overlap ``floor`` (and are in ``only``); clusters left without
    any are dropped.  ``floor`` 0 keeps every record: the walk as find_clusters gives it."""
    hot, q_offsets, q_docs, q_idf, q_idf_sum, max_idf, _ = _arrays(index)
    ends, counts, local, first, last, count, flat = _walk(
        np.ascontiguousarray(keys, dtype=np.int64), hot, q_offsets, q_docs, q_idf, q_idf_sum, max_idf,
        _NO_ONLY if only is None else only, only is not None, int(cfg.sample_every),
        int(cfg.question_max_consecutive_misses), float(floor))
    survivors = np.stack([local, first, last, count], axis=1)
    return next(iter(_built(np.zeros(len(ends), dtype=np.int64), ends, counts, survivors, flat).values()), [])


def clusters_many(index, keys: np.ndarray, starts: np.ndarray, lens: np.ndarray, maybe: np.ndarray, cfg,
                  floor: float, only: np.ndarray | None = None) -> dict[int, list[Cluster]]:
    """{document: its clusters} for the documents ``maybe`` of a batch (``keys``: every position's exact key, the
    documents back to back from ``starts``, ``lens`` tokens each): those long enough to scan, that
    :func:`reach` lets through and whose walk (:func:`clusters`) keeps a cluster.  scan.scan_many's per-document
    loop in one compiled call."""
    hot, q_offsets, q_docs, q_idf, q_idf_sum, max_idf, key_min = _arrays(index)
    acc, stamp, call = _scratch(index)
    keys, starts, lens = (np.ascontiguousarray(a, dtype=np.int64) for a in (keys, starts, lens))
    maybe, o = np.ascontiguousarray(maybe, dtype=np.int64), _NO_ONLY if only is None else only
    n, min_doc = int(cfg.ngram_size), int(cfg.min_doc_tokens)
    passed = np.empty(len(maybe), dtype=np.bool_)  # the floor bound of each, in its own compiled call (reach_kernel)
    reach_kernel._reach_many(keys, starts, lens, maybe, n, min_doc, hot, q_idf, q_offsets, q_docs, q_idf_sum, key_min,
                             float(floor), o, only is not None, acc, stamp, call, passed)
    got = _walk_many(keys, starts, lens, maybe[passed], n, min_doc, hot, q_offsets, q_docs, q_idf, q_idf_sum, max_idf,
                     o, only is not None, int(cfg.sample_every), int(cfg.question_max_consecutive_misses), float(floor))
    return _built(*got)


def _built(docs, ends, counts, survivors, flat) -> dict[int, list[Cluster]]:
    """The kernels' arrays as Cluster objects, by document (a cluster no record survived in is left out)."""
    out: dict[int, list[Cluster]] = {}
    cuts = np.zeros(len(survivors) + 1, dtype=np.int64)
    np.cumsum(survivors[:, 3], out=cuts[1:])
    cuts, flat, rows = cuts.tolist(), flat.tolist(), survivors.tolist()
    s = 0
    for doc, end, c in zip(docs.tolist(), ends.tolist(), counts.tolist()):
        if c:
            mine = range(s, s + c)
            # set() adds the keys one by one, in the walk's order: the iteration order score_clusters sums in
            out.setdefault(doc, []).append(Cluster(matches={rows[r][0]: set(flat[cuts[r] : cuts[r + 1]]) for r in mine},
                                                   bounds={rows[r][0]: [rows[r][1], rows[r][2]] for r in mine}, end=end))
        s += c
    return out


_SCRATCH = threading.local()


def _scratch(index) -> tuple:
    """This thread's per-record sums for ``index`` (kept between calls: allocating them per document costs more
    than the bound)."""
    held = getattr(_SCRATCH, "held", None)
    if held is None or held[0]() is not index:  # a weak reference: an index replaced is not kept alive here
        held = _SCRATCH.held = (weakref.ref(index), np.zeros(index.n_records), np.zeros(index.n_records, dtype=np.int64),
                                np.zeros(1, dtype=np.int64))
    return held[1:]


def reach(index, present: np.ndarray, floor: float, hot: bool = True, only: np.ndarray | None = None) -> bool:
    """scan.can_reach_floor (the same bound; the hot keys' idf summed in another order, inside its slack)."""
    hot_, q_offsets, q_docs, q_idf, q_idf_sum, _, key_min = _arrays(index)
    acc, stamp, call = _scratch(index)
    return bool(reach_kernel._reach(np.ascontiguousarray(present, dtype=np.int64), hot_, q_idf, q_offsets, q_docs, q_idf_sum, key_min,
                       float(floor), hot, _NO_ONLY if only is None else only, only is not None, acc, stamp, call))


def answer_hits(tokens: np.ndarray, ws: int, we: int, an: int, keys: np.ndarray) -> tuple[np.ndarray, list]:
    """(positions in ``keys`` of the ``an``-grams of ``tokens[ws:we]`` whose hash is in ``keys``, ascending and each
    once, their merged spans)."""
    m = max(0, we - ws - an + 1)
    pos, spans = np.empty(m, dtype=np.int64), np.empty((m, 2), dtype=np.int64)
    found, n_spans = _answer_hits(np.asarray(tokens), ws, we, an, keys, pos, spans)
    return pos[:found], [tuple(s) for s in spans[:n_spans].tolist()]


def warm() -> None:
    """Load (or compile) the kernels with the argument types the scan gives them, on a made-up index of two keys."""
    from contam_assets.detector.config import DetectConfig

    class Tiny:
        hot, q_offsets, q_docs = np.array([False, True]), np.array([0, 1, 2], dtype=np.int64), np.array([0, 0], dtype=np.int32)
        q_idf, q_idf_sum, n_records = np.array([1.0, 0.5]), np.array([1.5]), 1

        def record_max_idf(self) -> np.ndarray:
            return np.array([1.0])

        def key_min_total(self) -> np.ndarray:
            return np.array([1.5, 1.5])

    tiny = Tiny()
    keys = np.array([0, -1, 1, 0], dtype=np.int64)
    clusters(tiny, keys, DetectConfig(), 0.5)
    clusters(tiny, keys, DetectConfig(), 0.5, only=np.ones(1, dtype=bool))
    reach(tiny, keys[keys >= 0], 0.5)
    cfg = DetectConfig()
    for only in (None, np.ones(1, dtype=bool)):  # a document of min_doc_tokens whose keys end the array
        clusters_many(tiny, keys, np.array([0]), np.array([cfg.min_doc_tokens]), np.array([0]), cfg, 0.5, only)
    for dtype in (np.uint32, np.uint64):  # a cached stream's ids, a batch's ids
        answer_hits(np.arange(8, dtype=dtype), 0, 8, 3, np.array([1, 2], dtype=np.uint64))
