"""The compiled walk and bound (walk_kernel.py) equal the plain ones they stand in for.

- `walk_kernel.clusters` with floor 0 is clusters.find_clusters given exact keys: the same clusters in the
  same order, ends, bounds, and each record's matched keys in the same iteration order (score_clusters sums
  their idf in that order); checked on random documents over a small vocabulary with overlapping postings,
  hot keys and every sampling step from 1 to 5.
- With a floor (and ``only=``), scan_many gives the same candidates compiled as under CONTAM_COMPILED=off,
  on GSM8K and MBPP items planted in host text, cut short and side by side.
- `walk_kernel.reach` is scan.can_reach_floor_numpy on random key sets of the real index: with and without
  the hot keys, with and without ``only=``, at floors around the records' reach.
"""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest

from contam_assets.demo import HostText
from contam_assets.detector import reach_kernel, walk_kernel
from contam_assets.detector.clusters import find_clusters
from contam_assets.detector.config import preset
from contam_assets.detector.matches import tokenize_batch
from contam_assets.detector.ngrams import ngram_hashes
from contam_assets.detector.scan import can_reach_floor_numpy, question_floor, scan_many
from contam_assets.rescan.incremental import task_locals
from contam_assets.store.pool import Document

pytestmark = pytest.mark.skipif(not walk_kernel.AVAILABLE, reason="numba not installed")


class SmallIndex:
    """The arrays the walk reads, from a dict of postings (what NgramIndex holds for its question keys)."""

    def __init__(self, postings: list[list[int]], hot: list[bool], n_records: int, rng: random.Random):
        self.q_offsets = np.zeros(len(postings) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in postings], out=self.q_offsets[1:])
        self.q_docs = np.array([d for p in postings for d in sorted(p)], dtype=np.int32)
        self.hot = np.array(hot, dtype=bool)
        self.q_idf = np.array([rng.uniform(0.1, 5.0) for _ in postings])
        self.q_idf_sum = np.array([rng.uniform(1.0, 20.0) for _ in range(n_records)])
        self.n_records = n_records

    def postings(self, key: int) -> np.ndarray:
        return self.q_docs[self.q_offsets[key] : self.q_offsets[key + 1]]

    def record_max_idf(self) -> np.ndarray:
        out = np.zeros(self.n_records)
        np.maximum.at(out, self.q_docs, np.repeat(self.q_idf, np.diff(self.q_offsets)))
        return out

    def key_min_total(self) -> np.ndarray:
        return np.array([self.q_idf_sum[self.postings(k)].min(initial=np.inf) for k in range(len(self.hot))])


def random_document(rng: random.Random):
    n_keys, n_records = rng.randint(2, 40), rng.randint(1, 15)
    postings = [rng.sample(range(n_records), rng.randint(1, n_records)) for _ in range(n_keys)]
    if rng.random() < 0.1:  # a key without records (a built index has none): the walk stops there at once
        postings[rng.randrange(n_keys)] = []
    hot = [rng.random() < 0.15 for _ in range(n_keys)]
    length = rng.randint(1, 500)
    density = rng.choice([0.02, 0.1, 0.3, 0.7, 1.0])
    keys = [rng.randrange(n_keys) if rng.random() < density else -1 for _ in range(length)]
    for _ in range(rng.randint(0, 3)):  # stretches of exactly the miss limit (and one more) between two hits
        at, gap = rng.randrange(length), rng.choice([10, 11, 12])
        for p in range(at, min(at + gap, length)):
            keys[p] = -1
    return SmallIndex(postings, hot, n_records, rng), np.array(keys, dtype=np.int64)


@pytest.mark.parametrize("seed", range(6))
def test_walk_equals_find_clusters(seed):
    rng = random.Random(seed)
    walks = 0
    for trial in range(250):
        cfg = preset("default").replace(sample_every=rng.randint(1, 5))
        index, keys = random_document(rng)
        n = cfg.ngram_size
        want, _ = find_clusters(index, np.zeros(len(keys) + n - 1, dtype=np.uint64), cfg,
                                hashes=np.zeros(len(keys), dtype=np.uint64), keys=keys)
        got = walk_kernel.clusters(index, keys, cfg, 0.0)
        want = [w for w in want if w.matches]  # a cluster without records is not handed on (nothing to score)
        assert len(got) == len(want), trial
        for g, w in zip(got, want):
            assert g.end == w.end
            assert g.bounds == w.bounds
            assert sorted(g.matches) == sorted(w.matches)
            for d, m in w.matches.items():
                assert list(g.matches[d]) == list(m)  # same keys, same iteration order (the idf sum's order)
        walks += len(want)
    assert walks > 1000


