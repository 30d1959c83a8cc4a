"""The model side's scoring on a GPU with a checkpoint of real size: throughput, peak memory and parity.

Builds a Llama checkpoint of TinyLlama-1.1B's shape (22 layers, hidden 2048, grouped-query attention) with
random weights and a BPE tokenizer trained on GSM8K train (no download), saves it as a real folder, loads it
through the probes' own loader (`--device auto`: accelerate's device map over the visible GPUs) and scores
GSM8K test, GSM8K train and Skywork's reference set in both conventions (`score_sets`, as `contam probe`
does). Reports items/s, tokens/s and peak GPU memory, and checks parity on the first `--parity` test items:
the same checkpoint in float32 on the GPU against float32 on the CPU (per-item mean loss), the GPU's
packed batches against one item at a time, and the bfloat16 model's drift from float32.

    python benchmarks/probe_gpu.py --data ../shared/data --json probe_gpu.json

Needs CUDA; without it the script says so and exits 2. `--device cpu --shape tiny` runs the same steps on the
CPU with a 2-layer model (the suite's check of this script).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = {  # name -> LlamaConfig keywords
    "tinyllama-1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                           num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=1000, max_position_embeddings=512),
}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def build_checkpoint(folder: Path, shape: str, data: Path, device: str) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    os.environ.setdefault("CONTAM_SHARED_DATA", str(data))
    from contam_assets.testing.model_tiny import save, train_llama_tokenizer

    tok = train_llama_tokenizer(vocab_size=4000)
    torch.manual_seed(0)
    dims = {**SHAPES[shape], "vocab_size": max(SHAPES[shape]["vocab_size"], len(tok))}
    cfg = LlamaConfig(**dims, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      tie_word_embeddings=False)
    with torch.device(device):  # random init on the GPU: seconds, not minutes
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.to("cpu")
    return save(folder, model, tok)


def mean_losses(scores) -> list[float]:
    return [s.nll / max(1, s.n_predicted) for s in scores]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tinyllama-1.1b")
    ap.add_argument("--work", type=Path, default=Path("/tmp/probe_gpu"))
    ap.add_argument("--parity", type=int, default=32, help="test items compared across devices and dtypes")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--limit", type=int, default=None, help="first N items of each set (default: every item)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: the script's own check, no GPU")
    args = ap.parse_args(argv)

    import torch

    gpu = args.device == "cuda"
    if gpu and not torch.cuda.is_available():
        print("probe_gpu: no CUDA device visible; this benchmark measures the GPU path", file=sys.stderr)
        return 2
    from contam_assets.model.loader import LoadOptions, describe, load_checkpoint
    from contam_assets.model.scoring import score_texts
    from contam_assets.model.sequences import score_sets

    t0 = time.perf_counter()
    ckpt = build_checkpoint(args.work / args.shape, args.shape, args.data, args.device)
    built_s = time.perf_counter() - t0
    test = [f"{r['question']} {r['answer']}" for r in read_jsonl(args.data / "gsm8k_test.jsonl")]
    train = [f"{r['question']} {r['answer']}" for r in read_jsonl(args.data / "gsm8k_train.jsonl")][: len(test)]
    ref_rows = read_jsonl(args.data / "skywork_mock_gsm8k_eval_1419.jsonl")
    ref = [f"{r['question']} {r['answer']}" for r in ref_rows]
    sets = {"gsm8k-test": test[: args.limit], "gsm8k-train": train[: args.limit], "gsm8k-ref": ref[: args.limit]}

    sync = torch.cuda.synchronize if gpu else (lambda: None)
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    lm = load_checkpoint(ckpt, LoadOptions(device="auto" if gpu else "cpu"))  # dtype auto: the checkpoint's bfloat16
    load_s = time.perf_counter() - t0
    where = describe(lm)
    score_sets(lm, {"warm-up": test[:8]})
    sync()
    t0 = time.perf_counter()
    items = score_sets(lm, sets)
    sync()
    score_s = time.perf_counter() - t0
    n_items = sum(len(v) for v in sets.values())
    n_tokens = sum(i.n_tokens + (0 if i.same_tokens else i.sk_tokens) for i in items)
    peak = torch.cuda.max_memory_allocated() if gpu else 0
    bf16 = mean_losses(score_texts(lm, test[: args.parity]))
    del lm
    gpu32 = load_checkpoint(ckpt, LoadOptions(device=args.device, dtype="float32"))
    packed = mean_losses(score_texts(gpu32, test[: args.parity]))
    single_lm = load_checkpoint(ckpt, LoadOptions(device=args.device, dtype="float32", token_budget=1))
    single = mean_losses(score_texts(single_lm, test[: args.parity]))
    del gpu32, single_lm
    cpu32 = load_checkpoint(ckpt, LoadOptions(device="cpu", dtype="float32"))
    cpu = mean_losses(score_texts(cpu32, test[: args.parity]))

    def max_diff(a, b):
        return max(abs(x - y) for x, y in zip(a, b))

    result = {
        "device": torch.cuda.get_device_name(0) if gpu else "cpu",
        "torch": torch.__version__,
        "shape": args.shape,
        "parameters": sum(p.numel() for p in cpu32.model.parameters()),
        "placement": where,
        "build_s": round(built_s, 1),
        "load_s": round(load_s, 1),
        "items": n_items,
        "tokens_scored": n_tokens,
        "score_s": round(score_s, 2),
        "items_per_s": round(n_items / score_s, 1),
        "tokens_per_s": round(n_tokens / score_s),
        "peak_gpu_memory_gib": round(peak / 2**30, 2),
        "parity_items": args.parity,
        "max_diff_device_fp32_vs_cpu_fp32": max_diff(packed, cpu),
        "max_diff_packed_vs_single_fp32": max_diff(packed, single),
        "max_diff_bf16_vs_fp32": max_diff(bf16, cpu),
        "mean_loss_fp32": sum(cpu) / len(cpu),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    ok = result["max_diff_device_fp32_vs_cpu_fp32"] < 1e-3 and result["max_diff_packed_vs_single_fp32"] < 1e-3
    print("parity:", "ok" if ok else "FAILED", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
