"""A rewording or a look-alike?  Fresh problems written in a benchmark's style, and copies with
their numbers changed, sit as close in embedding space as a rewording does; what tells them
apart is what a rewording must keep.

- a math item (an answer with ``#### N``, at least two numbers that are data): every number of
  the question, as often, and no new one; numbers of the worked solution may join only where
  the window holds the final answer too (a question with its solution); an item with only two
  distinct numbers needs ``FEW_NUMBERS_MARGIN`` more similarity (two numbers meet by chance); a window that does not
  hold the answer must end by asking something where the item does (a question mark, "how",
  "find", ...): a problem cut before a step that was added to it is not the problem;
- a code item: what it does, read from its examples (``quantities.examples``: a doctest call over its
  output, or ``f(x) == y`` on one line): a call of the item's that the window shows must give the item's output
  (a task whose behaviour changed gives another for the same call), the window must not stop at such a call
  (what it gives would be left out), and a window whose examples are none of the item's, or that shows one of
  its own where one of the item's is missing, is another task; then
  the same function name and parameter names (``def f(a, b)``), and every number of
  its prompt (the examples of a docstring: a ``def fib(n)`` in other code is not HumanEval's); or
  (paraphrase_kinds ``code``), renamed and rewritten, what its behaviour is made of (not every number of its
  prompt: a verbose rewording spreads them over more than a window), ``CODE_LITERALS``
  of the string literals and numbers of its examples (it needs ``CODE_MIN_LITERALS``; two of those
  found must be uncommon among the tasks) and few values of its own (``CODE_NEW_LITERALS`` of the
  prompt's, outside the prompt's and the solution's: a harder variant adds examples), ``CODE_COVER`` of
  the weight of its words and literals, and
  a similarity of ``CODE_SIMILARITY`` (code reads alike to a static embedder: no margin); the same name
  with other parameters is another version of the task;
- a multiple-choice item (paraphrase_kinds ``mc``; else it is an "other" item), its stem with or without
  its options: every number of the stem; a
  similarity of ``MC_SIMILARITY``, or down to ``MC_LEXICAL_SLACK`` under the part's bar where the window holds
  ``MC_LEXICAL_COVER`` of the weight of the stem's own less common words (a static embedder puts a synonym no
  closer than an unrelated word: a rewording that keeps the stem's rare words reads farther off); a margin of
  ``MC_MARGIN`` over every other multiple-choice item of
  the reference set (a same-subject question sits close to many items, a rewording clearly closer to one);
  one of the stem's ``MC_RAREST`` rarest less common content words in the window (what the item is about:
  a rewording keeps it and changes the rest); at least ``MC_COVER`` of the weight of the less common content
  words of the stem and its gold answer found in the window, or ``MC_STEM_COVER`` of the stem's own (a word
  weighs the log of the items over those holding it; a template's words, held by many items, do not count),
  ``MC_STEM_WEIGHT`` of them from the stem itself and before any option label (a window of options says
  nothing of a stem), at least ``MC_WEIGHT`` in all (options included), or, less, what the stem's
  ``MC_RARE_KEYS`` rarest words weigh (not under ``MC_WEIGHT_MIN``: a short stem has little to give), and at
  least ``MC_PRECISION`` of the window's own content-word weight explained by the item (stem and options): a
  window about something else is not the item.  A stem whose own words weigh under ``MC_SHORT_STEM`` needs
  its gold answer in the window.  A stem
  made of parts other items share (``quantities.stem_parts``: "Scenario 1 | ... Scenario 2 | ...", or a passage
  or instruction followed by the question on its last line) needs ``MC_PART_COVER`` of each part's weight: the
  part that is its own (the other scenario, the question asked of the passage) must be there.
  A rewording keeps what the item is about (its rare words, often the gold answer's: a stem made a
  question restates what it asks) and changes its wording; identifiers and numbers are not relied on;
- any other item: every number of the question, at least half of its names, and a higher
  similarity (``other_similarity``), since text alone is weaker evidence.

``check`` returns the evidence (what matched) or None.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from contam_assets.paraphrase.quantities import (
    asks,
    before_options,
    example_text,
    examples,
    examples_kept,
    final_answer,
    hard,
    literals,
    names,
    numbers,
    signature,
    stem_parts,
    stems,
)

MATH, CODE, MC, OTHER = "math", "code", "mc", "other"
MC_SIMILARITY, MC_MARGIN = 0.67, 0.15
MC_PART_COVER = 0.3  # the weight of each part of a stem (quantities.stem_parts) the window must hold
MC_COVER, MC_PRECISION, MC_WEIGHT = 0.2, 0.35, 12.0
MC_KEY_WEIGHT = 3.0  # a word held by more than e**-3 (5 %) of the items weighs less: a template's, not the item's
MC_STEM_WEIGHT = 6.0  # the weight of the question's own less common words a window must hold
MC_RARE_KEYS, MC_WEIGHT_MIN = 2, 8.0  # or, less than MC_WEIGHT, what the stem's 2 rarest keys weigh (not under this)
MC_RAREST = 2  # the window holds one of the stem's this many rarest keys: what the item is about
MC_STEM_COVER = 0.35  # or, less than MC_COVER of the item's, this share of its stem's own keys' weight
MC_SHORT_STEM = 9.0  # a stem whose own less common words weigh less than this needs its gold answer in the window
MC_LEXICAL_SLACK = 0.05  # a window this far under the part's bar (paraphrase_min_similarity) is a rewording ...
MC_LEXICAL_COVER = 0.5  # ... where it holds this share of the weight of the stem's own less common words
MC_LEXICAL_FLOOR = 0.6  # ... and never under this, whatever the part's bar (a lowered knob does not lower it further)
CODE_SIMILARITY, CODE_COVER, CODE_LITERALS, CODE_MIN_LITERALS = 0.7, 0.3, 0.8, 3
CODE_NEW_LITERALS = 0.1  # values in the window that neither the prompt nor the solution holds, as a share of the prompt's
OTHER_SIMILARITY = 0.85  # the bar for items with neither numbers nor a signature to check
FEW_NUMBERS, FEW_NUMBERS_MARGIN = 2, 0.1  # a math item with this few distinct numbers needs this much more similarity


@dataclass
class ItemFacts:
    kind: str
    numbers: Counter  # hard numbers of the question
    answer_numbers: frozenset  # hard numbers of the answer (worked solution; code: the solution's literals)
    final: float | None
    names: frozenset
    signature: tuple | None
    asks: bool = False
    stems: frozenset = frozenset()  # content words of the question and its gold answer (code: and literals)
    option_stems: frozenset = frozenset()  # content words of every option (code: the prompt's literals)
    gold: str = ""
    question_stems: frozenset = frozenset()  # content words of the question alone (multiple choice)
    renamed: bool = False  # a code item: also looked for under other names (paraphrase_kinds "code")
    examples: tuple = ()  # a code item: its examples, (arguments, output) (quantities.examples)
    parts: tuple = ()  # a multiple-choice stem's parts that tell it from items sharing the rest (quantities.stem_parts)

    @classmethod
    def of(cls, kind: str, question: str, answer: str | None, choices: list | None = None,
           renamed: bool = False) -> "ItemFacts":
        """What ``check`` needs of an item.  ``choices`` (a multiple-choice item's options; paraphrase_kinds "mc"):
        the multiple-choice rule, where the math one does not apply (without them: the generic rule); ``renamed``
        (paraphrase_kinds "code"): a code item is also found renamed and rewritten (without: by its signature)."""
        q_nums = hard(numbers(question))
        a = answer or ""
        fin = final_answer(a)
        sig = signature(question) or signature(a) if kind == "code" else None
        if sig is not None and renamed:
            return cls(CODE, q_nums, frozenset(literals(a)), fin, frozenset(), sig, False,
                       frozenset(stems(question) | literals(question)), frozenset(literals(question)), renamed=True,
                       examples=examples(question))
        if sig is not None:
            return cls(CODE, q_nums, frozenset(hard(numbers(a))), fin, frozenset(names(question)), sig, asks(question),
                       examples=examples(question))
        elif fin is not None and sum(q_nums.values()) >= 2:
            k = MATH
        elif kind == "multiple-choice" and choices:
            return cls(MC, q_nums, frozenset(), None, frozenset(names(question)), None, asks(question),
                       frozenset(stems(question + "\n" + a)), frozenset(stems("\n".join(c or "" for c in choices))), a,
                       frozenset(stems(question)), parts=tuple(frozenset(stems(x)) for x in stem_parts(question)))
        else:
            k = OTHER
        return cls(k, q_nums, frozenset(hard(numbers(a))), fin, frozenset(names(question)), sig, asks(question))


@dataclass
class Evidence:
    rule: str
    similarity: float
    quantities: list = field(default_factory=list)
    names: list = field(default_factory=list)
    signature: str | None = None
    answer_in_window: bool = False
    extra: dict = field(default_factory=dict)  # rule-specific: a multiple-choice item's margin, words, gold answer

    def as_dict(self) -> dict:
        d = {"rule": self.rule, "similarity": round(self.similarity, 4)} | self.extra
        if self.quantities:
            d["quantities"] = [_fmt(v) for v in self.quantities]
        if self.names:
            d["names"] = self.names
        if self.signature:
            d["signature"] = self.signature
        d["answer_in_window"] = self.answer_in_window
        return d


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def check(item: ItemFacts, window: str, similarity: float, min_similarity: float,
          weights: dict | None = None, margin: float = 1.0) -> Evidence | None:
    """The evidence for ``window`` restating ``item``, or None.  ``weights``: a content word's weight (multiple
    choice; a word no item holds weighs the most); ``margin``: the similarity over the closest other item."""
    if similarity < (mc_lower_bar(min_similarity) if item.kind == MC else min_similarity):
        return None
    w_nums = hard(numbers(window))
    if item.kind == MC:
        return _check_mc(item, window, w_nums, similarity, min_similarity, weights or {}, margin)
    if item.kind == MATH:
        answered = item.final is not None and item.final in w_nums
        if item.asks and not answered and not asks(window):
            return None  # the problem without what it asks: a window cut before an added step
        if item.numbers - w_nums:
            return None  # a number of the problem is missing or changed
        if len(item.numbers) <= FEW_NUMBERS and similarity < min_similarity + FEW_NUMBERS_MARGIN:
            return None  # two numbers match by chance in many problems: the text must be closer
        extra = w_nums - item.numbers
        if extra and (not answered or any(v not in item.answer_numbers or v in item.numbers for v in extra)):
            return None  # a new number: another problem (or the same with an operation added)
        return Evidence(MATH, similarity, sorted(item.numbers), sorted(item.names & names(window)),
                        answer_in_window=answered)
    if item.kind == CODE:
        sig = signature(window)
        if examples_kept(item.examples, window) is not None:
            return None  # an example's call with another output, or other examples: the task's behaviour changed
        if sig is not None and sig == item.signature:
            if set(item.numbers) - set(w_nums):
                return None  # the task's examples are not all there (def fib(n) elsewhere)
            return Evidence(CODE, similarity, sorted(item.numbers), signature=f"{sig[0]}({', '.join(sig[1])})",
                            extra=_shown(item, window))
        if not item.renamed or sig is not None and sig[0] == item.signature[0]:
            return None  # the same name with other parameters: another version of the task, not a rewrite
        return _check_renamed(item, window, similarity, weights or {})
    if similarity < max(OTHER_SIMILARITY, min_similarity) or item.numbers - w_nums:
        return None
    found = item.names & names(window)
    if item.names and 2 * len(found) < len(item.names):
        return None
    return Evidence(OTHER, similarity, sorted(item.numbers), sorted(found))


def mc_lower_bar(min_similarity: float) -> float:
    """The similarity a multiple-choice window needs on the lower tier (the stem's rare words kept)."""
    return min(max(MC_SIMILARITY, min_similarity), max(MC_LEXICAL_FLOOR, min_similarity - MC_LEXICAL_SLACK))


def _check_mc(item: ItemFacts, window: str, w_nums: Counter, similarity: float, min_similarity: float,
              weights: dict, margin: float) -> Evidence | None:
    if margin < MC_MARGIN or item.numbers - w_nums:
        return None
    top = max(weights.values(), default=1.0)
    wt = lambda ws: sum(weights.get(w, top) for w in ws)  # noqa: E731
    key = {w for w in item.stems if weights.get(w, top) >= MC_KEY_WEIGHT}  # its less common words: not a template's
    ws = stems(window)
    found = ws & key
    cover, matched = wt(found) / max(wt(key), 1e-9), wt(ws & (item.stems | item.option_stems))
    stem_key = key & item.question_stems
    rarest = sorted(stem_key, key=lambda w: (-weights.get(w, top), w))
    own = [weights.get(w, top) for w in rarest]
    stem_cover = wt(found & stem_key) / max(sum(own), 1e-9)  # the stem's own rare words, weighted, in any order
    bar = max(MC_SIMILARITY, min_similarity)
    if similarity < bar:
        bar = mc_lower_bar(min_similarity)
        if similarity < bar or stem_cover < MC_LEXICAL_COVER:
            return None  # a window a synonym or two away reads farther off: it must keep half of the stem's rare words
    if not ws & set(rarest[:MC_RAREST]):
        return None  # none of the stem's rarest words: the window is about something else
    if cover < MC_COVER and wt(found & stem_key) < MC_STEM_COVER * sum(own):
        return None  # too little of the item (of its stem, or of its stem and gold answer)
    if matched < min(MC_WEIGHT, max(MC_WEIGHT_MIN, sum(own[:MC_RARE_KEYS]))) or matched < MC_PRECISION * wt(ws):
        return None  # too little of the item, or a window mostly about something else
    if wt(stems(before_options(window)) & stem_key) < MC_STEM_WEIGHT:
        return None  # the window holds the options' words (or is options), not what the question asks
    for part in item.parts:
        if wt(ws & part) < MC_PART_COVER * wt(part):
            return None  # a passage or a scenario other items share, without the part that is this item's own
    gold = stems(item.gold)
    answered = bool(gold) and 2 * len(gold & ws) >= len(gold)
    if sum(own) < MC_SHORT_STEM and not answered:
        return None  # a stem that says this little is the item only with its answer
    words = sorted(found | (ws & item.option_stems), key=lambda w: (-weights.get(w, top), w))[:10]
    return Evidence(MC, similarity, sorted(item.numbers), sorted(item.names & names(window)),
                    answer_in_window=answered,
                    extra={"margin": round(margin, 4), "cover": round(cover, 3), "stem_cover": round(stem_cover, 3),
                           "words": words, "gold_answer": item.gold[:200], "bar": round(bar, 4)})


def mc_may_hold(item: ItemFacts, ws: set, weights: dict, top: float | None = None) -> bool:
    """Whether a text whose content words are ``ws`` meets those word conditions of ``_check_mc`` that a part of it
    cannot meet unless the whole does (a window's content words are some of its text's): a document failing them
    for an item holds no window of it, and the search leaves the item out before embedding anything.  Every
    condition here is one of ``_check_mc``'s (keep the two in step), each bar lowered by ``MAY_SLACK`` (sums of
    the same weights in another order); ``top``: the greatest weight, where the caller has it."""
    top = max(weights.values(), default=1.0) if top is None else top
    return mc_words_met(mc_word_bars(item, weights, top), ws, weights, top)


def mc_word_bars(item: ItemFacts, weights: dict, top: float | None = None) -> tuple:
    """What ``mc_words_met`` compares a text's words with, for one item (made once per item)."""
    top = max(weights.values(), default=1.0) if top is None else top
    wt = lambda s: sum(weights.get(w, top) for w in s)  # noqa: E731
    key = frozenset(w for w in item.stems if weights.get(w, top) >= MC_KEY_WEIGHT)
    stem_key = key & item.question_stems
    rarest = sorted(stem_key, key=lambda w: (-weights.get(w, top), w))
    own = [weights.get(w, top) for w in rarest]
    gold = stems(item.gold)
    need = min(MC_WEIGHT, max(MC_WEIGHT_MIN, sum(own[:MC_RARE_KEYS])))
    return (frozenset(rarest[:MC_RAREST]), key, stem_key, wt(key), MC_STEM_COVER * sum(own), item.stems | item.option_stems,
            need, [(part, MC_PART_COVER * wt(part)) for part in item.parts], sum(own) >= MC_SHORT_STEM - MAY_SLACK, gold)


def mc_words_met(bars: tuple, ws: set, weights: dict, top: float) -> bool:
    """``mc_may_hold`` from the item's ``mc_word_bars``."""
    rarest, key, stem_key, key_weight, stem_need, words, need, parts, long_stem, gold = bars
    if rarest.isdisjoint(ws):
        return False
    wt = lambda s: sum(weights.get(w, top) for w in s)  # noqa: E731
    found = ws & key
    if wt(found) / max(key_weight, 1e-9) < MC_COVER - MAY_SLACK and wt(found & stem_key) < stem_need - MAY_SLACK:
        return False
    if wt(ws & words) < need - MAY_SLACK or wt(ws & stem_key) < MC_STEM_WEIGHT - MAY_SLACK:
        return False
    if any(wt(ws & part) < part_need - MAY_SLACK for part, part_need in parts):
        return False
    return long_stem or (bool(gold) and 2 * len(gold & ws) >= len(gold))


MAY_SLACK = 1e-6


def _check_renamed(item: ItemFacts, window: str, similarity: float, weights: dict) -> Evidence | None:
    """A code task under other names: its examples' values (some of them uncommon among the tasks) and its words.
    Code reads alike to a static embedder, so a margin over the other tasks says little: the values decide."""
    lits = item.option_stems
    if len(lits) < CODE_MIN_LITERALS or similarity < CODE_SIMILARITY:
        return None
    w_lits = literals(window)
    ws = stems(window) | w_lits
    kept = lits & ws
    top = max(weights.values(), default=1.0)
    if len(kept) < CODE_LITERALS * len(lits) or sum(weights.get(w, top) >= MC_KEY_WEIGHT for w in kept) < 2:
        return None  # the examples' values changed, or are values any task has: another task
    if len(w_lits - lits - item.answer_numbers) > CODE_NEW_LITERALS * len(lits):
        return None  # examples added with new values: a harder or combined task built on this one
    wt = lambda s: sum(weights.get(w, top) for w in s)  # noqa: E731
    cover = wt(ws & item.stems) / max(wt(item.stems), 1e-9)
    if cover < CODE_COVER:
        return None
    return Evidence(CODE, similarity, sorted(item.numbers),
                    extra={"renamed": True, "cover": round(cover, 3), "literals": sorted(kept)[:12],
                           "signature_in_window": bool(signature(window))} | _shown(item, window))


def _shown(item: ItemFacts, window: str) -> dict:
    """For the reviewer: how many of a code item's examples (calls with their outputs) the window shows."""
    if not item.examples:
        return {}
    w = example_text(window)
    return {"examples_shown": f"{sum(a in w and r in w for a, r in item.examples)} of {len(item.examples)}"}
