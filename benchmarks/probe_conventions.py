"""Δ1/Δ2 in Skywork's convention against the BOS-prefixed one, on a tiny Llama whose tokenizer prepends <s>.

Builds the test suite's tiny Llama (2 layers, 64 wide, a BPE tokenizer with
Llama's special tokens), trains it briefly on GSM8K train items 1000-1399 (with
<s>, as Llamas are trained), then scores the first ``--limit`` items of GSM8K
train, GSM8K test and Skywork's reference set and prints, side by side:

- Skywork's Δ (``add_special_tokens=False``; batch size 1 and eval_loss.py's
  batch size 16, which charges the EOS after shorter texts),
- the same token-weighted loss on BOS-prefixed ids (OpenCompass's tokenization, not Skywork's),
- OpenCompass's ``gsm8k-*-ppl`` (BOS-prefixed, per-sample, averaged),
- scoring throughput.

    python benchmarks/probe_conventions.py [--limit 400] [--steps 120]

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

from contam_assets.model.loader import load_checkpoint  # noqa: E402
from contam_assets.model.ppl_probe import SETS, opencompass_token_loss, ppl_metrics, skywork_loss  # noqa: E402
from contam_assets.model.probe_inputs import ProbeOptions  # noqa: E402
from contam_assets.model.probe_run import sequence_items  # noqa: E402
from contam_assets.model.sequences import by_dataset  # noqa: E402
from contam_assets.testing import model_tiny as mt  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=400)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--benchmarks", default=str(ROOT.parent / "shared" / "data"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        ckpt = mt.trained_llama_checkpoint(Path(tmp) / "llama", steps=args.steps)
        t1 = time.monotonic()
        lm = load_checkpoint(ckpt)
        opts = ProbeOptions(benchmarks_dir=Path(args.benchmarks), limit=args.limit)
        items, _ = sequence_items(lm, opts, sets=SETS)
        t2 = time.monotonic()
    groups = by_dataset(items)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"tiny Llama: trained {args.steps} steps in {t1 - t0:.0f} s; {len(items)} items scored in both conventions "
          f"in {t2 - t1:.1f} s ({len(items) / (t2 - t1):.1f} items/s)")
    print("| set | L Skywork (batch 1) | L Skywork (batch 16) | L with <s> | OpenCompass ppl |")
    print("|---|---:|---:|---:|---:|")
    for name in SETS:
        g = groups[name]
        oc = ppl_metrics(g)[f"{name}-ppl"]
        print(f"| {name} | {skywork_loss(g, 1):.4f} | {skywork_loss(g, 16):.4f} | {opencompass_token_loss(g):.4f} | {oc:.4f} |")
    loss = {n: {"b1": skywork_loss(groups[n], 1), "b16": skywork_loss(groups[n], 16),
                "bos": opencompass_token_loss(groups[n])} for n in SETS}
    for key, label in (("b1", "Skywork, batch 1"), ("b16", "Skywork, batch 16"), ("bos", "with <s> (not Skywork's)")):
        d1 = loss["gsm8k-test"][key] - loss["gsm8k-ref"][key]
        d2 = loss["gsm8k-test"][key] - loss["gsm8k-train"][key]
        print(f"Δ1 {d1:+.4f}  Δ2 {d2:+.4f}  ({label})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
