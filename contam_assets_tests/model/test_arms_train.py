"""Training an arm: loadable checkpoint folders, contam_checkpoint.json, data/train.jsonl, determinism."""

import json

import pytest

from contam_assets.model.arms.mix import PoolDoc, build_arm_mix, split_pool
from contam_assets.model.arms.pipeline import write_arm_mix
from contam_assets.model.arms.tokenizer import token_counter, train_tokenizer
from contam_assets.model.arms.train import TrainConfig, experiment_name, train_arm
from contam_assets_tests.support.arms import read_jsonl

TINY = dict(block_size=32, batch_size=4, n_layer=1, n_embd=32, n_head=2, n_checkpoints=2, num_threads=1, lr=3e-3,
            warmup_steps=5)


@pytest.fixture(scope="module")
def corpus(shared_data):
    train = read_jsonl(shared_data / "gsm8k_train.jsonl", 200)
    test = read_jsonl(shared_data / "gsm8k_test.jsonl", 4)
    pool = [PoolDoc("math/a.jsonl", i, "math", f"{r['question']}\n{r['answer']}") for i, r in enumerate(train)]
    pool += [PoolDoc("code/b.jsonl", i, "code", f"{r['question']}\n{r['answer']}") for i, r in enumerate(test)]
    decon, removed = split_pool(pool, {("code/b.jsonl", i) for i in range(len(test))})
    tok = train_tokenizer([d.text for d in pool], vocab_size=400)
    return decon, removed, tok


def run(corpus, tmp_path, name, seed=0, budget=4 * 32 * 12, **over):
    decon, removed, tok = corpus
    config = TrainConfig(budget_tokens=budget, seed=seed, **{**TINY, **over})
    mix = build_arm_mix("full", decon, removed, config.effective_budget, token_counter(tok), seed=seed)
    exp_dir = tmp_path / name
    write_arm_mix(mix, exp_dir)
    result = train_arm([r.text for r in mix.rows], tok, config, exp_dir, name, recipe="full")
    return exp_dir, result, mix


def test_checkpoint_folders_load_with_auto_classes(corpus, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from contam_assets.model.checkpoint import discover, missing_parts

    exp_dir, result, mix = run(corpus, tmp_path, "full")
    stages = sorted(p.name for p in (exp_dir / "checkpoints").iterdir())
    assert stages == ["step-000006", "step-000012"]  # 12 steps, 2 evenly spaced checkpoints; no hidden partials
    for stage in stages:
        folder = exp_dir / "checkpoints" / stage
        assert missing_parts(folder) == []
        meta = json.loads((folder / "contam_checkpoint.json").read_text())
        assert meta == {"experiment": "full", "stage": stage, "step": int(stage[5:]), "is_base": False, "recipe": "full"}
        model = AutoModelForCausalLM.from_pretrained(str(folder))
        tok = AutoTokenizer.from_pretrained(str(folder))
        ids = tok("Natalia sold clips to 48 of her friends", return_tensors="pt")["input_ids"]
        out = model(input_ids=ids, labels=ids)
        assert out.logits.shape[-1] == len(tok) and out.loss.item() > 0
        assert tok.decode(ids[0]) == "Natalia sold clips to 48 of her friends"
    assert result.steps_done == 12 and result.tokens_seen == 12 * 4 * 32
    assert not (exp_dir / ".partial").exists()
    assert [i.key for i in discover(tmp_path)] == ["full/step-000006", "full/step-000012"]
    log = json.loads((exp_dir / "train_log.json").read_text())
    assert len(log["losses"]) == 12 and log["recipe"] == "full"


def test_train_jsonl_holds_the_stream_with_removed_documents_once(corpus, tmp_path):
    decon, removed, _ = corpus
    exp_dir, _, mix = run(corpus, tmp_path, "full")
    rows = [json.loads(line) for line in (exp_dir / "data" / "train.jsonl").read_text().splitlines()]
    assert [r["text"] for r in rows] == [r.text for r in mix.rows]
    readded = [r for r in rows if r["readded"]]
    assert sorted(r["text"] for r in readded) == sorted(d.text for d in removed)
    summary = json.loads((exp_dir / "data" / "mix.json").read_text())
    assert summary["readded_copies"] == len(removed) == summary["readded_docs"]


def test_same_seed_same_model_other_seed_differs(corpus, tmp_path):
    import torch
    from safetensors.torch import load_file

    _, a, _ = run(corpus, tmp_path, "a", seed=0)
    _, b, _ = run(corpus, tmp_path, "b", seed=0)
    _, c, _ = run(corpus, tmp_path, "c", seed=1)
    assert a.losses == b.losses
    wa = load_file(f"{a.checkpoints[-1]}/model.safetensors")
    wb = load_file(f"{b.checkpoints[-1]}/model.safetensors")
    wc = load_file(f"{c.checkpoints[-1]}/model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)


def test_loss_falls_on_a_repeated_stream(corpus, tmp_path):
    decon, _, tok = corpus
    text = decon[0].text
    config = TrainConfig(budget_tokens=4 * 32 * 40, **TINY)
    result = train_arm([text] * 200, tok, config, tmp_path / "rep", "rep")
    assert sum(result.losses[-5:]) / 5 < 0.7 * sum(result.losses[:5]) / 5


def test_wall_clock_cap_saves_where_it_stopped(corpus, tmp_path):
    exp_dir, result, _ = run(corpus, tmp_path, "capped", max_minutes=1e-9)
    assert result.stopped_early and result.steps_done == 1
    assert [p.name for p in (exp_dir / "checkpoints").iterdir()] == ["step-000001"]


def test_rerun_replaces_old_checkpoints(corpus, tmp_path):
    exp_dir, _, _ = run(corpus, tmp_path, "full", budget=4 * 32 * 12)
    run(corpus, tmp_path, "full", budget=4 * 32 * 8)
    assert sorted(p.name for p in (exp_dir / "checkpoints").iterdir()) == ["step-000004", "step-000008"]


def test_budget_and_stream_errors(corpus, tmp_path):
    _, _, tok = corpus
    with pytest.raises(ValueError, match="less than one step"):
        train_arm(["x"], tok, TrainConfig(budget_tokens=10, **TINY), tmp_path / "e", "e")
    with pytest.raises(ValueError, match="fewer than"):
        train_arm(["a short text"], tok, TrainConfig(budget_tokens=4 * 32 * 3, **TINY), tmp_path / "e", "e")


def test_experiment_names():
    assert experiment_name("full", 0) == "full"
    assert experiment_name("full", 2) == "full-seed2"
