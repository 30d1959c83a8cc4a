"""Scoring, PPL, bits per byte, Min-K% math and checkpoint folders, on a tiny untrained GPT-2."""

import json
import math

import numpy as np
import pytest

from contam_assets.model.batching import pack_batches
from contam_assets.model.bits_per_byte import bpb_metrics
from contam_assets.model.checkpoint import CheckpointError, check_complete, discover, read_info
from contam_assets.model.loader import LoadOptions, load_checkpoint
from contam_assets.model.membership import membership_metrics, min_k, min_k_plus_plus, roc_auc
from contam_assets.model.ppl_probe import ppl_metrics
from contam_assets.model.scoring import score_texts
from contam_assets.model.sequences import ItemScore, score_sets
from contam_assets.testing import model_tiny as mt


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return mt.untrained_checkpoint(tmp_path_factory.mktemp("tiny") / "step-000000")


@pytest.fixture(scope="module")
def texts(shared_data):
    rows = mt.jsonl("gsm8k_test.jsonl")[:5]
    # Real items of different lengths, a curly quote (multi-byte UTF-8), a one-token text and an empty text.
    return [f"{r['question']} {r['answer']}" for r in rows] + ["Janet’s ducks lay 16 eggs.", "A", ""]


def direct_scores(lm, text):
    """Independent reference: one sample, no padding, torch cross-entropy."""
    import torch
    import torch.nn.functional as F

    ids = lm.tokenizer(text)["input_ids"]
    if len(ids) < 2:
        return 0.0, len(ids)
    with torch.no_grad():
        logits = lm.model(torch.tensor([ids])).logits[0]
    nll = F.cross_entropy(logits[:-1], torch.tensor(ids[1:]), reduction="sum").item()
    return nll, len(ids)


def test_ppl_equals_direct_cross_entropy(tiny, texts):
    lm = load_checkpoint(tiny)
    assert (lm.device, lm.dtype) == ("cpu", "float32")
    items = score_sets(lm, {"gsm8k-test": texts})
    for text, item in zip(texts, items):
        nll, n = direct_scores(lm, text)
        assert item.n_tokens == n
        assert item.nll == pytest.approx(nll, abs=1e-4, rel=1e-6)
        if n:
            # OpenCompass _get_ppl: summed CE over predicted tokens / all non-pad tokens (first one included)
            assert abs(item.opencompass_ppl - nll / n) < 1e-5
    assert items[-1].opencompass_ppl is None and items[-1].mink is None  # empty text: no score, no crash
    assert items[-2].n_predicted == 0 and items[-2].mink is None  # one token: nothing predicted


@pytest.mark.parametrize("budget", [1, 200, 700, 10**6])
@pytest.mark.parametrize("side", ["left", "right"])
def test_batching_and_padding_do_not_change_scores(tiny, texts, budget, side):
    reference = score_texts(load_checkpoint(tiny, LoadOptions(token_budget=10**6)), texts, vocab_stats=True)
    lm = load_checkpoint(tiny, LoadOptions(token_budget=budget))
    got = score_texts(lm, texts, vocab_stats=True, padding_side=side)
    for a, b in zip(reference, got):
        assert a.n_tokens == b.n_tokens
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
        np.testing.assert_allclose(a.mu, b.mu, atol=1e-5)
        np.testing.assert_allclose(a.sigma, b.sigma, atol=1e-5)


def test_pack_batches_respects_the_budget():
    lengths = [5, 300, 17, 64, 64, 1, 900, 33]
    batches = pack_batches(lengths, token_budget=256)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) == 1 or max(lengths[i] for i in b) * len(b) <= 256
    assert [6] in batches and [1] in batches  # longer than the budget: alone


def test_bits_per_byte_and_loglik_per_char(tiny):
    lm = load_checkpoint(tiny)
    text = "Janet’s ducks lay 16 eggs per day."
    (item,) = score_sets(lm, {"s": [text]})
    ids = lm.tokenizer(text)["input_ids"]
    first = lm.tokenizer.decode(ids[:1])
    predicted = text[len(first):]  # the first token is never predicted
    assert item.n_bytes == len(predicted.encode()) and item.n_bytes > item.n_chars  # ’ is 3 bytes
    m = bpb_metrics([item])
    assert m["bpb/s"] == pytest.approx(item.nll / math.log(2) / len(predicted.encode()), rel=1e-12)
    assert m["llpc/s"] == pytest.approx(-item.nll / len(predicted), rel=1e-12)


def test_min_k_edge_cases_and_definition():
    lp = np.array([-1.0, -2.0, -3.0, -4.0, -5.0])
    assert min_k(lp, 0.4) == pytest.approx(-4.5)
    assert min_k(lp, 0.1) == pytest.approx(-5.0)  # k*len < 1: the single lowest token, not a mean of nothing
    assert min_k(np.array([]), 0.2) is None
    with pytest.raises(ValueError):
        min_k(lp, 0.0)
    mu, sigma = np.full(5, -3.0), np.array([1.0, 1.0, 1.0, 2.0, 0.0])
    # z = (lp - mu) / sigma = [2, 1, 0, -0.5, -2e8]; lowest 40% = mean(-2e8, -0.5)
    assert min_k_plus_plus(lp, mu, sigma, 0.4) == pytest.approx((-2e8 - 0.5) / 2)


