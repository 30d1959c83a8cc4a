"""``contam probe``: run the model-side probes on one checkpoint folder and write OUT/probe.json."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from contam_assets.settings import add_flag


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "probe",
        help="probe one checkpoint for benchmark contamination (PPL, bits per byte, Min-K%%, recitation, fresh gap)",
        description="Load a local Hugging Face checkpoint folder and write OUT/probe.json.",
    )
    p.add_argument("--checkpoint", required=True, help="checkpoint folder (config, weights, tokenizer)")
    add_flag(p, "benchmarks_dir", "--benchmarks", dest="benchmarks")
    add_flag(p, "out_dir", "--out", dest="out", doc="output folder")
    add_flag(p, "probe_limit", "--limit", dest="limit", doc="score only the first N items of every set (0: every item)")
    add_flag(p, "fresh_set", "--fresh", dest="fresh",
             doc="fresh GSM-style JSONL for the GSM8K-vs-fresh accuracy gap (e.g. GSM-Hard)")
    add_flag(p, "probe_ref", "--ref", dest="ref", doc="GSM8K reference set (\"\": Skywork's mock file in the benchmark folder)")
    add_flag(p, "baseline_checkpoint",
                   doc="a model that never saw the data: Min-K%% AUCs and Δ also relative to it (calibrated/*); "
                        "its scores are cached in OUT/probes/baseline")
    add_flag(p, "tasks_dir")
    p.add_argument("--k", type=float, default=0.2, help="Min-K%% fraction (default 0.2)")
    p.add_argument("--n-shot", type=int, default=5, help="worked GSM8K examples in the fresh-gap prompt (default 5)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="cap on generated tokens per answer (default 256 for GSM, 384 for code)")
    add_flag(p, "probe_execute", "--execute", dest="execute",
             doc="run generated code with its tests for pass@1, in a bubblewrap sandbox (refused without bwrap)")
    add_flag(p, "device",
                   doc="auto (every GPU through accelerate's device_map, else CPU) | cpu | cuda | cuda:N")
    add_flag(p, "device_map",
                   doc="accelerate strategy instead of --device: auto | balanced | balanced_low_0 | sequential")
    add_flag(p, "max_memory",
                   doc="per-device caps for the device map, e.g. 0=20GiB,1=20GiB,cpu=64GiB")
    p.add_argument("--offload-folder", default=None, help="folder for weights that fit on no device (device map)")
    add_flag(p, "dtype",
                   doc="auto (the checkpoint's own, from its config) | float32 | bfloat16 | float16")
    add_flag(p, "trust_remote_code",
                   doc="run modelling code shipped in the checkpoint folder (config.json auto_map: Qwen-1, Baichuan, ...)")
    add_flag(p, "generation_backend",
                   choices=("transformers", "vllm"), doc="generation probes on transformers (default) or vLLM")
    p.add_argument("--skywork-batch-size", type=int, default=1,
                   help="batch size of Skywork's eval_loss.py to reproduce (default 1: the loss as defined; >1 adds "
                        "the script's EOS term for texts shorter than their batch)")
    p.add_argument("--exec-workers", type=int, default=2, help="generated programs judged at a time (--execute)")
    add_flag(p, "token_budget")
    p.add_argument("--hub", action="store_true", help="allow --checkpoint to name a Hugging Face Hub model (downloads)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from contam_assets.cli import CliError
    from contam_assets.model.checkpoint import CheckpointError
    from contam_assets.model.loader import LoadOptions
    from contam_assets.model.probe_inputs import ProbeOptions
    from contam_assets.model.probe_run import run_probes

    benchmarks = Path(args.benchmarks).resolve() if args.benchmarks else None
    if benchmarks is not None and not benchmarks.is_dir():
        raise CliError(f"benchmark folder not found: {benchmarks}")
    if args.limit is not None and args.limit < 0:
        raise CliError("--limit must be at least 0 (0: every item)")
    if args.fresh and not Path(args.fresh).is_file():
        raise CliError(f"fresh set not found: {args.fresh}")
    if args.baseline_checkpoint and not Path(args.baseline_checkpoint).is_dir():
        raise CliError(f"baseline checkpoint folder not found: {args.baseline_checkpoint}")
    if not args.hub and not Path(args.checkpoint).is_dir():
        raise CliError(f"checkpoint folder not found: {args.checkpoint} (use --hub for a Hub model id)")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise CliError("--max-new-tokens must be at least 1")
    if args.execute:
        from contam_assets.model.sandbox import sandbox_status

        status = sandbox_status()
        if not status.ok:  # refuse rather than run generated code unisolated
            raise CliError(f"--execute needs the sandbox: {status.reason}")
    caps = {}
    if args.max_new_tokens:
        caps = {"gsm_max_new_tokens": args.max_new_tokens, "code_max_new_tokens": args.max_new_tokens}
    opts = ProbeOptions(
        benchmarks_dir=benchmarks,
        tasks_dir=Path(args.tasks_dir) if args.tasks_dir else None,
        limit=args.limit or None,
        ref_file=args.ref or None,
        fresh_file=args.fresh or None,
        baseline_checkpoint=args.baseline_checkpoint or None,
        k=args.k,
        n_shot=args.n_shot,
        execute=args.execute,
        exec_workers=args.exec_workers,
        skywork_batch_size=args.skywork_batch_size,
        **caps,
    )
    if args.skywork_batch_size < 1 or args.exec_workers < 1:
        raise CliError("--skywork-batch-size and --exec-workers must be at least 1")
    load = LoadOptions(
        device=args.device, dtype=args.dtype, token_budget=args.token_budget, allow_hub=args.hub,
        trust_remote_code=args.trust_remote_code, device_map=args.device_map or None, max_memory=args.max_memory or None,
        offload_folder=args.offload_folder, generation_backend=args.generation_backend,
    )
    out = Path(args.out)
    try:
        result = run_probes(args.checkpoint, opts, load, log=lambda msg: print(msg, file=sys.stderr, flush=True),
                            cache_dir=out / "probes" / "baseline")
    except (CheckpointError, ValueError) as exc:
        raise CliError(str(exc)) from exc
    out.mkdir(parents=True, exist_ok=True)
    path = out / "probe.json"
    path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    _summary(result, path)
    return 0


def _summary(result: dict, path: Path) -> None:
    keys = ("gsm8k-train-ppl", "gsm8k-test-ppl", "gsm8k-ref-ppl", "delta1", "delta2", "bpb/gsm8k-test", "mink/auc",
            "minkpp/auc", "recitation/humaneval/exact", "recitation/humaneval/pass@1", "fresh/gap",
            "calibrated/delta1", "calibrated/mink/auc", "calibrated/minkpp/auc", "calibrated/llr/auc")
    for k in keys:
        if k.startswith("calibrated/") and k not in result:
            continue
        v = result.get(k)
        print(f"{k:28s} {'-' if v is None else f'{v:.4f}'}")
    for name, reason in result["skipped"].items():
        print(f"skipped {name}: {reason}")
    print(f"wrote {path}")