def test_each_way_of_finding_the_live_records_in_a_postings_list():
    """The walk finds a step's live records in the key's postings three ways (a search of each live record in a long
    postings list, one merge of two lists of like size, a search of each posting among many live records); a document
    planted to take each, against clusters.find_clusters."""
    rng = random.Random(7)
    n_records = 120
    postings = [[5], list(range(0, 120, 2)), list(range(0, 120, 3)), list(range(1, 120, 2)), [4, 6]]
    # key 0: one record; 1 and 3: 60 each; 2: 40; 4: two.  The walk's clusters start at key 0 (one live record: a step
    # on key 1 searches it in 60 postings), key 4 (two) and key 2 (forty: a step on key 1 merges the two lists, one on
    # key 4 searches its 2 postings among the forty)
    index = SmallIndex(postings, [False] * 5, n_records, rng)
    keys = np.array([0, 1, 1, 3, -1, 4, 2, 1, 2, -1, -1, 3, 4, 0, 2, 2, 1, 4, 3, 1] * 3, dtype=np.int64)
    cfg = preset("default")
    n = cfg.ngram_size
    want, _ = find_clusters(index, np.zeros(len(keys) + n - 1, dtype=np.uint64), cfg,
                            hashes=np.zeros(len(keys), dtype=np.uint64), keys=keys)
    got = walk_kernel.clusters(index, keys, cfg, 0.0)
    want = [w for w in want if w.matches]
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        assert (g.end, g.bounds) == (w.end, w.bounds)
        assert {d: list(m) for d, m in g.matches.items()} == {d: list(m) for d, m in w.matches.items()}
    sizes = sorted(len(w.matches) for w in want)
    assert sizes[0] <= 2 and sizes[-1] >= 40, sizes  # walks of one or two live records, and of forty


@pytest.fixture(scope="module")
def planted(two_tasks, shared_data):
    """Host documents with GSM8K and MBPP items: whole, side by side, cut short, and with words dropped."""
    cfg, _, _ = two_tasks
    gsm = [json.loads(line) for line in open(shared_data / "gsm8k_test.jsonl")][:60]
    mbpp = [json.loads(line) for line in open(shared_data / "mbpp.jsonl")][:60]
    rng = random.Random(4)
    texts = []
    for i in range(160):
        h = HostText(100 + i)
        parts = [h.document(1)]
        g, m = rng.choice(gsm), rng.choice(mbpp)
        kind = i % 5
        if kind in (0, 2):
            parts.append(g["question"] + "\n" + g["answer"])
        if kind in (1, 2):
            parts.append(m["text"] + "\n" + m["code"])
        if kind == 3:  # cut short: near the floor
            parts += [" ".join(g["question"].split()[: rng.randint(4, 30)]), m["text"]]
        if kind == 4:  # every fifth word dropped: misses inside the walk
            parts.append(" ".join(w for j, w in enumerate(g["question"].split()) if j % 5 != 4) + "\n" + g["answer"])
        parts.append(h.document(1))
        texts.append("\n\n".join(parts))
    for i in range(80):  # the last 40 to 80 % of a question, then its answer: question overlaps around the floor (0.5)
        g = gsm[i % len(gsm)]
        words = g["question"].split()
        cut = max(1, round(len(words) * (0.4 + 0.4 * i / 80)))
        texts.append(f"{HostText(300 + i).document(1)}\n\n{' '.join(words[-cut:])}\n{g['answer']}\n\n{HostText(400 + i).document(1)}")
    docs = [Document(line=i, doc_id=str(i), source=None, text=t, n_bytes=len(t), raw=b"") for i, t in enumerate(texts)]
    _, encoded, _, _ = tokenize_batch(docs, cfg, None)
    return encoded


