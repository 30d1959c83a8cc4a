"""A reworded multiple-choice stem (docs/paraphrase.md, the multiple-choice rule): a short stem is held on its
rarest words, not on an absolute weight it cannot reach; a window made of options says nothing of a stem; GPT-4's
rephrasings of items in the reference set are held and those of items left out are not."""

from __future__ import annotations

import json

import pytest

from contam_assets.paraphrase.quantities import before_options
from contam_assets.paraphrase.verify import MC, ItemFacts, check
from contam_assets_tests.paraphrase.test_paraphrase_kinds import DATA, ROOT, SUBJECTS, doc

STEM = "The term 'over-urbanization' means that:"
GOLD = "in poorer countries, the rapidly developing cities drain resources from the countryside"
CHOICES = [GOLD, "cities grow faster than their housing", "too many people live in suburbs", "all of the above"]
# each word's weight (log of items over items holding it); a word no item holds weighs the most
WEIGHTS = {"over-u": 8.9, "term": 4.1, "means": 4.0} | {w: 5.0 for w in
                                                     ("poorer", "countr", "rapidl", "develo", "cities", "drain", "resour")}


def test_a_short_stem_is_held_on_its_two_rarest_words():
    item = ItemFacts.of("multiple-choice", STEM, GOLD, CHOICES)
    assert item.kind == MC
    # its two rarest words weigh 13: under the 14 an absolute bar asked, over what this stem can give
    ev = check(item, "What does the term 'over-urbanization' signify?", 0.8, 0.65, WEIGHTS, margin=0.3)
    assert ev is not None and set(ev.extra["words"]) >= {"over-u", "term"} and not ev.answer_in_window
    # the rarest word alone is a mention of the subject, not the item
    assert check(item, "Over-urbanization is discussed below in detail.", 0.8, 0.65, WEIGHTS, margin=0.3) is None


def test_a_window_made_of_options_is_no_stem():
    assert before_options("A. transnational corporations\nB. nation states") == ""
    assert before_options("Merton C. Karl Marx") == "Merton "
    assert before_options("Social norms are:\nA. rules\nB. habits") == "Social norms are:\n"
    assert before_options("As W. E. B. Du Bois argued, progress came slowly.") == "As W. E. B. Du Bois argued, progress came slowly."
    item = ItemFacts.of("multiple-choice", STEM, GOLD, CHOICES)
    window = "A. the term over-urbanization means B. something else"  # the stem's words, in an option
    assert check(item, window, 0.8, 0.65, WEIGHTS, margin=0.3) is None


def test_gpt4_rephrasings_of_indexed_items_are_held_and_of_left_out_items_not():
    import polars as pl

    from contam_assets.detector.config import PRESETS
    from contam_assets.detector.matches import Reference
    from contam_assets.paraphrase.stage import paraphrase_rows
    from contam_assets.sources.reference import build_reference_set
    from contam_assets.sources.registry import load_registry

    path = DATA / "paraphrase" / "lmsys_mmlu_rephrase_sociology.jsonl"
    if not path.is_file() or not (DATA / "mmlu_test" / "sociology_test.csv").is_file():
        pytest.skip("shared data not present")
    # four MMLU subjects, the even rows of sociology left out of the reference set
    cfg = PRESETS["paraphrase"].replace(paraphrase_kinds="all")
    records, _ = build_reference_set(load_registry(ROOT / "data" / "tasks", ["mmlu"]), DATA, cfg)
    ref = Reference(records.filter(pl.col("subject").is_in(SUBJECTS) & ~(
        (pl.col("subject") == "sociology") & (pl.col("instance_index") % 2 == 0))))
    rows = [json.loads(line) for line in path.open()]
    out = paraphrase_rows([doc(i, r["question"]) for i, r in enumerate(rows)], "web/a.jsonl", ref, cfg, "paraphrase", [])
    held = {(o["line"], o["subject"], o["instance_index"]) for o in out}
    # odd rows of sociology are in this reference set, even rows are not
    indexed = [i for i, r in enumerate(rows) if r["index"] % 2 == 1]
    left_out = [i for i, r in enumerate(rows) if r["index"] % 2 == 0]
    found = sum((i, "sociology", rows[i]["index"]) in held for i in indexed)
    assert found >= 0.55 * len(indexed), (found, len(indexed))  # 59 of 98 (2026-12-06)
    assert not [o for o in out if o["line"] in set(left_out)]


# a stem whose own less common words weigh 42 in all; its gold answer's four 5 each; any other word 9
WEBER = "Weber described the Protestant ethic as the spirit behind modern capitalism:"
WEBER_GOLD = "an ascetic devotion to work as a calling"
WEBER_WEIGHTS = {"weber": 7.0, "protes": 7.0, "ethic": 6.0, "spirit": 5.5, "capita": 5.0, "modern": 4.0, "descri": 4.0,
                 "behind": 3.5, "ration": 4.5, "other": 9.0} | {w: 5.0 for w in ("asceti", "devoti", "work", "callin")}


def test_a_rewording_a_little_under_the_bar_is_held_on_half_of_its_stems_rare_words():
    item = ItemFacts.of("multiple-choice", WEBER, WEBER_GOLD, [WEBER_GOLD, "thrift", "class conflict", "anomie"])
    reworded = "What did Weber say the Protestant ethic was: the spirit of capitalism?"  # 30.5 of 42
    nearby = "Weber saw modern capitalism as rationalization."  # the same subject: 16 of 42 (weber, modern, capita)
    # similarity 0.62: under the multiple-choice bar (0.67), within MC_LEXICAL_SLACK of the part's (0.65)
    ev = check(item, reworded, 0.62, 0.65, WEBER_WEIGHTS, margin=0.3)
    assert ev is not None and ev.extra["stem_cover"] >= 0.5 and ev.extra["bar"] == pytest.approx(0.60)
    assert check(item, nearby, 0.62, 0.65, WEBER_WEIGHTS, margin=0.3) is None
    # the same window at the multiple-choice bar passes the word rules: only the similarity tier tells them apart
    assert check(item, nearby, 0.70, 0.65, WEBER_WEIGHTS, margin=0.3) is not None
    # further under the bar nothing is held, and the margin over the other items is still asked
    assert check(item, reworded, 0.58, 0.65, WEBER_WEIGHTS, margin=0.3) is None
    assert check(item, reworded, 0.62, 0.65, WEBER_WEIGHTS, margin=0.1) is None
    # the part's bar moves the lower tier with it
    assert check(item, reworded, 0.62, 0.70, WEBER_WEIGHTS, margin=0.3) is None


def test_the_lower_multiple_choice_tier_follows_the_knob_but_not_under_its_floor():
    from contam_assets.paraphrase.verify import mc_lower_bar

    assert [round(mc_lower_bar(s), 4) for s in (0.3, 0.5, 0.65, 0.7, 0.9)] == [0.6, 0.6, 0.6, 0.65, 0.85]
