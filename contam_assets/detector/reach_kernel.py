"""The question-floor bound of a document compiled (numba): scan.can_reach_floor, whether any record holding a
non-hot index key of the document can reach question overlap ``floor`` with the document's keys (decon rule: only a
non-hot n-gram starts a cluster; overlap is the matched keys' idf over the record's idf total).  `_may_reach` first
answers from each key's smallest record total alone (no postings read), then `_reach` sums each record's idf over
the postings (every idf is ln(N/df) >= 0, so a record's sum only grows as keys are added).  walk_kernel calls
`_reach_many` for a batch's documents before it walks them (a call of its own: numba's cache of a kernel does not
follow a change in another file's kernel it calls); scan.can_reach_floor_numpy is the plain path, and
test_walk_kernel.py holds them equal.
"""

from __future__ import annotations

import numpy as np

from contam_assets.detector import compiled

ORDER_SLACK = 1e-6  # relative: what summing the same idf in another order may move a total by, many times over


def _may_reach(u, hot, q_idf, key_min, hot_idf, floor):
    """False only when no record holding a non-hot key of ``u`` can reach ``floor`` (`_reach`'s test), read from each
    key's smallest record total (``key_min``: NgramIndex.key_min_total) without its postings.  A record ``d`` holds
    only keys whose smallest total is at most its own total T_d, so its sum is at most the idf of every such key of
    ``u``; with the keys in ascending ``key_min``, the test at the last key at or under T_d (idf summed so far, plus
    the hot keys') then reaches ``floor * key_min`` of that key whenever the record reaches ``floor * T_d``.  The
    slack (ORDER_SLACK, relative) covers the other order of summation."""
    cold = np.empty(len(u), dtype=np.int64)
    n = 0
    for k in u:
        if not hot[k]:
            cold[n] = k
            n += 1
    cold = cold[:n]
    mins = np.empty(n)
    for j in range(n):
        mins[j] = key_min[cold[j]]
    order = np.argsort(mins)
    total = hot_idf
    for j in order:
        total += q_idf[cold[j]]
        if total >= floor * mins[j] * (1 - ORDER_SLACK):
            return True
    return False


def _reach(present, hot, q_idf, q_offsets, q_docs, q_idf_sum, key_min, floor, use_hot, only, use_only, acc, stamp, call):
    """scan.can_reach_floor: may a record (of ``only``) reach question overlap ``floor`` with these keys?
    ``acc``/``stamp``: a float and an int per record, kept between calls (a record's sum counts from zero the
    first time this call, ``call[0]``, reaches it)."""
    if floor <= 0:
        return True
    u = np.unique(present)
    hot_idf = 0.0
    n_pairs = 0
    for k in u:
        if hot[k]:
            if use_hot:
                hot_idf += q_idf[k]
        else:
            n_pairs += q_offsets[k + 1] - q_offsets[k]
    if n_pairs == 0:
        return False  # decon rule: a hot n-gram starts no cluster
    if not _may_reach(u, hot, q_idf, key_min, hot_idf, floor):
        return False  # no record's sum can reach the floor: the postings are not read
    call[0] += 1
    c = call[0]
    touched = np.empty(n_pairs, dtype=np.int64)
    nt = 0
    for k in u:  # each record's idf summed in key order, as np.bincount sums the pairs
        if not hot[k]:
            for q in range(q_offsets[k], q_offsets[k + 1]):
                d = q_docs[q]
                if stamp[d] != c:
                    stamp[d] = c
                    acc[d] = 0.0
                    touched[nt] = d
                    nt += 1
                acc[d] += q_idf[k]
    for t in range(nt):
        d = touched[t]
        # a relative slack of 1e-9 keeps the bound on the safe side of float rounding
        if (not use_only or only[d]) and acc[d] + hot_idf >= floor * q_idf_sum[d] * (1 - 1e-9):
            return True
    return False


def _reach_many(keys, starts, lens, maybe, n, min_doc, hot, q_idf, q_offsets, q_docs, q_idf_sum, key_min, floor, only,
                use_only, acc, stamp, call, out):
    """``out[j]``: `_reach` of document ``maybe[j]`` of a batch (its keys at ``keys[starts[i]:]``, ``lens[i]`` tokens),
    False for one under ``min_doc`` tokens (decon rule: not scanned): walk_kernel walks only the documents it passes."""
    for j in range(len(maybe)):
        i = maybe[j]
        if lens[i] < min_doc:
            out[j] = False
            continue
        doc_keys = keys[starts[i] : starts[i] + lens[i] - n + 1]
        out[j] = _reach(doc_keys[doc_keys >= 0], hot, q_idf, q_offsets, q_docs, q_idf_sum, key_min, floor, True, only,
                        use_only, acc, stamp, call)


if compiled.numba_installed():
    _may_reach = compiled.njit()(_may_reach)
    _reach = compiled.njit(nogil=True)(_reach)
    _reach_many = compiled.njit(nogil=True)(_reach_many)
