"""Fresh-set gap: answer extraction, a model that memorised GSM8K answers, generation batching, correlation."""

import pytest

from contam_assets.model.benchmarks import fresh_rows
from contam_assets.model.correlation import Point, correlate, plot_points
from contam_assets.model.fresh_gap import fewshot_prefix, gap_metrics, gold_number, gsm_accuracy, last_number
from contam_assets.model.generation import generate_greedy
from contam_assets.model.loader import LoadOptions, load_checkpoint
from contam_assets_tests import model_tiny as mt


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


def test_fewshot_prefix_is_seeded(shared_data):
    train = mt.jsonl("gsm8k_train.jsonl")
    a, b = fewshot_prefix(train, 5), fewshot_prefix(train, 5)
    assert a == b and a.count("Question: ") == 5 and a.endswith("\n\n")
    assert fewshot_prefix(train, 0) == ""


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


def test_rank_correlations_across_checkpoints(tmp_path):
    pts = [Point(f"a/step-{i}", "a", -2.0 + 0.1 * i, 0.01 * i * i) for i in range(5)]
    pts += [Point("b/base", "b", -1.0, 0.1), Point("b/step-1", "b", -0.9, 0.2)]
    pts += [Point(f"c/{i}", "c", -1.0, 0.1 * i) for i in range(3)]
    res = {r.experiment: r for r in correlate(pts)}
    assert res["a"].spearman == pytest.approx(1.0) and res["a"].kendall == pytest.approx(1.0)
    assert res["a"].n == 5 and 0 <= res["a"].spearman_p < 0.05
    assert res["b"].spearman is None and "at least 3" in res["b"].note
    assert res["c"].spearman is None and "constant" in res["c"].note
    plot_points(pts, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"
