"""The paraphrase gates read a batch of documents at once (docs/paraphrase.md, speed): planted cases with known
answers for what the batch must not change, and for the code gate's stretch, whose words are read in the
document's order."""

from __future__ import annotations

import numpy as np

from contam_assets.paraphrase.embed import load_embedder, normalize
from contam_assets.paraphrase.gates import DocStems, WordGate, stem_key, stem_offsets
from contam_assets.paraphrase.quantities import SOFT, number_positions
from contam_assets.paraphrase.search import SIM_SLACK, sentence_bounds, windows
from contam_assets.paraphrase.verify import CODE, ItemFacts
from contam_assets_tests.paraphrase.test_paraphrase_gates import _word, mc_gate

ODD = ["", "a", "ab", "a-", "'-x", "-'ab", "don't", "well-known's--", "x'-'y", "Ünïcode naïve café", "z9q q9z",
       "re-entry -- co-op 'quoted' words", "a\nb\nab\n\n--\n''", "İstanbul KELVIN\u212a sign", "\ud800lone surrogate",
       "A quick BROWN fox: jumps; over-the-lazy dog's back.", "colonization colonized colonizer", "abcdefghijklmnop"]


def test_the_batch_stems_are_those_of_each_document_alone(monkeypatch):
    import contam_assets.paraphrase.gates as gates

    lows = [t.lower() for t in ODD]
    got = DocStems.of(lows)
    for d, low in enumerate(lows):
        want = sorted((at, stem_key(w)) for w, ats in stem_offsets(low).items() for at in ats)
        mine = got.doc == d
        assert sorted(zip(got.at[mine].tolist(), got.key[mine].tolist())) == want, low
    monkeypatch.setattr(gates, "STEM_CHUNK", 20)  # a batch read a few documents at a time: the same
    small = DocStems.of(lows)
    assert all(np.array_equal(x, y) for x, y in ((got.doc, small.doc), (got.at, small.at), (got.key, small.key)))
    assert stem_key("colonization"[:6]) == stem_key("coloni") != stem_key("colon")


def _code_items() -> list[ItemFacts]:
    """40 renamed-code items, each with 20 words of its own and three values of its own (17 + k, 'zq<k>', 53 + k):
    24 keys of weight log 40 (the string's word is a key too), of which a stretch must hold a fifth's weight."""
    out = []
    for k in range(40):
        words = " ".join(_word(100 + 20 * k + j) for j in range(20))
        q = (f'def task(x):\n    """{words}\n    >>> task({17 + k})\n    \'zq{_word(k)}\'\n    >>> task({53 + k})\n    """\n')
        out.append(ItemFacts.of("code", q, "    return x\n", None, renamed=True))
    return out


def _through(gate: WordGate, texts: list[str]) -> list[tuple[list, list, list]]:
    occs = [[(v, at) for v, at in number_positions(t) if v not in SOFT] for t in texts]
    got = gate.candidates(texts, DocStems.of([t.lower() for t in texts]), occs)
    return [tuple(x.tolist() for x in r) for r in got]


def test_the_code_gate_reads_words_and_values_in_the_documents_order():
    items = _code_items()
    assert {it.kind for it in items} == {CODE} and all(len(it.option_stems) == 3 for it in items)
    vec = np.zeros((len(items), 4), dtype=np.float32)
    gate = WordGate(items, CODE, vec, vec, np.full(len(items), 200))  # words within 100 characters (GATE_SPAN)
    values = "task(17) gives 'zq" + _word(0) + "' and task(53) too.\n"
    word = _word(100)
    filler = "plain filler text " * 48  # 864 characters, no key of any item
    # the item's three values (four keys), then one of its words 900 characters on: the five keys weigh enough
    # together (18.4 of 17.7) and lie in one stretch of the sparse step, but not within 100 characters
    spread = values + filler + word + "\n"
    near = values + word + "\n" + filler
    assert _through(gate, [spread]) == [([], [], [])]
    (items_, lo, hi), = _through(gate, [near])
    assert items_ == [0] and lo == [0] and hi[0] >= near.index(word) + len(word)
    # a batch gives each document what it gets alone, whatever stands beside it
    batch = [near, spread, filler, near[::-1], spread + near]
    assert _through(gate, batch) == [_through(gate, [t])[0] for t in batch]


def test_a_multiple_choice_batch_gives_each_document_what_it_gets_alone():
    gate, shared, rare = mc_gate()
    texts = ["Notes. " + " ".join(shared + rare[:1]) + ". More notes.", "Notes. " + " ".join(shared) + ".",
             ("\n\n" + "filler text " * 40).join(shared + rare[:1]), "", "Notes. " + " ".join(rare + shared) + "."]
    alone = [_through(gate, [t])[0][0] for t in texts]
    assert alone == [[0], [], [], [], [0]]
    assert [r[0] for r in _through(gate, texts)] == alone
    # the sparse step's stretches of one document do not run into the next one's
    assert [r[0] for r in _through(gate, [texts[1], "Notes. " + rare[0]])] == [[], []]


def test_the_similarity_from_the_sums_at_the_bounds_is_the_verifiers_within_the_slack():
    emb = load_embedder()
    text = ("Tom has 12 apples and buys 7 more. Later he eats 3 of them! How many apples are left?\n"
            "def add(a, b):\n    return a + b\n" * 3 + "Paris is the capital of France. " * 20)
    bounds = sentence_bounds(text)
    sums, tokens = emb.prefix_sums(text, bounds)
    i, j = windows(bounds)
    keep = tokens[j] > tokens[i]
    i, j = i[keep], j[keep]
    items = emb.embed(["How many apples are left after eating some?", "def add(x, y): return x + y", "capital city"])
    raw = sums[j] - sums[i]
    exact = np.einsum("wd,cd->wc", normalize(raw / (tokens[j] - tokens[i])[:, None].astype(np.float32)), items)
    dots = np.einsum("bd,cd->bc", sums, items, dtype=np.float64)
    near = (dots[j] - dots[i]) / np.sqrt(np.einsum("wd,wd->w", raw, raw, dtype=np.float64))[:, None]
    assert exact.max() > 0.5 and np.abs(near - exact).max() < SIM_SLACK / 10


def test_the_indexed_span_of_a_math_items_numbers_is_min_span():
    import random

    from contam_assets.paraphrase.gates import NumberIndex, min_span

    rng = random.Random(1)
    pool = [2.0, 3.0, 5.0, 7.0, 11.0, 13.0, 17.0]
    finite = 0
    for _ in range(3000):
        seq = [(rng.choice(pool), 10 * i) for i in range(rng.randint(17, 40))]
        values = set(rng.sample(pool, rng.randint(1, 3)))
        allowed = frozenset(values | set(rng.sample(pool, rng.randint(0, 3))))
        want = min_span(seq, values, allowed)
        finite += want[0] < float("inf")
        assert NumberIndex(seq).span(frozenset(values), allowed) == want, (seq, values, allowed)
    assert 300 < finite < 2700  # both answers are met often
