"""probe_run.sequence_items / sequence_metrics: the sequence probes on chosen sets, as the arms demo uses them."""

from contam_assets.model.loader import load_checkpoint
from contam_assets.model.ppl_probe import token_loss
from contam_assets.model.probe_inputs import ProbeOptions
from contam_assets.model.probe_run import sequence_items, sequence_metrics, sequence_probes
from contam_assets.testing import model_tiny as mt


def test_chosen_sets_give_the_probe_json_numbers(tmp_path, shared_data):
    lm = load_checkpoint(mt.untrained_checkpoint(tmp_path / "ckpt"))
    opts = ProbeOptions(benchmarks_dir=shared_data, limit=3)
    items, inputs = sequence_items(lm, opts, sets=("gsm8k-test", "gsm8k-ref", "no-such-set"))
    assert sorted({it.dataset for it in items}) == ["gsm8k-ref", "gsm8k-test"]
    assert [it.item for it in items if it.dataset == "gsm8k-test"] == ["0", "1", "2"]
    assert "mbpp" in inputs.values  # every set is read; only the chosen ones are scored
    m = sequence_metrics(items, opts.k)
    test = [it for it in items if it.dataset == "gsm8k-test"]
    assert m["loss/gsm8k-test"] == token_loss(test)
    assert m["delta1"] == m["loss/gsm8k-test"] - m["loss/gsm8k-ref"]
    assert m["delta2"] is None and m["n/gsm8k-train"] == 0.0  # train not chosen: no Δ2 rather than a wrong one
    # The full path behind `contam probe` gives the same numbers for the same sets.
    full = sequence_probes(lm, opts, {"skipped": {}, "bad_rows": {}}, None)
    for key in ("gsm8k-test-ppl", "gsm8k-ref-ppl", "delta1", "mink/auc", "minkpp/auc", "bpb/gsm8k-test"):
        assert abs(full[key] - m[key]) < 1e-9, key
