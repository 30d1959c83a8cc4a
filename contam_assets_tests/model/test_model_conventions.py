"""Δ1/Δ2 as Skywork's eval_loss.py computes them and gsm8k-*-ppl as OpenCompass's get_ppl does, on a tiny Llama
whose tokenizer prepends <s> — the case where the two conventions differ — each against a direct recomputation
of the reference's own formula."""

from __future__ import annotations

import json
import statistics

import pytest

from contam_assets.cli import main
from contam_assets.model import benchmarks as bm
from contam_assets.model.loader import load_checkpoint
from contam_assets.model.ppl_probe import opencompass_token_loss, ppl_metrics, skywork_loss, token_loss
from contam_assets.model.sequences import score_sets
from contam_assets.testing import model_tiny as mt

LIMIT = 6


def _reference_model(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype="float32").eval()
    return model, tok


def skywork_recomputed(folder, texts, batch_size=1, max_tokens=4096):
    """Skywork eval/eval_loss.py, step by step: cut, no special tokens, EOS right-padding, mask[:, :-1]."""
    import torch
    import torch.nn.functional as F

    model, tok = _reference_model(folder)
    tok.pad_token = tok.eos_token
    tok.padding_side = "right"
    texts = [t[: max_tokens // 3] for t in texts]
    total_loss, total_tokens = 0.0, 0
    for i in range(0, len(texts), batch_size):
        enc = tok(texts[i : i + batch_size], add_special_tokens=False, padding=True, truncation=True,
                  max_length=max_tokens, return_tensors="pt")
        ids, mask = enc["input_ids"], enc["attention_mask"]
        with torch.no_grad():
            logits = model(ids, attention_mask=mask).logits[:, :-1]
        loss = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none") * mask[:, :-1]
        total_loss += loss.sum().item()
        total_tokens += mask.sum().item() - mask.size(0)
    return total_loss / total_tokens


def opencompass_recomputed(folder, texts, max_seq_len):
    """OpenCompass HuggingFace get_ppl at batch size 1 (left truncation, pad = EOS), then AveragePPLEvaluator."""
    import torch
    import torch.nn.functional as F

    model, tok = _reference_model(folder)
    tok.truncation_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token  # OpenCompass's patch for tokenizers without a pad token
    values = []
    for text in texts:
        ids = tok([text], truncation=True, max_length=max_seq_len, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            logits = model(ids).logits
        ce = F.cross_entropy(logits[0, :-1].float(), ids[0, 1:], ignore_index=tok.pad_token_id, reduction="none")
        values.append(ce.sum().item() / (ids != tok.pad_token_id).sum().item())
    return statistics.mean(values)


def _texts(shared_data, limit):
    train, _ = bm.gsm8k_texts("train", shared_data)
    test, _ = bm.gsm8k_texts("test", shared_data)
    ref, _ = bm.reference_texts(bm.find_reference(shared_data))
    return {"gsm8k-train": train[:limit], "gsm8k-test": test[:limit], "gsm8k-ref": ref[:limit]}


@pytest.fixture(scope="module")
def llama(tmp_path_factory, shared_data):
    return mt.trained_llama_checkpoint(tmp_path_factory.mktemp("llama") / "step-000120")


def test_contam_probe_gives_skywork_deltas_and_opencompass_ppl_on_a_bos_tokenizer(llama, shared_data, tmp_path):
    out = tmp_path / "out"
    assert main(["probe", "--checkpoint", str(llama), "--benchmarks", str(shared_data), "--out", str(out),
                 "--limit", str(LIMIT), "--max-new-tokens", "4"]) == 0
    got = json.loads((out / "probe.json").read_text())
    texts = _texts(shared_data, LIMIT)
    loss = {name: skywork_recomputed(llama, t) for name, t in texts.items()}
    assert got["delta1"] == pytest.approx(loss["gsm8k-test"] - loss["gsm8k-ref"], abs=1e-4)
    assert got["delta2"] == pytest.approx(loss["gsm8k-test"] - loss["gsm8k-train"], abs=1e-4)
    for name, t in texts.items():
        assert got[f"loss/{name}"] == pytest.approx(loss[name], abs=1e-5)
        assert got[f"{name}-ppl"] == pytest.approx(opencompass_recomputed(llama, t, 1024), rel=1e-5)
        # The conventions really differ here: every text tokenizes differently, and the BOS term moves the loss.
        assert got[f"skywork/tokenization-differs/{name}"] == LIMIT
        assert abs(got[f"loss-special-tokens/{name}"] - got[f"loss/{name}"]) > 0.01


def test_skywork_cut_and_batches_as_eval_loss_py(llama, shared_data):
    """A text over 1,365 characters is cut as Skywork cuts it; batch size 4 charges the EOS after shorter texts."""
    train = [t for t in bm.gsm8k_texts("train", shared_data)[0][:600]]
    long_text = max(train, key=len)
    assert len(long_text) > 4096 // 3
    texts = train[:7] + [long_text]
    lm = load_checkpoint(llama)
    items = score_sets(lm, {"gsm8k-train": texts})
    assert items[-1].sk_cut and not any(it.sk_cut for it in items[:-1])
    assert items[-1].sk_tokens < lm.max_len  # cut by characters, as Skywork cuts, not by the context
    assert token_loss(items) == pytest.approx(skywork_recomputed(llama, texts, batch_size=1), abs=1e-5)
    batched = skywork_loss(items, 4)
    assert batched == pytest.approx(skywork_recomputed(llama, texts, batch_size=4), abs=1e-5)
    assert batched > token_loss(items)  # the padding artefact adds loss; batch size 1 is the formula itself


def test_left_truncation_keeps_the_end_as_opencompass_does(tmp_path, shared_data):
    short = mt.llama_checkpoint(tmp_path / "ctx64", max_positions=64)
    lm = load_checkpoint(short)
    texts = [t for t in bm.gsm8k_texts("test", shared_data)[0][:40] if len(lm.tokenizer(t)["input_ids"]) > 100][:3]
    assert texts
    items = score_sets(lm, {"gsm8k-test": texts})
    for text, it in zip(texts, items):
        full = lm.tokenizer(text)["input_ids"]
        assert it.truncated and it.n_tokens == 64
        assert it.opencompass_ppl == pytest.approx(opencompass_recomputed(short, [text], 64), rel=1e-5)
        # Skywork keeps the start instead (tokens cut to the context here).
        assert it.sk_tokens == 64 and it.sk_cut
        assert it.n_chars < len(text) and it.n_bytes >= it.n_chars  # bytes counted only for the kept, predicted end
        assert full[0] == lm.tokenizer.bos_token_id


def test_a_tokenizer_without_special_tokens_has_one_convention(tmp_path, shared_data):
    lm = load_checkpoint(mt.untrained_checkpoint(tmp_path / "gpt2"))
    items = score_sets(lm, _texts(shared_data, 4))
    assert all(it.same_tokens for it in items)
    m = ppl_metrics(items)
    for name in ("gsm8k-train", "gsm8k-test", "gsm8k-ref"):
        assert m[f"loss/{name}"] == pytest.approx(m[f"loss-special-tokens/{name}"], rel=1e-12)
        assert m[f"skywork/tokenization-differs/{name}"] == 0
    assert opencompass_token_loss(items) == pytest.approx(token_loss(items), rel=1e-12)
