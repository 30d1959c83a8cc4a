"""Min-K%, Min-K%++ and the PPL probe separate items a tiny model was trained on from unseen ones."""

import pytest

from contam_assets.model.loader import load_checkpoint
from contam_assets.model.membership import membership_metrics
from contam_assets.model.ppl_probe import ppl_metrics
from contam_assets.model.sequences import score_sets
from contam_assets.testing import model_tiny as mt


@pytest.fixture(scope="module")
def scored(shared_data, tmp_path_factory):
    lm = load_checkpoint(mt.trained_checkpoint(tmp_path_factory.getbasetemp() / "model_tiny"))
    test = mt.jsonl("gsm8k_test.jsonl")
    members = mt.member_indices()
    planted = set(members) | set(mt.gsm_prompted_indices())
    # Unseen GSM8K test items of the same (short) length range as the planted ones.
    unseen = [i for i in mt._by_length(range(200), test) if i not in planted][: len(members)]
    ref = sorted(mt.jsonl("skywork_mock_gsm8k_eval_1419.jsonl"), key=lambda r: len(r["question"]) + len(r["answer"]))[:16]
    sets = {
        "gsm8k-test": [f"{test[i]['question']} {test[i]['answer']}" for i in members],
        "gsm8k-ref": [f"{test[i]['question']} {test[i]['answer']}" for i in unseen],
        "skywork-ref": [f"{r['question']} {r['answer']}" for r in ref],
    }
    return score_sets(lm, sets, k=0.2)


def test_trained_items_score_above_unseen_items(scored):
    m = membership_metrics(scored)  # members = gsm8k-test (planted), non-members = unseen GSM8K test items
    assert m["mink/auc"] > 0.8
    assert m["minkpp/auc"] > 0.8
    assert m["mink/member-mean"] > m["mink/nonmember-mean"]
    assert m["mink/unscored"] == 0


def test_trained_items_separate_from_skywork_reference(scored):
    m = membership_metrics(scored, members="gsm8k-test", nonmembers="skywork-ref")
    assert m["mink/auc"] > 0.8 and m["minkpp/auc"] > 0.8


def test_ppl_probe_flags_test_leakage(scored):
    m = ppl_metrics(scored)
    assert m["gsm8k-test-ppl"] < m["gsm8k-ref-ppl"]
    assert m["delta1"] < -0.5  # L_test - L_ref clearly negative: the test items were seen
    assert m["delta2"] is None  # no train set scored here