def test_min_k_plus_plus_matches_the_vocabulary_definition(tiny):
    import torch

    lm = load_checkpoint(tiny)
    text = mt.jsonl("gsm8k_test.jsonl")[0]["question"]
    (item,) = score_sets(lm, {"s": [text]}, k=0.2)
    ids = lm.tokenizer(text)["input_ids"]
    with torch.no_grad():
        logp = torch.log_softmax(lm.model(torch.tensor([ids])).logits[0, :-1].double(), -1)
    tok = logp.gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)
    mu = (logp.exp() * logp).sum(-1)
    sigma = ((logp.exp() * (logp - mu.unsqueeze(-1)) ** 2).sum(-1)).sqrt()
    z = ((tok - mu) / sigma).numpy()
    keep = max(1, int(0.2 * len(z)))
    assert item.minkpp == pytest.approx(np.sort(z)[:keep].mean(), abs=1e-4)
    assert item.mink == pytest.approx(np.sort(tok.numpy())[:keep].mean(), abs=1e-4)


def test_roc_auc_against_pair_counting():
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(1, 1, 40), rng.normal(0, 1, 50)
    pos[:5] = neg[:5]  # some ties
    pairs = [(p > n) + 0.5 * (p == n) for p in pos for n in neg]
    assert roc_auc(pos, neg) == pytest.approx(np.mean(pairs))
    assert roc_auc([3, 4], [1, 2]) == 1.0 and roc_auc([1, 2], [3, 4]) == 0.0
    assert roc_auc([], [1.0]) is None
    assert roc_auc([1.0, None], [0.0]) == 1.0  # unscored items are left out


def _item(dataset, nll, n_tokens, mink=None):
    return ItemScore(dataset, "0", nll, n_tokens, n_tokens - 1, 10, 10, mink, mink, False,
                     sk_nll=nll, sk_predicted=n_tokens - 1, sk_tokens=n_tokens)


def test_ppl_metrics_are_per_sample_means_and_deltas_token_weighted():
    items = [
        _item("gsm8k-test", 9.0, 10), _item("gsm8k-test", 1.0, 2),  # per-sample 0.9, 0.5; token-weighted 10/10
        _item("gsm8k-ref", 20.0, 11),
        _item("gsm8k-train", 4.0, 5),
    ]
    m = ppl_metrics(items)
    assert m["gsm8k-test-ppl"] == pytest.approx(0.7)
    assert m["loss/gsm8k-test"] == pytest.approx(1.0)
    assert m["delta1"] == pytest.approx(1.0 - 2.0)
    assert m["delta2"] == pytest.approx(1.0 - 1.0)
    assert ppl_metrics(items[:2])["delta1"] is None  # no reference set: no delta, no crash
    mm = membership_metrics([_item("gsm8k-test", 1, 3, -1.0), _item("gsm8k-ref", 1, 3, -2.0), _item("gsm8k-ref", 1, 1, None)])
    assert mm["mink/auc"] == 1.0 and mm["mink/unscored"] == 1.0


def test_checkpoint_metadata_from_file_and_from_folder_names(tmp_path):
    folder = tmp_path / "exp1" / "checkpoints" / "step-000400"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    info = read_info(folder)
    assert (info.experiment, info.stage, info.step, info.is_base, info.key) == ("exp1", "step-000400", 400, False, "exp1/step-000400")
    base = tmp_path / "exp1" / "checkpoints" / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    assert read_info(base).is_base and read_info(base).step is None
    (folder / "contam_checkpoint.json").write_text(json.dumps({"experiment": "full", "stage": "final", "step": 7, "is_base": False, "recipe": "arm"}))
    info = read_info(folder)
    assert (info.key, info.step, info.recipe) == ("full/final", 7, "arm")
    extra = tmp_path / "extra" / "my model"
    extra.mkdir(parents=True)
    (extra / "config.json").write_text("{}")
    assert [i.key for i in discover(tmp_path, tmp_path / "extra")] == ["exp1/base", "extra/my_model", "full/final"]


def test_incomplete_or_broken_folder_gives_a_clear_error(tiny, tmp_path):
    only_config = tmp_path / "half"
    only_config.mkdir()
    (only_config / "config.json").write_text((tiny / "config.json").read_text())
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(only_config)
    msg = str(err.value)
    assert str(only_config) in msg and "weights" in msg and "tokenizer" in msg and "config.json" not in msg.split("missing")[1]

    sharded = tmp_path / "sharded"
    sharded.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (sharded / name).write_bytes((tiny / name).read_bytes())
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors"}}))
    with pytest.raises(CheckpointError, match="model-00001-of-00002.safetensors"):
        check_complete(sharded)

    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for p in tiny.iterdir():
        (corrupt / p.name).write_bytes(p.read_bytes())
    (corrupt / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="failed to load") as err:
        load_checkpoint(corrupt)
    assert str(corrupt) in str(err.value)
