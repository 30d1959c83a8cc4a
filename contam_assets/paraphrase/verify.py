"""A rewording or a look-alike?  Fresh problems written in a benchmark's style, and copies with
their numbers changed, sit as close in embedding space as a rewording does; what tells them
apart is what a rewording must keep.

- a math item (an answer with ``#### N``, at least two numbers that are data): every number of
  the question, as often, and no new one; numbers of the worked solution may join only where
  the window holds the final answer too (a question with its solution); an item with only two
  distinct numbers needs ``FEW_NUMBERS_MARGIN`` more similarity (two numbers meet by chance); a window that does not
  hold the answer must end by asking something where the item does (a question mark, "how",
  "find", ...): a problem cut before a step that was added to it is not the problem;
- a code item: the same function name and parameter names (``def f(a, b)``), and every number of
  its prompt (the examples of a docstring: a ``def fib(n)`` in other code is not HumanEval's);
- any other item: every number of the question, at least half of its names, and a higher
  similarity (``other_similarity``), since text alone is weaker evidence.

``check`` returns the evidence (what matched) or None.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from contam_assets.paraphrase.quantities import asks, final_answer, hard, names, numbers, signature

MATH, CODE, OTHER = "math", "code", "other"
OTHER_SIMILARITY = 0.85  # the bar for items with neither numbers nor a signature to check
FEW_NUMBERS, FEW_NUMBERS_MARGIN = 2, 0.1  # a math item with this few distinct numbers needs this much more similarity


@dataclass
class Item:
    kind: str
    numbers: Counter  # hard numbers of the question
    answer_numbers: frozenset  # hard numbers of the answer (worked solution)
    final: float | None
    names: frozenset
    signature: tuple | None
    asks: bool = False

    @classmethod
    def of(cls, kind: str, question: str, answer: str | None) -> "Item":
        q_nums = hard(numbers(question))
        a = answer or ""
        fin = final_answer(a)
        sig = signature(question) or signature(a) if kind == "code" else None
        if sig is not None:
            k = CODE
        elif fin is not None and sum(q_nums.values()) >= 2:
            k = MATH
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

    def as_dict(self) -> dict:
        d = {"rule": self.rule, "similarity": round(self.similarity, 4)}
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


def check(item: Item, window: str, similarity: float, min_similarity: float) -> Evidence | None:
    if similarity < min_similarity:
        return None
    w_nums = hard(numbers(window))
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
        if sig is None or sig != item.signature or set(item.numbers) - set(w_nums):
            return None  # another function, or the same name without the task's examples (def fib(n) elsewhere)
        return Evidence(CODE, similarity, sorted(item.numbers), signature=f"{sig[0]}({', '.join(sig[1])})")
    if similarity < max(OTHER_SIMILARITY, min_similarity) or item.numbers - w_nums:
        return None
    found = item.names & names(window)
    if item.names and 2 * len(found) < len(item.names):
        return None
    return Evidence(OTHER, similarity, sorted(item.numbers), sorted(found))
