"""Fresh-set gap: answer extraction, a model that memorised GSM8K answers, generation batching, correlation."""

import pytest

from contam_assets.model.benchmarks import fresh_rows
from contam_assets.model.correlation import ACROSS, WITHIN, Point, correlate, plot_points
from contam_assets.model.fresh_gap import (
    drop_gsm8k_questions,
    fewshot_prefixes,
    gap_metrics,
    gold_number,
    gsm_accuracy,
    last_number,
)
from contam_assets.model.generation import generate_greedy
from contam_assets.model.loader import LoadOptions, load_checkpoint
from contam_assets.testing import model_tiny as mt


def test_last_number_and_gold_parsing():
    assert last_number("She makes 9 * 2 = $18 every day.\n#### 18") == 18
    assert last_number("It costs $1,234.50.") == 1234.5
    assert last_number("The change is -7 degrees") == -7
    assert last_number("no digits here") is None
    assert gold_number("Janet sells 9 eggs.\n#### 1,018") == 1018
    assert gold_number(-9867630.0) == -9867630.0
    assert gold_number("42") == 42


def test_fresh_rows_accept_gsm_hard_fields_and_count_bad_rows(shared_data, tmp_path):
    rows = fresh_rows(shared_data / "gsmhard_v2.jsonl")
    assert len(rows.rows) == 1319 and not rows.bad
    assert set(rows.rows[0]) == {"question", "answer"}
    bad = tmp_path / "fresh.jsonl"
    bad.write_text('{"question": "Q?", "answer": "#### 3"}\nnot json\n{"prompt": "x"}\n')
    got = fresh_rows(bad)
    assert len(got.rows) == 1 and len(got.bad) == 2


def test_shots_are_drawn_per_question_as_lm_eval_does(shared_data):
    import random

    train = mt.jsonl("gsm8k_train.jsonl")
    prefixes = fewshot_prefixes(train, 4, 5)
    assert prefixes == fewshot_prefixes(train, 4, 5)  # seeded
    assert len(set(prefixes)) == 4 and all(p.count("Question: ") == 5 and p.endswith("\n\n") for p in prefixes)
    # lm-evaluation-harness: one Random(1234) per task, rng.sample(fewshot docs, n) for each doc in order
    rng = random.Random(1234)
    expected = [rng.sample(train, 5) for _ in range(4)]
    assert prefixes[2].startswith(f"Question: {expected[2][0]['question']}\nAnswer: {expected[2][0]['answer']}\n\n")
    assert fewshot_prefixes(train, 3, 0) == ["", "", ""]


def test_fresh_items_that_are_gsm8k_questions_are_dropped_and_counted(shared_data):
    hard = fresh_rows(shared_data / "gsmhard_v2.jsonl").rows
    kept, dropped = drop_gsm8k_questions(hard, mt.jsonl("gsm8k_test.jsonl"), mt.jsonl("gsm8k_train.jsonl"))
    assert len(dropped) == 329 and len(kept) == 1319 - 329  # GSM-Hard's verbatim GSM8K test questions (SOURCES.md)
    test_questions = {r["question"] for r in mt.jsonl("gsm8k_test.jsonl")}
    assert all(hard[i]["question"] in test_questions for i in dropped)
    assert not any(r["question"] in test_questions for r in kept)
    spaced = [{"question": "  " + hard[dropped[0]]["question"].upper() + " ", "answer": 1}]
    assert drop_gsm8k_questions(spaced, mt.jsonl("gsm8k_test.jsonl"))[1] == [0]  # case and whitespace aside


@pytest.fixture(scope="module")
def trained_lm(shared_data, tmp_path_factory):
    return load_checkpoint(mt.trained_checkpoint(tmp_path_factory.getbasetemp() / "model_tiny"), LoadOptions(token_budget=4096))


def test_memorised_gsm8k_answers_give_a_positive_gap(trained_lm):
    idx = mt.gsm_prompted_indices()
    test, hard = mt.jsonl("gsm8k_test.jsonl"), fresh_rows(mt.SHARED / "gsmhard_v2.jsonl").rows
    items = gsm_accuracy(trained_lm, [test[i] for i in idx], "", "gsm8k-test", max_new_tokens=160)
    items += gsm_accuracy(trained_lm, [hard[i] for i in idx], "", "fresh", max_new_tokens=160)
    m = gap_metrics(items)
    assert m["fresh/gsm8k-acc"] >= 2 / 3  # it recites the GSM8K solutions ...
    assert m["fresh/fresh-acc"] == 0.0  # ... which are wrong once the numbers change
    assert m["fresh/gap"] == pytest.approx(m["fresh/gsm8k-acc"])
    assert m["fresh/n-gsm8k"] == m["fresh/n-fresh"] == len(idx)


def test_batched_generation_equals_one_at_a_time(trained_lm):
    he = mt.humaneval()
    prompts = [he[t]["prompt"] for t in mt.RECITED] + ["Question: How many eggs?\nAnswer:"]
    together = generate_greedy(trained_lm, prompts, 24)
    alone = [generate_greedy(trained_lm, [p], 24)[0] for p in prompts]
    assert [g.text for g in together] == [g.text for g in alone]
    assert together[0].text.strip()


def test_rank_correlations_across_experiments_and_within_runs(tmp_path):
    pts = [Point(f"a/step-{i}", "a", -2.0 + 0.1 * i, 0.01 * i * i, i) for i in range(5)]
    pts += [Point("b/base", "b", -1.0, 0.1, None), Point("b/step-1", "b", -0.9, 0.2, 1)]
    pts += [Point(f"c/{i}", "c", -1.0, 0.1 * i, i) for i in range(3)]
    pts += [Point("d/final", "d", -1.5, 0.05, None)]
    res = correlate(pts)
    across, within = res[0], {r.experiment: r for r in res[1:]}
    # GSM1k's view: one point per model, its latest checkpoint (a/step-4, b/step-1, c/2, d/final)
    assert across.scope == ACROSS and across.experiment == "*" and across.n == 4
    assert "a/step-4" in across.note and "b/step-1" in across.note and "c/2" in across.note
    llpc, gap = [-1.6, -0.9, -1.0, -1.5], [0.16, 0.2, 0.2, 0.05]
    from scipy.stats import spearmanr

    assert across.spearman == pytest.approx(spearmanr(llpc, gap).statistic)
    assert all(r.scope == WITHIN for r in within.values())
    assert within["a"].spearman == pytest.approx(1.0) and within["a"].kendall == pytest.approx(1.0)
    assert within["a"].n == 5 and 0 <= within["a"].spearman_p < 0.05
    assert within["b"].spearman is None and "at least 3" in within["b"].note
    assert within["c"].spearman is None and "constant" in within["c"].note
    assert correlate(pts[:5])[0].spearman is None  # one experiment: no across-model correlation
    for across_plot in (True, False):
        plot_points(pts, tmp_path / f"plot{across_plot}.png", across=across_plot)
        assert (tmp_path / f"plot{across_plot}.png").read_bytes()[:4] == b"\x89PNG"