def test_scan_many_compiled_equals_the_plain_walk(two_tasks, planted, monkeypatch):
    cfg, records, index = two_tasks
    onlys = [None]
    for task in ("gsm8k", "mbpp"):
        only = np.zeros(index.n_records, dtype=bool)
        only[task_locals(index, records, [task])] = True
        onlys.append(only)
    near = 0
    for only in onlys:
        got = scan_many(index, planted, cfg, only=only)
        monkeypatch.setenv("CONTAM_COMPILED", "off")
        want = scan_many(index, planted, cfg, only=only)
        monkeypatch.delenv("CONTAM_COMPILED")
        assert got == want
        assert sum(map(len, want)) > 40
        near += sum(1 for cands in want for c in cands if c.q_overlap < 0.55)
    assert near > 10  # candidates just over the floor, where a bound without its slack would lose them
    # a record pruned by the compiled bound is one score_clusters would have dropped: with floor 0 the kernel
    # keeps more records, never other candidates
    floor = question_floor(cfg)
    kept = pruned = 0
    for toks in planted[:40]:
        k = index.lookup(ngram_hashes(toks, cfg.ngram_size))
        every = walk_kernel.clusters(index, k, cfg, 0.0)
        some = walk_kernel.clusters(index, k, cfg, floor)
        kept += sum(len(c.matches) for c in some)
        pruned += sum(len(c.matches) for c in every) - sum(len(c.matches) for c in some)
    assert kept > 0 and pruned > 0


def same_clusters(got, want) -> None:
    assert [(c.end, c.bounds) for c in got] == [(c.end, c.bounds) for c in want]
    for g, w in zip(got, want):
        assert [(d, list(m)) for d, m in g.matches.items()] == [(d, list(m)) for d, m in w.matches.items()]


def test_one_call_for_a_batch_equals_a_call_per_document(two_tasks, planted, shared_data):
    """clusters_many (scan_many's loop in one compiled call) gives, document by document, what the loop gave:
    nothing under min_doc_tokens or where the bound fails, else the walk's clusters; with and without ``only``,
    at the question floor and at floor 0 (every record kept).  Beside the planted documents: GSM8K questions
    alone, cut to one token under min_doc_tokens and to exactly it (each holds a cluster at floor 0), and one
    question split over two documents, so that an n-gram read across their border would be a hit."""
    cfg, records, index = two_tasks
    n = cfg.ngram_size
    gsm = [json.loads(line) for line in open(shared_data / "gsm8k_test.jsonl")][:3]
    asked = [Document(line=i, doc_id=str(i), source=None, text=g["question"], n_bytes=0, raw=b"") for i, g in enumerate(gsm)]
    _, questions, _, _ = tokenize_batch(asked, cfg, None)
    under, exact = questions[0][: cfg.min_doc_tokens - 1], questions[1][: cfg.min_doc_tokens]
    cut = len(questions[2]) // 2
    head, tail = questions[2][:cut], questions[2][cut:]
    docs = [under, *planted[:50], np.zeros(0, dtype=planted[0].dtype), *planted[50:], exact, head, tail]
    special = {"under": 0, "empty": 51, "exact": len(docs) - 3, "head": len(docs) - 2}

    def own_keys(doc):  # a document's keys hashed on their own: the n-grams inside it, and no more
        return index.lookup(ngram_hashes(doc, n)) if len(doc) >= n else np.zeros(0, dtype=np.int64)

    for name in ("under", "exact", "head"):
        assert walk_kernel.clusters(index, own_keys(docs[special[name]]), cfg, 0.0), name  # each holds a cluster
    lens = np.array([len(d) for d in docs], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)])
    keys = index.lookup(ngram_hashes(np.concatenate(docs), n))
    maybe = np.array([i for i in range(len(docs)) if i % 7 or i in special.values()], dtype=np.int64)  # gaps
    for floor in (question_floor(cfg), 0.0):
        for task in (None, "gsm8k", "mbpp"):
            only = None
            if task:
                only = np.zeros(index.n_records, dtype=bool)
                only[task_locals(index, records, [task])] = True
            got = walk_kernel.clusters_many(index, keys, starts, lens, maybe, cfg, floor, only)
            want = {}
            for i in maybe.tolist():
                if lens[i] < cfg.min_doc_tokens:
                    continue
                doc_keys = own_keys(docs[i])
                if walk_kernel.reach(index, doc_keys[doc_keys >= 0], floor, only=only):
                    found = walk_kernel.clusters(index, doc_keys, cfg, floor, only)
                    if found:
                        want[i] = found
            assert sorted(got) == sorted(want) and len(want) > 20
            assert special["under"] not in got and special["empty"] not in got
            assert not set(got) - set(maybe.tolist())
            if floor == 0.0 and task != "mbpp":
                assert special["exact"] in got and special["head"] in got
            for i in want:
                same_clusters(got[i], want[i])
    # the forkserver's warm-up (walk_kernel.warm, on a made-up index) compiled the very types a scan of a real
    # index passes: a worker does not compile the batch walk again at its first shard
    walk_kernel.warm()
    assert len(walk_kernel._walk_many.signatures) == 1, walk_kernel._walk_many.signatures


