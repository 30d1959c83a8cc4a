"""What --baseline-checkpoint changes: raw against calibrated membership and Δ1, for a clean and a leaked model.

Three tiny GPT-2s (2 layers, 64 wide, the test suite's tokenizer) learn
GSM8K's style from the same GSM8K train items: the baseline (seed 1), a
clean target (seed 2) and a leaked target (seed 2, plus the first ``--limit``
GSM8K test items six times).  All three are scored on the first ``--limit``
items of GSM8K train, GSM8K test and Skywork's reference set; printed: raw
Δ1, Min-K% and Min-K%++ AUCs and their calibrated forms (target − baseline).

    python benchmarks/baseline_calibration.py [--limit 16] [--train 600] [--steps 150]

Figures go to docs/probes.md (with the machine).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from contam_assets.model.baseline import calibrated_metrics  # noqa: E402
from contam_assets.model.loader import load_checkpoint  # noqa: E402
from contam_assets.model.ppl_probe import SETS  # noqa: E402
from contam_assets.model.probe_inputs import ProbeOptions  # noqa: E402
from contam_assets.model.probe_run import sequence_items, sequence_metrics  # noqa: E402
from contam_assets.testing import model_tiny as mt  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=16)
    ap.add_argument("--train", type=int, default=600)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--benchmarks", default=str(ROOT.parent / "shared" / "data"))
    args = ap.parse_args()
    tok = mt.tokenizer_cached()

    def enc(row):
        return tok(f"{row['question']} {row['answer']}")["input_ids"][:160] + [tok.eos_token_id]

    style = [enc(r) for r in mt.jsonl("gsm8k_train.jsonl")[: args.train]]
    leaked = [enc(r) for r in mt.jsonl("gsm8k_test.jsonl")[: args.limit]]
    opts = ProbeOptions(benchmarks_dir=Path(args.benchmarks), limit=args.limit)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        scored = {}
        for name, seqs, seed in (("baseline", style, 1), ("clean", style, 2), ("leaked", style + 6 * leaked, 2)):
            model = mt.new_model(tok, n_embd=64, n_layer=2, seed=seed)
            mt.train(model, seqs, steps=args.steps, lr=3e-3, seed=seed)
            folder = mt.save(Path(tmp) / name, model, tok)
            scored[name] = sequence_items(load_checkpoint(folder), opts, sets=SETS)[0]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"{time.monotonic() - started:.0f} s")
    print("| model | Δ1 | calibrated Δ1 | Min-K% AUC | calibrated | Min-K%++ AUC | calibrated | LLR/byte AUC |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in ("baseline", "clean", "leaked"):
        raw = sequence_metrics(scored[name], opts.k)
        cal = calibrated_metrics(scored[name], scored["baseline"], opts.k, 1, True)
        print(f"| {name} | {raw['delta1']:+.3f} | {cal['calibrated/delta1']:+.3f} | {raw['mink/auc']:.3f} | "
              f"{cal['calibrated/mink/auc']:.3f} | {raw['minkpp/auc']:.3f} | {cal['calibrated/minkpp/auc']:.3f} | "
              f"{cal['calibrated/llr/auc']:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
