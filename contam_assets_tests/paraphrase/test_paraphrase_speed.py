"""What the paraphrase stage does to be fast gives what the plain computation gives (docs/paraphrase.md, speed):
the tokenizer run once per distinct piece, the token vectors summed a chunk at a time, the windows' norms from the
sums at their bounds, a math item's numbers read from their own offsets, the multiple-choice gate's pairs
checked all at once, the numbers and the names after "def" read in passes that skip ahead, and a multiple-choice
item left out where its document lacks its words, each against a plain version on real host text and planted
cases."""

from __future__ import annotations

import random
import re

import numpy as np

from contam_assets.paraphrase import embed, quantities
from contam_assets.paraphrase.embed import PieceTokens, load_embedder
from contam_assets.paraphrase.gates import GATE_SPAN, MC_SPAN_MIN, NEED_SLACK, DocStems, stem_offsets, weight_span
from contam_assets.paraphrase.quantities import stems
from contam_assets.paraphrase.search import LOSSY, def_names, sentence_bounds, window_norms, windows
from contam_assets.paraphrase.verify import MC, MC_STEM_WEIGHT, ItemFacts, check, mc_may_hold, mc_word_bars
from contam_assets.quality.hosts import Hosts
from contam_assets_tests.paraphrase.test_paraphrase_gates import mc_gate

EDGES = ["", " ", "   ", "x", " a", "a ", "a  ", "  two  spaces ", "x\n\nY z", "tab\tsep  x", "\r\n a \r\n",
         "héllo wörld 日本語 🎉 b", " 🎉 x", "a\u2581b", "\u2581\u2581a", "a <s> b", "</s>x y", "x\u3000y z",
         "def f(a, b):\n    return a  +  b\n\n\n        # indented   comment   ", "end. Next one!  Third?"]


MC_STEM = "The term 'over-urbanization' means that:"
MC_GOLD = "in poorer countries, the rapidly developing cities drain resources from the countryside"
MC_CHOICES = [MC_GOLD, "cities grow faster than their housing", "too many people live in suburbs", "all of the above"]
MC_WEIGHTS = {"over-u": 8.9, "term": 4.1, "means": 4.0} | {w: 5.0 for w in
                                                        ("poorer", "countr", "rapidl", "develo", "cities", "drain", "resour")}


def _texts() -> list[str]:
    hosts = Hosts(3)
    out = [hosts.web.document() for _ in range(30)] + [hosts.clean_document()[1] for _ in range(30)]
    out += ["\n\n".join(hosts.code_block() for _ in range(2)) for _ in range(30)]
    return out + EDGES + [t[k:] for t in out[:5] for k in (1, 7)]  # texts cut anywhere


def _plain(tok, text: str) -> tuple[list, list]:
    enc = tok.encode(text, add_special_tokens=False)
    return list(enc.ids), [s for s, _ in enc.offsets]


def test_the_tokens_of_each_piece_kept_are_the_tokenizers_to_the_character(monkeypatch):
    emb = load_embedder()
    assert PieceTokens.fits(emb.tokenizer) and emb.pieces is not None
    texts = _texts()
    for limit in (PieceTokens.LIMIT, 40):  # with a small cache it starts again often: the same tokens
        monkeypatch.setattr(PieceTokens, "LIMIT", limit)
        pieces = PieceTokens(emb.tokenizer)
        for _ in range(2):  # new pieces, then pieces kept
            for text in texts:
                ids, starts = pieces.encode(text)
                assert (ids.tolist(), starts.tolist()) == _plain(emb.tokenizer, text), repr(text[:60])
        assert len(pieces.index) <= max(limit, 2000)