def test_reach_equals_can_reach_floor(two_tasks):
    cfg, records, index = two_tasks
    rng = np.random.default_rng(3)
    # this registry has no hot key (df > 2000): mark one key in 20 hot, so that the hot keys' idf counts
    index = dataclasses.replace(index, hot=rng.random(len(index.q_keys)) < 0.05)
    only = np.zeros(index.n_records, dtype=bool)
    only[task_locals(index, records, ["mbpp"])] = True
    outcomes = {True: 0, False: 0}
    for trial in range(400):
        # keys of a few records (so some record can reach), plus random others and repeats
        recs = rng.choice(index.n_records, size=int(rng.integers(1, 4)))
        own = np.flatnonzero(np.isin(index.q_docs, recs))
        owner = np.searchsorted(index.q_offsets, own, side="right") - 1
        take = owner[rng.random(len(owner)) < rng.uniform(0.05, 1.0)]
        keys = np.concatenate([take, rng.integers(0, len(index.q_keys), int(rng.integers(0, 30))), take[:3]])
        floor = float(rng.choice([0.0, 0.2, 0.5, question_floor(cfg), 0.8, 1.0]))
        for hot in (True, False):
            for o in (None, only):
                want = can_reach_floor_numpy(index, keys, floor, hot, o)
                assert walk_kernel.reach(index, keys, floor, hot=hot, only=o) == want, trial
                outcomes[want] += 1
    assert outcomes[True] > 200 and outcomes[False] > 200


def test_the_key_bound_refuses_only_what_reach_refuses(two_tasks):
    """reach_kernel._may_reach (each key's smallest record total, no postings read) answers False only where the sum
    over the postings does, and answers False often enough to matter: random key sets of the real index, floors
    around the question floor."""
    cfg, records, index = two_tasks
    rng = np.random.default_rng(5)
    index = dataclasses.replace(index, hot=rng.random(len(index.q_keys)) < 0.05)
    hot, q_offsets, q_docs, q_idf, q_idf_sum, _, key_min = walk_kernel._arrays(index)
    counts = {"bound refuses": 0, "bound lets through, sum refuses": 0, "both let through": 0}
    for trial in range(400):
        recs = rng.choice(index.n_records, size=int(rng.integers(1, 4)))
        own = np.flatnonzero(np.isin(index.q_docs, recs))
        owner = np.searchsorted(index.q_offsets, own, side="right") - 1
        keys = np.concatenate([owner[rng.random(len(owner)) < rng.uniform(0.0, 1.0)],
                               rng.integers(0, len(index.q_keys), int(rng.integers(1, 60)))])
        u = np.unique(keys)
        floor = float(rng.choice([0.2, 0.5, question_floor(cfg), 0.8]))
        if hot[u].all():
            continue
        bound = reach_kernel._may_reach(u, hot, q_idf, key_min, float(q_idf[u[hot[u]]].sum()), floor)
        exact = can_reach_floor_numpy(index, keys, floor, True, None)
        assert bound or not exact, trial
        counts["both let through" if exact else "bound lets through, sum refuses" if bound else "bound refuses"] += 1
    assert min(counts.values()) > 20, counts


def test_answer_windows_equal_the_numpy_path(two_tasks, planted, monkeypatch):
    """boundaries.long_answer compiled (walk_kernel.answer_hits) against numpy: every record with a long answer,
    windows over real documents and over the records' own answers, with token ids as uint32 (a cached stream)."""
    from contam_assets.detector.boundaries import long_answer

    cfg, records, index = two_tasks
    rng = random.Random(8)
    long = [int(i) for i in np.flatnonzero(index.a_len > cfg.short_answer_token_threshold)]
    assert len(long) > 100
    hits = 0
    for trial in range(600):
        local = rng.choice(long)
        if trial % 2:
            toks = planted[rng.randrange(len(planted))]
        else:  # the record's own answer inside noise: many hits, merged spans
            ans = index.answer_tokens(local)
            noise = np.array([rng.randrange(100_000) for _ in range(rng.randint(0, 40))], dtype=np.uint64)
            toks = np.concatenate([noise, ans[: rng.randint(1, len(ans))], noise[::-1], ans])
        toks = toks.astype(rng.choice([np.uint64, np.uint32]))
        q_end = rng.randint(-1, max(0, len(toks) - 1))
        window = rng.choice([5, 40, 2 * int(index.a_len[local]), 10_000])
        got = long_answer(index, local, toks, q_end, window, cfg.answer_ngram_size)
        monkeypatch.setenv("CONTAM_COMPILED", "off")
        want = long_answer(index, local, toks, q_end, window, cfg.answer_ngram_size)
        monkeypatch.delenv("CONTAM_COMPILED")
        assert got == want, trial
        hits += want[0] is not None
    assert hits > 200


