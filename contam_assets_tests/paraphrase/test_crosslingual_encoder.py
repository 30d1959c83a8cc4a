"""The crosslingual encoder's word-cached tokenizer and its first look (paraphrase/crosslingual_encoder.py): the same
pieces and vectors as the package, and a first look that lets the held translations through and nothing else
changes what is held."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from contam_assets.detector.config import PRESETS
from contam_assets.paraphrase import crosslingual
from contam_assets.paraphrase.crosslingual import CrosslingualIndex, encoder
from contam_assets.paraphrase.crosslingual_encoder import BOS, EOS
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import load_registry

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("/work/shared/data")
CROSS = DATA / "crosslingual"
pytestmark = pytest.mark.skipif(not (CROSS / "mgsm_es.tsv").is_file(), reason="shared data not present")


def lines(name: str, n: int) -> list[str]:
    return [line.split("\t")[0] for line in (CROSS / name).read_text(encoding="utf-8").splitlines()[:n]]


def gsm(n: int) -> list[str]:
    return [json.loads(line)["question"] for line in (DATA / "gsm8k_test.jsonl").read_text().splitlines()[:n]]


def test_word_by_word_pieces_and_vectors_are_the_packages():
    enc = encoder()
    texts = lines("mgsm_es.tsv", 20) + lines("mgsm_fr.tsv", 20) + gsm(10) + [
        "Der Preis   stieg\tum 80.000 Euro.\u00a0Danach fiel er.", "東京は日本の首都です。人口は約1400万人です。", ""]
    for t in texts:
        assert [BOS, *enc.tokens(t), EOS] == enc.sp.encode(t) or not t.strip()
    ours, theirs = enc.embed(texts[:12]), np.asarray(enc.use.encode(texts[:12]), dtype=np.float32)
    assert np.allclose(np.einsum("ij,ij->i", ours, theirs), 1.0, atol=1e-5)


def test_a_pieces_static_row_is_the_encoder_on_that_piece_alone():
    enc = encoder()
    ids = np.array([enc.tokens("huevos")[-1], enc.tokens("Janet")[-1], 5000])
    look = enc.first_look(enc.static(ids), np.ones(len(ids)))
    full = np.empty((len(ids), 512), dtype=np.float32)
    enc.model._encode_batch([[int(i)] for i in ids], len(ids), full)  # one piece, no marks: its neighbours zero
    assert np.allclose(np.einsum("ij,ij->i", look, full), 1.0, atol=1e-4)


def test_the_first_look_keeps_a_translation_near_its_source_and_apart_from_others():
    enc = encoder()
    es, fr, en = lines("mgsm_es.tsv", 40), lines("mgsm_fr.tsv", 40), gsm(40)
    e = enc.first_look_texts(en)
    bar = crosslingual.FIRST_LOOK["question"][0]
    for foreign in (es, fr):
        sims = enc.first_look_texts(foreign) @ e.T
        assert (np.diag(sims) >= bar).mean() >= 0.95  # a problem and its translation
        off = sims[~np.eye(len(en), dtype=bool)]
        assert (off >= bar).mean() <= 0.25 and np.median(off) < bar - 0.1  # other problems mostly fall apart


@pytest.fixture(scope="module")
def index():
    records, _ = build_reference_set(load_registry(ROOT / "data" / "tasks", ["gsm8k"]), DATA, PRESETS["default"])
    return records.filter((pl.col("split") == "test") & (pl.col("instance_index") < 300))


def test_the_looks_change_no_held_pair_and_spare_the_encoder(index, monkeypatch):
    # translated problems inside and outside the reference (items 0-299 of the test split), and foreign text that is
    # no item: the same hits with and without the sum look, the first look and its best windows per unit, and fewer
    # windows given a first look and embedded with them
    docs = ["\n\n".join(lines("mgsm_es.tsv", 250)[k:k + 2]) for k in range(0, 24, 2)]
    docs += ["\n\n".join(lines("mgsm_fr.tsv", 250)[k:k + 2]) for k in range(200, 250, 5)]

    def run(sum_look, first_look, top):
        monkeypatch.setattr(crosslingual, "SUM_LOOK", sum_look)
        monkeypatch.setattr(crosslingual, "FIRST_LOOK", first_look)
        monkeypatch.setattr(crosslingual, "FIRST_LOOK_TOP", top)
        ix = CrosslingualIndex(index)
        hits = [sorted((h.unit, h.start, h.end, round(h.similarity, 4)) for h in ix.search(d)) for d in docs]
        return hits, ix.stats

    looks, stats = run(crosslingual.SUM_LOOK, crosslingual.FIRST_LOOK, crosslingual.FIRST_LOOK_TOP)
    without, plain = run({k: -1.0 for k in crosslingual.SUM_LOOK}, {k: (-1.0, -1.0) for k in crosslingual.FIRST_LOOK},
                         10**6)
    assert looks == without and sum(map(len, looks)) >= 12
    assert stats["first_look_pairs"] == plain["first_look_pairs"] and stats["windows"] < plain["windows"] / 2
    # the first look's head on fewer windows, though these documents are nearly all translated items
    assert stats["sum_look_windows"] < 0.7 * plain["sum_look_windows"]


def test_the_sum_look_is_the_head_input_of_the_summed_rows():
    enc = encoder()
    texts = lines("mgsm_es.tsv", 3) + gsm(3)
    sums, counts = enc.text_sums(texts)
    ids = [[BOS, *enc.tokens(t), EOS] for t in texts]
    for k, t in enumerate(ids):  # the counted sums are the rows summed one by one
        assert counts[k] == len(t) and np.allclose(sums[k], enc.static(np.array(t)).astype(np.float32).sum(0), atol=1e-3)
    v = enc.sum_look(sums, counts)
    want = sums + counts[:, None] * enc.model.cnn_b
    assert np.allclose(v, want / np.linalg.norm(want, axis=1, keepdims=True), atol=1e-6)


def test_windows_from_one_covering_pass_are_the_encoders_vectors_of_their_text():
    # overlapping windows of real translated problems (one pass over what they cover, their edges apart), a window too
    # short for that, one across a sentence end inside a word (passed whole), windows of a second block
    enc = encoder()
    first = " ".join(lines("mgsm_es.tsv", 12))
    second = "El precio subió 3.5 veces.Luego bajó. " + " ".join(lines("mgsm_fr.tsv", 4))
    blocks = []
    for text in (first, second):
        spans = crosslingual.sentences(text)
        toks = [enc.tokens(text[s:e]) for s, e in spans]
        runs = [(i, min(len(spans), i + k)) for i in range(len(spans)) for k in (1, 3, 6)]
        wins = list(dict.fromkeys((spans[i][0], spans[j - 1][1]) for i, j in runs))
        blocks.append((text, spans, toks, wins))
    # a dot between digits ends no sentence; one between letters does, inside the word "veces.Luego"
    assert crosslingual.sentences(second)[0][1] == second.index("veces.") + 6
    got = enc.window_vectors(blocks)
    for (text, spans, _, wins), vectors in zip(blocks, got):
        assert list(vectors) == wins
        want = enc.embed([text[s:e] for s, e in wins])
        assert np.allclose(np.einsum("ij,ij->i", np.stack(list(vectors.values())), want), 1.0, atol=1e-5)
    runs = [(0, 1), (0, 4), (1, 5), (2, 9)]
    toks = blocks[0][2]
    lengths = [sum(map(len, toks[i:j])) for i, j in runs]
    assert min(lengths) < 16 <= max(lengths) - 2  # a run passed whole and runs built from the covering pass
    direct = enc.embed_ids([[p for t in toks[i:j] for p in t] for i, j in runs])
    assert np.allclose(np.einsum("ij,ij->i", enc.run_vectors(toks, runs), direct), 1.0, atol=1e-5)


def test_a_window_text_met_again_is_not_passed_again_and_keeps_its_vector():
    # boilerplate repeated across documents (a translation credit under every manual page) is embedded once a process
    enc = encoder()
    enc._windows.clear()
    text = " ".join(lines("mgsm_es.tsv", 6))
    spans = crosslingual.sentences(text)
    toks = [enc.tokens(text[s:e]) for s, e in spans]
    wins = [(spans[0][0], spans[2][1]), (spans[1][0], spans[5][1])]
    elsewhere = "Otra cosa. " + text  # the same windows in a second document, at other places
    moved = [(s + 11, e + 11) for s, e in wins]
    other = crosslingual.sentences(elsewhere)
    first = enc.window_vectors([(text, spans, toks, wins), (elsewhere, other, [enc.tokens(elsewhere[s:e]) for s, e in other], moved)])
    passed = dict(enc.counts)
    again = enc.window_vectors([(elsewhere, other, [enc.tokens(elsewhere[s:e]) for s, e in other], moved)])
    assert enc.counts == passed  # nothing passed through the encoder the second time
    for w, m in zip(wins, moved):
        assert np.array_equal(first[0][w], first[1][m]) and np.array_equal(first[0][w], again[0][m])
    want = enc.embed([text[s:e] for s, e in wins])
    assert np.allclose(np.einsum("ij,ij->i", np.stack([first[0][w] for w in wins]), want), 1.0, atol=1e-5)
    assert passed["window_pieces"] > 0