def test_a_tokenizer_of_another_form_is_run_whole():
    from tokenizers import Tokenizer, pre_tokenizers

    emb = load_embedder()
    other = Tokenizer.from_str(emb.tokenizer.to_str())
    other.pre_tokenizer = pre_tokenizers.Whitespace()  # pieces would no longer be what it tokenizes
    assert not PieceTokens.fits(other)
    plain = embed.StaticEmbedder("other", emb.table, other)
    assert plain.pieces is None
    text = "Two  words. And more"
    ids, starts = plain.encode(text)
    assert (ids.tolist(), starts.tolist()) == _plain(other, text)


def test_the_segments_summed_a_chunk_at_a_time_are_reduceats_to_the_bit(monkeypatch):
    emb = load_embedder()
    rng = np.random.default_rng(0)
    ids = rng.integers(0, emb.table.shape[0], 9000)
    # short segments, one longer than a chunk, and segments that end at a chunk's edge
    idx = np.unique(np.concatenate(([0], rng.integers(0, 9000, 700), np.arange(3000, 9000, 2048), [4000])))
    idx = idx[(idx < 3100) | (idx >= 6000)]
    want = np.add.reduceat(emb.table[ids], idx, axis=0)
    for chunk in (2048, 100, 1):
        monkeypatch.setattr(embed, "SEGMENT_CHUNK", chunk)
        assert np.array_equal(emb._segment_sums(ids, idx), want)


def test_a_windows_norm_from_the_sums_at_its_bounds_is_its_own():
    emb = load_embedder()
    hosts = Hosts(4)
    text = " ".join(hosts.web.document() for _ in range(40))
    bounds = sentence_bounds(text)
    sums, _ = emb.prefix_sums(text, bounds)
    i, j = windows(bounds)
    own = np.linalg.norm((sums[j] - sums[i]).astype(np.float64), axis=1)
    got = window_norms(sums, sums.astype(np.float64), i, j)
    assert np.allclose(got, own, rtol=1e-6, atol=0)
    # far into a long text the difference of the bounds' products loses digits: those windows are measured alone
    far = sums + np.float32(1e4) * sums[-1]
    big = window_norms(far, far.astype(np.float64), i, j)
    sq = np.einsum("bd,bd->b", far.astype(np.float64), far.astype(np.float64))
    lossy = sq[i] + sq[j] > LOSSY * big ** 2
    assert lossy.any()
    assert np.array_equal(big[lossy], np.linalg.norm((far[j] - far[i])[lossy].astype(np.float64), axis=1))