def test_the_walk_leaves_nothing_on_the_index_for_the_workers(two_tasks, planted):
    """The scan pool hands its workers every attribute of the index beyond its fields (executor/pool_scan.py), so the
    kernels' views of the index's arrays must not be kept on it: they would travel pickled, tens of MB each."""
    from dataclasses import fields

    cfg, records, index = two_tasks
    scan_many(index, planted[:50], cfg)
    names = {f.name for f in fields(index)}
    extras = {k: v for k, v in index.__dict__.items() if k not in names}

    def arrays(v):
        if isinstance(v, np.ndarray):
            yield v
        elif isinstance(v, (tuple, list)):
            for x in v:
                yield from arrays(x)
        elif isinstance(v, dict):
            for x in v.values():
                yield from arrays(x)

    own = [index.q_docs, index.q_offsets, index.q_idf, index.hot, index.q_idf_sum]
    for k, v in extras.items():
        for a in arrays(v):
            assert not any(np.shares_memory(a, o) for o in own), k


def test_span_reader_equals_span_text():
    """A match row's text spans come from one decoded copy of the document or of a window of it
    (Tokenizer.span_reader); each equals span_text, which decodes the span's own tokens: spans that cut a
    character, empty and clipped ones, spans inside, across and outside the window."""
    from contam_assets.detector.text import clean_words, join_words
    from contam_assets.detector.tokenize import get_tokenizer

    cfg = preset("default")
    rng = random.Random(2)
    texts = [HostText(i).document(1) for i in range(10)] + [
        "naïve café — 東京タワーは高い 🎉🎉 ñandú straße ﬁne α β γ " * 4, "😀" * 30 + " end", "x" * 600]
    for name in (cfg.tokenizer, "word", "bytes"):
        tok = get_tokenizer(name)
        for t in texts:
            cleaned = join_words(clean_words(t, cfg.clean_options))
            ids = tok.encode(cleaned)
            # the whole document prepared, or only a window of it (the spans of a row and their context): a span
            # inside, across or outside the window reads the same
            for lo, hi in [(0, None)] + [sorted((rng.randint(-40, len(ids) + 40), rng.randint(-40, len(ids) + 40)))
                                          for _ in range(4)]:
                read = tok.span_reader(cleaned, ids, lo, hi)
                for _ in range(60):
                    a, b = rng.randint(-5, len(ids) + 5), rng.randint(-5, len(ids) + 5)
                    assert read(a, b) == tok.span_text(cleaned, ids, a, b), (name, lo, hi, a, b)


def test_the_walks_views_go_with_their_index():
    """walk_kernel keeps its views of an index beside it; when the index is dropped they go too."""
    import gc

    index, keys = random_document(random.Random(1))
    walk_kernel.clusters(index, keys, preset("default"), 0.0)
    assert id(index) in walk_kernel._ARRAYS
    gone = id(index)
    del index
    gc.collect()
    assert gone not in walk_kernel._ARRAYS


def test_a_damaged_stream_is_stale_not_an_error():
    """Cached ids the vocabulary does not hold are not what the text encodes to: the check says so, no exception
    (the incremental scan then rescans the shard from its text)."""
    from contam_assets.detector.tokenize import get_tokenizer

    tok = get_tokenizer(preset("default").tokenizer)
    ids = tok.encode("janet s ducks lay 16 eggs")
    assert tok.stands_for("janet s ducks lay 16 eggs", ids)
    assert not tok.stands_for("janet s ducks lay 17 eggs", ids)
    assert not tok.stands_for("janet s ducks lay 16 eggs", np.array([10**9, 5], dtype=np.uint64))
