"""The crosslingual stage's windows and their anchors (paraphrase/crosslingual_windows.py): the anchors read once
per block are each window's read alone, and the pairs formed for many units at once are those of a loop over
each unit's windows."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from contam_assets.paraphrase.crosslingual_anchors import anchor_places, anchors
from contam_assets.paraphrase.crosslingual_windows import Sentences, group_pairs, sentences, windows

CROSS = Path("/work/shared/data/crosslingual")
pytestmark = pytest.mark.skipif(not (CROSS / "mgsm_es.tsv").is_file(), reason="shared data not present")
# what a sentence end can cut: numbers with dots and spaces, a stop inside a word, identifiers, names with accents
HOSTILE = ("El precio subió 3.5 veces. Son 80.000 euros... ¿Cuántos? Fin 3.\n5 más. Versión 1.2.3 de la_función "
           "readFile.Luego Normandía y Normandy: 1 000 000 personas, 0.5 y 007! ÉRIC vio a Éric.Ana 12.\n\n34 fin")


def real_blocks() -> list[str]:
    out = [HOSTILE]
    for name in ("mgsm_es.tsv", "mgsm_fr.tsv"):
        rows = [line.split("\t")[0] for line in (CROSS / name).read_text(encoding="utf-8").splitlines()]
        out += [" ".join(rows[k:k + 5]) for k in range(0, 60, 5)]
    paras = [p["context"] for a in json.loads((CROSS / "xquad.es.json").read_text(encoding="utf-8"))["data"]
             for p in a["paragraphs"]]
    return out + paras[:12]


def runs(spans):
    return [(spans[i][0], spans[j][1]) for i in range(len(spans)) for j in range(i, len(spans))]


def test_a_dot_between_digits_ends_no_sentence():
    got = [HOSTILE[s:e] for s, e in sentences(HOSTILE)]
    assert got[:5] == ["El precio subió 3.5 veces.", " Son 80.000 euros...", " ¿Cuántos?", " Fin 3.", "5 más."]
    assert " Versión 1.2.3 de la_función readFile." in got and "Luego Normandía y Normandy: 1 000 000 personas, 0.5 y 007!" in got


def test_the_block_anchors_of_every_window_are_those_of_its_text_read_alone():
    for block in real_blocks():
        spans = sentences(block)
        parts = Sentences(block, spans, anchor_places(block), anchors)
        assert not parts.alone
        for w in runs(spans):
            assert parts[w] == anchors(block[w[0]:w[1]]), (block[w[0]:w[1]], parts[w])


def test_an_anchor_across_a_sentence_end_has_every_window_read_from_its_text():
    block = "Uno dos tres. Cuatro cinco seis."
    spans = sentences(block)
    parts = Sentences(block, spans, [(8, 16, "#99")], anchors)  # a place no sentence holds whole
    assert parts.alone and all(parts[w] == anchors(block[w[0]:w[1]]) for w in runs(spans))


def test_pairs_are_each_units_windows_holding_one_of_its_keys_in_the_loops_order():
    rng = random.Random(7)
    for block in real_blocks():
        spans = sentences(block)
        parts = Sentences(block, spans, anchor_places(block), anchors)
        have = sorted(anchors(block)) + ["#123456789", "zzzzz"]
        n = rng.randint(1, 40)
        lengths = np.array([rng.randint(20, max(21, len(block))) for _ in range(n)], dtype=np.int64)
        keys = [set(rng.sample(have, rng.randint(0, min(4, len(have))))) for _ in range(n)]
        want: dict[tuple[int, int], list[int]] = {}
        for u in range(n):
            for w in windows(spans, int(lengths[u])):
                if keys[u] & anchors(block[w[0]:w[1]]):
                    want.setdefault(w, []).append(u)
        first, last, pk, pu = parts.pairs(lengths, keys)
        got_windows = [(spans[i][0], spans[j][1]) for i, j in zip(first.tolist(), last.tolist())]
        assert got_windows == list(want)
        assert [(got_windows[k], u) for k, u in zip(pk.tolist(), pu.tolist())] == [(w, u) for w, us in want.items() for u in us]


def test_pairs_of_many_blocks_at_once_are_each_blocks_numbered_across_them():
    rng = random.Random(11)
    blocks, lengths, keys, want = real_blocks()[:9], [], [], [[], [], [], []]
    sent_at = unit_at = 0
    parts = []
    for block in blocks:
        spans = sentences(block)
        part = Sentences(block, spans, anchor_places(block), anchors)
        have = sorted(anchors(block))
        n = rng.randint(0, 12)
        lengths.append(np.array([rng.randint(20, len(block)) for _ in range(n)], dtype=np.int64))
        keys.append([set(rng.sample(have, rng.randint(0, min(3, len(have))))) for _ in range(n)])
        first, last, pk, pu = part.pairs(lengths[-1], keys[-1])
        windows_before = len(want[0])
        for got, add in zip(want, (first + sent_at, last + sent_at, pk + windows_before, pu + unit_at)):
            got.extend(add.tolist())
        parts.append(part)
        sent_at, unit_at = sent_at + len(spans), unit_at + n
    got = group_pairs(parts, lengths, keys)
    assert [g.tolist() for g in got] == want and len(want[2]) > 20
