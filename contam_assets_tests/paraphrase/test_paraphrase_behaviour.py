"""What the verifier asks of a code task and of a multiple-choice stem beyond their words (verify.py): a code
task's examples keep their outputs (a task whose behaviour changed gives other outputs for the same calls), and
a stem made of parts other items share (a passage, a scenario) is held only with the part that is its own; a
multiple-choice window must sit clearly closer to its item than to any other (the margin)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from contam_assets.paraphrase.quantities import examples, examples_kept, stem_parts
from contam_assets.paraphrase.verify import CODE, MC, MC_MARGIN, ItemFacts, check

DATA = Path("/work/shared/data")
PROMPT = '''def count_vowels(word: str) -> int:
    """Count the vowels of word.
    >>> count_vowels('banana')
    3
    >>> count_vowels('sky')
    0
    """
'''
SOLUTION = "    return sum(ch in 'aeiou' for ch in word)\n"


def test_examples_are_read_as_calls_and_outputs_in_either_layout():
    assert examples(PROMPT) == (("(banana)", "3"), ("(sky)", "0"))
    inline = 'def f(s, n):\n    """\n    f("5 apples", 19) -> 19 - 5 = 14\n    f("x", 3) == 3  # none taken\n    """\n'
    assert examples(inline) == (("(5apples,19)", "14"), ("(x,3)", "3"))
    assert examples("def g(x):\n    return x\n") == ()


def test_an_example_with_another_output_or_a_window_cut_at_a_call_is_not_the_task():
    ex = examples(PROMPT)
    reworded = 'def vowel_total(w):\n    """How many of the letters are vowels?\n    vowel_total("banana") gives 3, and vowel_total("sky") gives 0."""'
    assert examples_kept(ex, reworded) is None
    changed = PROMPT.replace("    3\n", "    6\n")  # a subtle change: the same call, another output
    assert examples_kept(ex, changed) == "output changed"
    assert examples_kept(ex, PROMPT.split("    3\n")[0]) == "cut at an example"
    other = 'def h(w):\n    """\n    >>> h("apple")\n    2\n    """'
    assert examples_kept(ex, other) == "other examples"
    assert examples_kept(ex, "Count the vowels of a word.") is None  # no example shown: the other rules decide
    swapped = PROMPT.replace("count_vowels('sky')\n    0", "count_vowels('fly')\n    0")  # one case replaced
    assert examples_kept(ex, swapped) == "example replaced"
    assert examples_kept(ex, PROMPT.replace('    """\n', "    >>> count_vowels('queue')\n    4\n    \"\"\"\n", 1)) is None


def test_the_signature_rule_refuses_a_task_whose_outputs_changed():
    item = ItemFacts.of("code", PROMPT, SOLUTION)
    assert item.kind == CODE and item.examples
    ev = check(item, PROMPT, 0.99, 0.65)
    assert ev is not None and ev.as_dict()["examples_shown"] == "2 of 2"
    assert check(item, PROMPT.replace("    0\n", "    1\n"), 0.99, 0.65) is None
    renamed = ItemFacts.of("code", PROMPT, SOLUTION, renamed=True)
    assert renamed.examples == item.examples


@pytest.mark.skipif(not (DATA / "paraphrase" / "evoeval.jsonl").is_file(), reason="shared data not present")
def test_evoeval_subtle_changes_with_new_outputs_are_refused_and_rewordings_kept():
    """EvoEval's 'subtle semantic change' rows that give other outputs for the item's own calls are refused, and
    not one of its concise rewordings (semantics kept) is refused for its examples."""
    he = [json.loads(line) for line in gzip.open(DATA / "HumanEval.jsonl.gz")]
    rows = [json.loads(line) for line in (DATA / "paraphrase" / "evoeval.jsonl").open()]
    subtle = [r for r in rows if r["kind"].startswith("evolved: subtle")]
    concise = [r for r in rows if "concise" in r["kind"]]
    refused = sum(examples_kept(examples(he[r["index"]]["prompt"]), r["question"]) is not None for r in subtle)
    kept = sum(examples_kept(examples(he[r["index"]]["prompt"]), r["question"]) is None for r in concise)
    assert refused >= 0.4 * len(subtle)  # 0.5 of the 100 rows at the time of writing
    assert kept >= 0.95 * len(concise)


SCENARIOS = ("For which of these two scenarios does the main character do something clearly morally wrong? "
             "Scenario 1 | I borrowed my neighbour's ladder and returned it scratched. "
             "Scenario 2 | I fed the stray cat with tuna from the fridge.")


def test_stem_parts():
    assert stem_parts(SCENARIOS) == ["Scenario 1 | I borrowed my neighbour's ladder and returned it scratched. ",
                                     "Scenario 2 | I fed the stray cat with tuna from the fridge."]
    assert stem_parts("This question refers to the following information.\nA long passage.\nWhat did the author mean?") \
        == ["What did the author mean?"]
    assert stem_parts("What does the term 'assets' refer to?") == []


def test_a_window_sharing_one_part_of_a_stem_or_sitting_close_to_other_items_is_not_held():
    item = ItemFacts.of("multiple-choice", SCENARIOS, "Wrong, Not wrong", ["Wrong, Wrong", "Wrong, Not wrong",
                                                                           "Not wrong, Wrong", "Not wrong, Not wrong"])
    assert item.kind == MC and len(item.parts) == 2
    weights = {"": 5.0}  # every word as rare as any (the weight of a word no item holds): the rules under test decide
    both = SCENARIOS.replace("borrowed", "took")
    assert check(item, both, 0.9, 0.65, weights, margin=0.3) is not None
    # another item pairs the first scenario with another one: the second part is not there
    one = SCENARIOS.split("Scenario 2")[0] + "Scenario 2 | I sang loudly at a funeral to annoy the widow."
    assert check(item, one, 0.9, 0.65, weights, margin=0.3) is None
    assert check(item, both, 0.9, 0.65, weights, margin=MC_MARGIN - 0.01) is None