def _near_plain(gate, text: str) -> list[int]:
    """The multiple-choice gate of one document, item by item, as written in its docstring."""
    low = text.lower()
    pts = sorted((at, w) for w, ats in stem_offsets(low).items() if w in gate.word_id for at in ats)
    out = []
    for c, keys in sorted(gate.keys.items()):
        mine = [(at, w) for at, w in pts if w in keys]
        # a stretch of one to two steps that holds a rare key and the item's need
        ok = False
        for s in {at // gate.step for at, _ in mine}:
            for lo in (s - 1, s):
                have = {w for at, w in mine if lo <= at // gate.step <= lo + 1}
                if any(gate.weights[w] >= gate.rare for w in have) and \
                        sum(gate.weights[w] for w in have) >= gate.need[c] - NEED_SLACK:
                    ok = True
        if not ok or sum(gate.weights[w] for w in {w for _, w in mine} & gate.items[c].question_stems) < MC_STEM_WEIGHT:
            continue
        # the verifier's rarest words of the stem (verify.mc_word_bars): one of them in the document
        rarest = mc_word_bars(gate.items[c], gate.weights, gate.top)[0]
        if rarest.isdisjoint(w for _, w in pts) and all(w in gate.word_id for w in rarest):
            continue
        if weight_span(mine, gate.weights, gate.need[c] - NEED_SLACK)[0] <= max(GATE_SPAN * gate.qa_len[c], MC_SPAN_MIN):
            out.append(c)
    return out


def test_the_multiple_choice_gate_checks_its_pairs_at_once_as_one_by_one():
    gate, shared, rare = mc_gate()
    rng = random.Random(2)
    hosts = Hosts(5)
    texts = []
    for k in range(40):  # host text with the items' words planted here and there, close together or spread
        words = rng.sample(shared + rare, rng.randint(1, len(shared) + len(rare)))
        host = hosts.web.document()
        gap = " " if k % 2 else "\n" + hosts.web.document()[:300] + "\n"
        at = rng.randint(0, len(host))
        texts.append(host[:at] + " " + gap.join(words) + ". " + host[at:])
    got = gate.candidates(texts, DocStems.of([t.lower() for t in texts]), [[] for _ in texts])
    want = [_near_plain(gate, t) for t in texts]
    assert [r[0].tolist() for r in got] == want
    assert sum(bool(w) for w in want) >= 5 and sum(not w for w in want) >= 5  # both answers are met


def test_the_numbers_read_in_two_passes_are_the_one_patterns_matches():
    one = re.compile(quantities._NUMBER_RE)  # the pattern as written: digits or a number word between \b's
    texts = _texts() + ["one_two 3one twenty-five 1,200 and 3 / 4, a quarter of two-thirds; someone's tenth ",
                        "twenty\nfive sevenths 12345,678 1,2345 x2 half-dozen", "İstanbul: twenty-five İ one"]
    for text in texts:
        low = text.lower()
        if len(low) != len(text):
            continue  # read with re.I as before
        want = [(m.start(), m.end(), *m.groups()) for m in one.finditer(low)]
        assert [t[:5] for t in quantities._tokens(text, low)] == want, repr(text[:60])
    assert quantities.number_positions("twenty-five İ one and 3 / 4") == [(25, 0), (1, 14), (0.75, 22)]  # re.I


def test_the_string_literals_are_those_of_the_pattern_with_its_lookbehind_first():
    plain = re.compile(r"""(?<!["'\w])(["'])([^"'\n]{1,40})\1(?!["'])""")
    edge = "'a' 'b''c' x'y' \"q\" '' 'it's' \"a'b\" '\n' _'z' 'é' 'x'"
    found = 0
    for text in _texts() + [edge, "'" + edge, edge[1:]]:
        want = [(m.start(), "s:" + m.group(2).lower()) for m in plain.finditer(text)]
        assert quantities.string_positions(text) == want, repr(text[:60])
        found += len(want)
    assert found > 20


def test_the_def_names_are_those_after_a_def_of_its_own():
    plain = re.compile(r"\bdef\s+(?=([A-Za-z_]\w*))")
    for text in _texts() + ["undef x(): def  y(a) _def z() édef w() def\tv()", "def f(x): def g(y)"]:
        assert def_names(text) == plain.findall(text), repr(text[:60])


def test_a_multiple_choice_item_left_out_before_embedding_is_one_no_window_of_its_text_holds():
    item = ItemFacts.of("multiple-choice", MC_STEM, MC_GOLD, MC_CHOICES)
    assert item.kind == MC
    hosts = Hosts(6)
    windows = ["What does the term 'over-urbanization' signify?",  # its two rarest words: held
               "The term over-urbanization means that in poorer countries the cities drain resources.",
               "Over-urbanization is discussed below in detail.",  # one rare word: not held
               "Cities drain the resources of poorer countries."]
    held = 0
    for window in windows:
        for k in range(5):
            host = hosts.web.document()
            text = host[:200 * k] + " " + window + " " + host[200 * k:]
            ev = check(item, window, 0.8, 0.65, MC_WEIGHTS, margin=0.3)
            held += ev is not None
            # the document's words hold every window's: an item the verifier holds in a window is never left out
            assert mc_may_hold(item, stems(text), MC_WEIGHTS) or ev is None
            assert mc_may_hold(item, stems(window), MC_WEIGHTS) or ev is None
    assert held >= 5
    # a document without the stem's words is left out
    assert not mc_may_hold(item, stems(hosts.web.document() + " cities drain poorer countries"), MC_WEIGHTS)
