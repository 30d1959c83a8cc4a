"""--baseline-checkpoint: membership and Δ relative to a model that never saw the data.

Three tiny GPT-2s learn GSM8K's style from the same 500 GSM8K train items:
the baseline (seed 1), a clean target (seed 2) and a leaked target (seed 2,
plus the first 16 GSM8K test items).  GSM8K test and Skywork's reference set
differ in style, so even the clean target separates them (raw Min-K% AUC well
above 0.5, Δ1 clearly negative); relative to the baseline it does not, while
the leaked one still does.
"""

from __future__ import annotations

import json

import pytest

from contam_assets.cli import main
from contam_assets.testing import model_tiny as mt

LIMIT = 16


@pytest.fixture(scope="module")
def models(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("calibration")
    tok = mt.tokenizer_cached()

    def enc(row):
        return tok(f"{row['question']} {row['answer']}")["input_ids"][:160] + [tok.eos_token_id]

    style = [enc(r) for r in mt.jsonl("gsm8k_train.jsonl")[:500]]
    leaked = [enc(r) for r in mt.jsonl("gsm8k_test.jsonl")[:LIMIT]]

    def build(name, seqs, seed):
        model = mt.new_model(tok, n_embd=64, n_layer=2, seed=seed)
        mt.train(model, seqs, steps=120, lr=3e-3, seed=seed)
        return mt.save(root / "experiments" / name / "checkpoints" / "final", model, tok)

    return {"baseline": build("baseline", style, 1), "clean": build("clean", style, 2),
            "leaked": build("leaked", style + 6 * leaked, 2)}


def _probe(models, target, shared_data, out):
    rc = main(["probe", "--checkpoint", str(models[target]), "--baseline-checkpoint", str(models["baseline"]),
               "--benchmarks", str(shared_data), "--out", str(out), "--limit", str(LIMIT), "--max-new-tokens", "2"])
    assert rc == 0
    return json.loads((out / "probe.json").read_text())


def test_calibration_removes_the_style_gap_and_keeps_the_leak(models, shared_data, tmp_path):
    out = tmp_path / "out"
    clean = _probe(models, "clean", shared_data, out)
    assert clean["baseline"]["cached"] is False and clean["baseline/same-tokenizer"] == 1.0
    # Raw: the clean model looks contaminated, because the sets differ in style.
    assert clean["mink/auc"] > 0.65 and clean["delta1"] < -0.3
    assert clean["baseline/mink/auc"] > 0.65  # the baseline sees the same style gap ...
    # ... so relative to it, the clean target shows nothing.
    assert abs(clean["calibrated/mink/auc"] - 0.5) < 0.2 and abs(clean["calibrated/delta1"]) < 0.2
    assert clean["calibrated/delta1"] == pytest.approx(clean["delta1"] - clean["baseline/delta1"])

    leaked = _probe(models, "leaked", shared_data, out)
    assert leaked["baseline"]["cached"] is True  # the baseline's scores were reused, not recomputed
    assert leaked["calibrated/mink/auc"] > 0.9 and leaked["calibrated/llr/auc"] > 0.9
    assert leaked["calibrated/delta1"] < -0.3
    assert leaked["baseline/delta1"] == clean["baseline/delta1"]


def test_a_missing_baseline_folder_is_a_clear_error(models, tmp_path, capsys):
    assert main(["probe", "--checkpoint", str(models["clean"]), "--baseline-checkpoint", str(tmp_path / "none"),
                 "--out", str(tmp_path / "o")]) == 2
    assert "baseline checkpoint folder not found" in capsys.readouterr().err
