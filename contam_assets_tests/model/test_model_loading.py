"""Checkpoints of real size: accelerate device maps, the checkpoint's own dtype, remote code on request only,
the optional vLLM backend, and progress with items/s and an ETA."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contam_assets.cli import main
from contam_assets.model.batching import Progress, format_seconds
from contam_assets.model.checkpoint import CheckpointError
from contam_assets.model.loader import LoadOptions, describe, load_checkpoint, parse_max_memory, placement
from contam_assets.model.scoring import score_texts
from contam_assets.model.vllm_backend import BackendUnavailable, unavailable_reason
from contam_assets.testing import model_tiny as mt

TEXTS = ["Janet’s ducks lay 16 eggs per day. She eats three for breakfast.", "A robe takes 2 bolts of blue fiber."]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return mt.llama_checkpoint(tmp_path_factory.mktemp("llama") / "ckpt")


def test_the_checkpoints_own_dtype_by_default(tmp_path):
    bf16 = mt.llama_checkpoint(tmp_path / "bf16", dtype="bfloat16")
    assert json.loads((bf16 / "config.json").read_text()).get("dtype") == "bfloat16"
    lm = load_checkpoint(bf16)
    assert lm.dtype == "bfloat16"
    (s,) = score_texts(lm, TEXTS[:1])
    assert np.isfinite(s.nll) and s.nll > 0
    assert load_checkpoint(bf16, LoadOptions(dtype="float32")).dtype == "float32"  # --dtype overrides
    with pytest.raises(ValueError, match="unknown dtype"):
        load_checkpoint(bf16, LoadOptions(dtype="fp8"))


def test_a_model_split_by_an_accelerate_device_map_scores_the_same(llama, tmp_path):
    whole = score_texts(load_checkpoint(llama), TEXTS)
    split = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu",
             "model.layers.1": "disk", "model.norm": "cpu", "lm_head": "cpu"}
    lm = load_checkpoint(llama, LoadOptions(device_map=split, offload_folder=str(tmp_path / "offload")))
    assert lm.device_map == split and lm.device == "cpu"
    assert "device_map over cpu, disk" in describe(lm)
    for a, b in zip(whole, score_texts(lm, TEXTS)):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)


def test_inputs_go_where_the_input_embedding_sits():
    """On an H200, transformers 5.17 recorded no device map for a model placed whole on one GPU, and inputs were
    sent to the CPU; the embedding's own weight decides, the map (any value type) only when that weight was
    offloaded."""
    import torch

    from contam_assets.model.loader import _input_device

    class Model(torch.nn.Module):
        def __init__(self, device):
            super().__init__()
            self.embed = torch.nn.Embedding(4, 2, device=device)

        def get_input_embeddings(self):
            return self.embed

    assert _input_device(Model("cpu"), {"": torch.device("cuda:0")}) == "cpu"
    assert _input_device(Model("meta"), {"model.embed_tokens": torch.device("cuda:1")}) == "cuda:1"
    assert _input_device(Model("meta"), {"model.embed_tokens": 0}) == "cuda:0"
    assert _input_device(Model("meta"), {"model.embed_tokens": "disk", "model.layers.0": "cuda:2"}) == "cuda:2"


def test_device_auto_means_every_gpu_through_accelerate(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert placement(LoadOptions()) == ("map", {"device_map": "auto"})
    assert placement(LoadOptions(max_memory="0=20GiB,1=20GiB,cpu=64GiB")) == (
        "map", {"device_map": "auto", "max_memory": {0: "20GiB", 1: "20GiB", "cpu": "64GiB"}})
    assert placement(LoadOptions(device="cuda:1")) == ("cuda:1", {"device_map": {"": "cuda:1"}})
    assert placement(LoadOptions(device_map="balanced")) == ("map", {"device_map": "balanced"})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert placement(LoadOptions()) == ("cpu", {})
    with pytest.raises(ValueError, match="DEVICE=SIZE"):
        parse_max_memory("20GiB")


CUSTOM_CONFIG = '''
from transformers import GPT2Config


class ContamTinyConfig(GPT2Config):
    model_type = "contam-tiny"
'''
CUSTOM_MODEL = '''
from transformers import GPT2LMHeadModel

from .configuration_contam_tiny import ContamTinyConfig


class ContamTinyForCausalLM(GPT2LMHeadModel):
    config_class = ContamTinyConfig
'''


def test_remote_code_runs_only_when_asked(tmp_path, monkeypatch, capsys):
    import transformers.dynamic_module_utils as dyn

    monkeypatch.setattr(dyn, "HF_MODULES_CACHE", str(tmp_path / "hf_modules"))  # not the user's cache
    folder = mt.untrained_checkpoint(tmp_path / "custom")
    (folder / "configuration_contam_tiny.py").write_text(CUSTOM_CONFIG)
    (folder / "modeling_contam_tiny.py").write_text(CUSTOM_MODEL)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(model_type="contam-tiny", architectures=["ContamTinyForCausalLM"], auto_map={
        "AutoConfig": "configuration_contam_tiny.ContamTinyConfig",
        "AutoModelForCausalLM": "modeling_contam_tiny.ContamTinyForCausalLM",
    })
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="--trust-remote-code"):
        load_checkpoint(folder)
    assert main(["probe", "--checkpoint", str(folder), "--out", str(tmp_path / "o")]) == 2
    assert "--trust-remote-code" in capsys.readouterr().err
    lm = load_checkpoint(folder, LoadOptions(trust_remote_code=True))
    assert type(lm.model).__name__ == "ContamTinyForCausalLM" and lm.trust_remote_code
    assert np.isfinite(score_texts(lm, TEXTS[:1])[0].nll)


def test_the_vllm_backend_is_refused_with_a_reason_where_it_cannot_run(llama, tmp_path, capsys):
    reason = unavailable_reason()
    if reason is None:
        pytest.skip("vllm and a CUDA GPU are present: test_vllm_generation_equals_transformers covers the backend")
    assert "vllm" in reason and ("not installed" in reason or "no CUDA GPU" in reason)
    with pytest.raises(BackendUnavailable):
        load_checkpoint(llama, LoadOptions(generation_backend="vllm"))
    assert main(["probe", "--checkpoint", str(llama), "--out", str(tmp_path / "o"), "--generation-backend", "vllm"]) == 2
    assert "vllm" in capsys.readouterr().err


def test_vllm_generation_equals_transformers(tmp_path):
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"vLLM backend not testable here: {reason}")
    from contam_assets.model.generation import generate_greedy

    ckpt = mt.trained_checkpoint(tmp_path / "model_tiny")
    prompts = [mt.humaneval()[t]["prompt"] for t in mt.RECITED]
    hf = generate_greedy(load_checkpoint(ckpt, LoadOptions(device="cuda")), prompts, 48)
    vl = generate_greedy(load_checkpoint(ckpt, LoadOptions(device="cuda", generation_backend="vllm")), prompts, 48)
    assert [g.text for g in vl] == [g.text for g in hf]


def test_progress_logs_items_per_second_and_an_eta():
    now = [100.0]
    lines: list[str] = []
    progress = Progress("scoring gsm8k-test", 1319, lines.append, every_s=15, clock=lambda: now[0])
    now[0] += 10
    progress.advance(100)  # within 15 s of the start: quiet
    now[0] += 10
    progress.advance(100)
    assert lines == ["scoring gsm8k-test: 200/1319 (15%), 10.00 items/s, ETA 1m52s"]
    now[0] += 111.9
    progress.advance(1119)
    assert lines[-1] == "scoring gsm8k-test: 1319/1319 (100%), 10.00 items/s, done in 2m12s"
    assert format_seconds(7322) == "2h02m" and format_seconds(float("inf")) == "?"
