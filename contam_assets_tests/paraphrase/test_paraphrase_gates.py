"""The paraphrase part's gates choose which documents are embedded at all (docs/paraphrase.md): planted cases
with known answers for the pieces that make them selective."""

from __future__ import annotations

from contam_assets.paraphrase.gates import min_span, weight_span
from contam_assets.paraphrase.quantities import number_positions, signatures

PROBLEM = "Tom has 12 apples and buys 7 more. Later he eats 3 of them. How many apples are left?"


def _seq(text: str) -> list[tuple[float, int]]:
    return [(round(v, 4), at) for v, at in number_positions(text) if v not in (0.0, 1.0)]


def test_a_math_items_numbers_must_lie_together_with_no_number_of_another_problem():
    values, allowed = {12.0, 7.0, 3.0}, frozenset({12.0, 7.0, 3.0, 19.0, 16.0})
    span, a, b = min_span(_seq(PROBLEM), values, allowed)
    assert (a, b) == (PROBLEM.index("12"), PROBLEM.index("3 of"))
    # the solution's numbers may stand beside the question's (a question with its worked answer)
    solved = PROBLEM + " He had 12 + 7 = 19, and 19 - 3 = 16 are left."
    assert min_span(_seq(solved), values, allowed)[0] <= span
    # a number neither the question nor the solution holds, between them: no window could be the problem
    foreign = "Tom has 12 apples and buys 7 more, for 45 dollars. Later he eats 3 of them. How many are left?"
    assert min_span(_seq(foreign), values, allowed)[0] == float("inf")
    assert min_span(_seq(foreign), values)[0] < float("inf")  # without ``allowed``: the numbers alone
    # the same problem again after the foreign number is found there
    again = foreign + "\n\n" + PROBLEM
    assert min_span(_seq(again), values, allowed)[1] == len(foreign) + 2 + PROBLEM.index("12")


def test_the_shortest_stretch_whose_distinct_words_reach_a_weight():
    weights = {"ecolog": 5.0, "urban": 4.0, "coloni": 6.0, "market": 2.0}
    pts = [(0, "urban"), (40, "market"), (300, "ecolog"), (320, "urban"), (350, "coloni"), (900, "coloni")]
    assert weight_span(pts, weights, 15.0) == (50, 300, 350)  # ecolog + urban + coloni, not the first urban
    assert weight_span(pts, weights, 6.0) == (0, 350, 350)  # one word that weighs enough alone
    assert weight_span(pts, weights, 17.1)[0] == float("inf")  # all four together weigh 17
    # a word counted once however often it occurs
    assert weight_span([(0, "urban"), (5, "urban"), (9, "urban")], weights, 8.0)[0] == float("inf")


def test_every_signature_of_a_text():
    code = "def add(a, b):\n    return a + b\n\nclass C:\n    def get(self, key, *args, **kw):\n        return add(1, 2)\n"
    assert signatures(code) == {("add", ("a", "b")), ("get", ("self", "key", "args", "kw"))}
    assert signatures("add(1, 2) + get(x)") == set()  # calls are no signatures


def _word(k: int) -> str:
    """A made-up content word of six letters, distinct for each k."""
    return "".join("bcdfghjklmnpqrstvwxz"[(k // 20 ** p) % 20] for p in range(5)) + "o"


def mc_gate():
    """A multiple-choice word gate over 40 items: (the gate, 5 words items 0 and 1 share, 4 words of item 0 alone)."""
    import numpy as np

    from contam_assets.paraphrase.gates import WordGate
    from contam_assets.paraphrase.verify import MC, ItemFacts

    shared = [_word(k) for k in range(5)]  # each held by items 0 and 1: keys, not rare (weight log 20 = 3.0)
    rare = [_word(k) for k in range(5, 9)]  # held by item 0 alone (weight log 40 = 3.7)
    questions = [" ".join(shared + rare), " ".join(shared + [_word(9)])]
    questions += [" ".join(_word(10 + 3 * i + j) for j in range(3)) for i in range(38)]
    items = [ItemFacts.of("multiple-choice", q, "", ["none"]) for q in questions]
    assert {it.kind for it in items} == {MC}
    vec = np.zeros((len(items), 4), dtype=np.float32)
    return WordGate(items, MC, vec, vec, np.full(len(items), 400)), shared, rare


def test_a_multiple_choice_item_passes_the_word_gate_only_with_one_of_its_rare_words():
    from contam_assets.paraphrase.gates import DocStems

    gate, shared, rare = mc_gate()

    def through(text: str) -> list[int]:
        return gate.candidates([text], DocStems.of([text.lower()]), [[]])[0][0].tolist()

    # the shared words weigh 15 together, over what item 0 needs (its two rarest words' 7.4, at least 8), but none is rare
    assert through("Notes. " + " ".join(shared) + ". More notes.") == []
    assert through("Notes. " + " ".join(shared + rare[:1]) + ". More notes.") == [0]
    # the same words spread over paragraphs: not a restatement of the item
    assert through(("\n\n" + "filler text " * 40).join(shared + rare[:1])) == []


def test_a_multiple_choice_item_passes_the_word_gate_only_where_its_document_holds_one_of_its_rarest_words():
    from contam_assets.paraphrase.gates import DocStems
    from contam_assets.paraphrase.verify import mc_may_hold, mc_word_bars

    gate, shared, rare = mc_gate()
    rarest = mc_word_bars(gate.items[0], gate.weights, gate.top)[0]
    assert len(rarest) == 2 and rarest < set(rare)
    other = sorted(set(rare) - rarest)  # rare too, and the item's, but not what the verifier asks every window for
    for words, want in ((shared + other, []), (shared + other[:1] + sorted(rarest)[:1], [0])):
        text = "Notes. " + " ".join(words) + ". More notes."
        assert gate.candidates([text], DocStems.of([text.lower()]), [[]])[0][0].tolist() == want
        assert mc_may_hold(gate.items[0], set(words), gate.weights) == bool(want)  # what the search would ask anyway


def test_a_math_item_needs_a_run_holding_each_of_its_numbers_as_often_as_its_question():
    from contam_assets.paraphrase.gates import NumberIndex
    from contam_assets.paraphrase.search import exact_run
    from contam_assets.paraphrase.verify import ItemFacts, check

    item = ItemFacts.of("qa", PROBLEM, "12 + 7 = 19 and 19 - 3 = 16.\n#### 16")
    allowed = frozenset(set(item.numbers) | set(item.answer_numbers))

    def both(text: str) -> tuple[bool, bool]:
        gate = exact_run(NumberIndex(_seq(text)), item.numbers, allowed, 2 * len(PROBLEM))
        return gate, check(item, text, 0.95, 0.65) is not None

    assert both(PROBLEM) == (True, True)
    # a number of the question twice (code's small numbers): the verifier refuses every window, and so does the gate
    assert both(PROBLEM.replace("7 more", "7 more in 7 bags")) == (False, False)
    # ... unless another run holds it once: the gate passes
    assert both("x = 3 + 3.\n" + PROBLEM)[0]
    assert both("Tom has 12 apples and buys 7 more. How many apples are there?")[0] is False  # 3 is missing
    # a number neither the question nor the solution holds ends a run
    assert not both("Tom has 12 apples and buys 7 more, 45 of them red. Later he eats 3. How many are left?")[0]
