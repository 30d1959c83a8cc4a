"""Positive control for the proxy arms, end to end: does the `full` arm show GSM8K test leakage?

Every step goes through the project's own tools:

1. pool: a small synthetic pool (host text + GSM8K test items planted in some
   documents) written as shards, with ``planted.json`` (planted test ids, the
   document holding each one);
2. ``contam detect --pool --out --benchmarks --tasks-dir`` against a task folder
   holding a GSM8K spec with the *test split only*, so the removals are the
   documents holding a test item (checked against ``planted.json``);
3. ``contam arms --arms A --seed S`` for every (arm, seed), a few in parallel;
4. the official probes (``contam_assets.model.probe_run``: the functions behind
   ``contam probe``) on each arm's final checkpoint: the OpenCompass PPL probe
   (``gsm8k-test-ppl``, ``gsm8k-ref-ppl``, token-weighted ``delta1``), bits per
   byte, Min-K% / Min-K%++ ROC AUC between GSM8K test and the reference set;
   and, from the same per-item scores, planted vs never-planted test items
   (loss, and Min-K% / Min-K%++ AUC within GSM8K test) and the loss of
   planted items by how often the arm's stream read their document.

Host text: GSM8K *train* problems (math pages, instruction rows), docstrings
and source of the Python standard library (web-like prose, code) and
data/demo/host_text.md.  Nothing is downloaded.

    python benchmarks/arms_demo.py --out /tmp/arms_demo          # the run in docs/arms.md
    python benchmarks/arms_demo.py --out /tmp/arms_demo --runs decontaminated=0,1 full=0,1
    python benchmarks/arms_demo.py --out /tmp/arms_demo --pool-only   # just <out>/pool and planted.json

Writes <out>/pool/, <out>/planted.json, <out>/tasks/gsm8k.toml, <out>/out/ (the
`contam detect` / `contam arms` output folder: contam.duckdb, mix/, arms/),
<out>/experiments/<arm>[-seedN]/ (checkpoints, data/train.jsonl),
<out>/logs/, <out>/probes/<experiment>.json, <out>/results.json and <out>/results.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path

from arms_pool import build_pool, read_jsonl, write_pool  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from contam_assets.model.arms.mix import ARMS  # noqa: E402
from contam_assets.model.arms.train import TrainConfig, experiment_name  # noqa: E402

SHARED = Path(os.environ.get("CONTAM_SHARED_DATA", ROOT.parent / "shared" / "data"))
DEFAULT_RUNS = ("decontaminated=0,1,2", "full=0,1,2", "natural=0,1", "target_exposure=0,1")
PROBE_SETS = ("gsm8k-test", "gsm8k-ref")

# The registry spec of GSM8K with its test split only: the detector then removes
# the documents holding a test item and leaves the GSM8K *train* problems in the mix.
TEST_ONLY_GSM8K = """\
name = "gsm8k"
kind = "qa"
language = "en"
description = "GSM8K, test split only (arms demo: remove test-item copies, keep the train problems)."

[fields]
question = "question"
answer = "answer"

[[splits]]
name = "test"
file = "gsm8k_test.jsonl"
"""


# --- data side ---------------------------------------------------------------------------------------------


def contam(args: list[str], log_path: Path) -> float:
    """Run ``contam ARGS`` (this interpreter's package) with output to ``log_path``; returns the wall seconds."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as fh:
        rc = subprocess.run([sys.executable, "-m", "contam_assets.cli", *args], stdout=fh, stderr=subprocess.STDOUT,
                            cwd=ROOT).returncode
    if rc != 0:
        tail = log_path.read_text(encoding="utf-8", errors="replace")[-2000:]
        raise RuntimeError(f"contam {args[0]} failed (exit {rc}); log {log_path}:\n{tail}")
    return time.monotonic() - t


def check_removals(db_path: Path, planted_docs: set[tuple[str, int]], planted_ids: set[int]) -> dict:
    """Compare what `contam detect` removed / flagged with what was planted."""
    from contam_assets import store

    with store.connect(db_path, read_only=True) as con:
        removed = {(str(s), int(l)) for s, l in con.execute("select distinct shard, line from removals").fetchall()}
        flagged = {int(i) for (i,) in con.execute(
            "select distinct instance_index from matches where flagged and task = 'gsm8k' and split = 'test'").fetchall()}
    return {
        "removed_docs": len(removed),
        "planted_docs": len(planted_docs),
        "planted_docs_missed": len(planted_docs - removed),
        "removed_not_planted": len(removed - planted_docs),
        "planted_items_flagged": len(flagged & planted_ids),
        "unplanted_items_flagged": len(flagged - planted_ids),
    }


# --- one (arm, seed): train with `contam arms`, then the official probes -----------------------------------


@dataclass(frozen=True)
class Job:
    arm: str
    seed: int
    root: Path  # the demo folder
    arms_args: tuple[str, ...]  # model / budget options passed to `contam arms`
    threads: int
    token_budget: int
    k: float
    ref_file: str | None
    limit: int | None
    reuse: bool

    @property
    def experiment(self) -> str:
        return experiment_name(self.arm, self.seed)


def final_checkpoint(experiment_dir: Path) -> Path:
    stages = sorted(p for p in (experiment_dir / "checkpoints").glob("step-*") if (p / "contam_checkpoint.json").is_file())
    if not stages:
        raise FileNotFoundError(f"no checkpoint under {experiment_dir / 'checkpoints'}")
    return stages[-1]


def document_reads(train_jsonl: Path, budget_tokens: int) -> dict[tuple[str, int], int]:
    """How often each pool document starts inside the trained prefix of an arm's stream."""
    reads: dict[tuple[str, int], int] = {}
    seen = 0
    with open(train_jsonl, encoding="utf-8") as fh:
        for line in fh:
            if seen >= budget_tokens:
                break
            row = json.loads(line)
            key = (row["shard"], int(row["line"]))
            reads[key] = reads.get(key, 0) + 1
            seen += int(row["n_tokens"])
    return reads


def run_job(job: Job) -> dict:
    exp_dir = job.root / "experiments" / job.experiment
    train_s = None
    if not (job.reuse and (exp_dir / "checkpoints").is_dir()):
        train_s = contam(["arms", "--pool", str(job.root / "pool"), "--out", str(job.root / "out"),
                          "--experiments", str(job.root / "experiments"), "--arms", job.arm, "--seed", str(job.seed),
                          "--threads", str(job.threads), *job.arms_args], job.root / "logs" / f"{job.experiment}.arms.log")
    ckpt = final_checkpoint(exp_dir)
    t = time.monotonic()
    probe = probe_checkpoint(job, ckpt)
    probe_s = time.monotonic() - t
    (job.root / "probes").mkdir(exist_ok=True)
    (job.root / "probes" / f"{job.experiment}.json").write_text(json.dumps(probe, indent=1))
    mix = json.loads((exp_dir / "data" / "mix.json").read_text())
    log = json.loads((exp_dir / "train_log.json").read_text())
    return {
        "arm": job.arm, "seed": job.seed, "experiment": job.experiment, "checkpoint": str(ckpt),
        "steps": log["steps_done"], "stopped_early": log["stopped_early"], "tokens": log["tokens_seen"],
        "final_train_loss": log["losses"][-1], "train_s": round(log["wall_s"], 1),
        "arms_cli_s": None if train_s is None else round(train_s, 1), "probe_s": round(probe_s, 1),
        "readded_copies": mix["readded_copies"], **probe,
    }


def probe_checkpoint(job: Job, ckpt: Path) -> dict:
    """The official sequence probes on GSM8K test and the reference set, plus the planted split."""
    import torch
    from transformers.utils import logging as hf_logging

    from contam_assets.model.loader import LoadOptions, load_checkpoint
    from contam_assets.model.probe_inputs import ProbeOptions
    from contam_assets.model.probe_run import sequence_items, sequence_metrics

    torch.set_num_threads(job.threads)
    # Quiet the weight-loading bar and the "longer than the model's maximum" notice: the probe truncates
    # to the context itself and counts the truncated items (``truncated-items``).
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    lm = load_checkpoint(ckpt, LoadOptions(device="cpu", token_budget=job.token_budget))
    opts = ProbeOptions(benchmarks_dir=SHARED, ref_file=job.ref_file, limit=job.limit, k=job.k)
    items, inputs = sequence_items(lm, opts, sets=PROBE_SETS)
    missing = {s: inputs.skipped.get(s, "not found") for s in PROBE_SETS if s not in inputs.values}
    if missing:
        raise RuntimeError(f"probe sets missing: {missing}")
    metrics = sequence_metrics(items, job.k)
    planted = json.loads((job.root / "planted.json").read_text())
    exp_dir = job.root / "experiments" / job.experiment
    mix = json.loads((exp_dir / "data" / "mix.json").read_text())
    reads = document_reads(exp_dir / "data" / "train.jsonl", mix["budget_tokens"])
    item_reads = {int(j): reads.get(tuple(doc), 0) for j, doc in planted["item_docs"].items()}
    metrics.update(planted_split(items, item_reads, job.k))
    return {"metrics": metrics, "bad_rows": {k: len(v) for k, v in inputs.bad.items()}}


def planted_split(items, item_reads: dict[int, int], k: float) -> dict:
    """Within GSM8K test: planted vs never-planted items, and planted items by reads of their document.

    Uses the probes' own loss (``ppl_probe.token_loss``) and Min-K% AUC
    (``membership.membership_metrics``) on relabelled items, so both groups
    share the benchmark's style and only the planting differs.
    """
    from contam_assets.model.membership import membership_metrics
    from contam_assets.model.ppl_probe import average_ppl, token_loss

    test = [it for it in items if it.dataset == "gsm8k-test"]
    labelled = [replace(it, dataset="planted" if int(it.item) in item_reads else "unplanted") for it in test]
    groups = {name: [it for it in labelled if it.dataset == name] for name in ("planted", "unplanted")}
    out: dict = {}
    for name, group in groups.items():
        out[f"split/n-{name}"] = len(group)
        out[f"split/loss-{name}"] = token_loss(group)
        out[f"split/ppl-{name}"] = average_ppl(group)
    if groups["planted"] and groups["unplanted"]:
        out["split/loss-planted-minus-unplanted"] = out["split/loss-planted"] - out["split/loss-unplanted"]
        mem = membership_metrics(labelled, members="planted", nonmembers="unplanted", k=k)
        out["split/mink-auc"] = mem["mink/auc"]
        out["split/minkpp-auc"] = mem["minkpp/auc"]
    for n in sorted(set(item_reads.values())):
        group = [it for it in groups["planted"] if item_reads[int(it.item)] == n]
        if group:
            out[f"reads/{n}/n"] = len(group)
            out[f"reads/{n}/loss"] = token_loss(group)
    return out


# --- tables ------------------------------------------------------------------------------------------------


def spread(values: list[float]) -> float:
    return max(values) - min(values) if values else float("nan")


def fmt(v, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def summarise(results: list[dict]) -> str:
    m = lambda r, key: r["metrics"].get(key)  # noqa: E731
    decon = {r["seed"]: m(r, "delta1") for r in results if r["arm"] == "decontaminated"}
    lines = [
        "| arm | seed | re-added copies | gsm8k-test-ppl | gsm8k-ref-ppl | L_test | L_ref | Δ1 | Δ1 − Δ1(decon) | "
        "bpb test | Min-K% AUC | Min-K%++ AUC | planted − unplanted | Min-K% AUC planted/unplanted | "
        "Min-K%++ AUC planted/unplanted | train s | probe s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        d = decon.get(r["seed"])
        rel = m(r, "delta1") - d if d is not None else None
        lines.append(
            f"| {r['arm']} | {r['seed']} | {r['readded_copies']} | {fmt(m(r, 'gsm8k-test-ppl'))} | {fmt(m(r, 'gsm8k-ref-ppl'))} "
            f"| {fmt(m(r, 'loss/gsm8k-test'))} | {fmt(m(r, 'loss/gsm8k-ref'))} | {fmt(m(r, 'delta1'), '+.3f')} | {fmt(rel, '+.3f')} "
            f"| {fmt(m(r, 'bpb/gsm8k-test'))} | {fmt(m(r, 'mink/auc'))} | {fmt(m(r, 'minkpp/auc'))} "
            f"| {fmt(m(r, 'split/loss-planted-minus-unplanted'), '+.3f')} | {fmt(m(r, 'split/mink-auc'))} "
            f"| {fmt(m(r, 'split/minkpp-auc'))} | {r['train_s']:.0f} | {r['probe_s']:.0f} |"
        )
    lines += [
        "",
        "| arm | runs | Δ1 mean ± spread | Δ1 − Δ1(decon), same seed | gsm8k-test-ppl | gsm8k-ref-ppl | Min-K% AUC "
        "| Min-K%++ AUC | planted − unplanted | Min-K% AUC planted/unplanted | Min-K%++ AUC planted/unplanted |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for arm in dict.fromkeys(r["arm"] for r in results):
        rs = [r for r in results if r["arm"] == arm]
        col = lambda key: [m(r, key) for r in rs if m(r, key) is not None]  # noqa: E731
        rel = ", ".join(f"{m(r, 'delta1') - decon[r['seed']]:+.3f}" for r in rs if r["seed"] in decon)
        ms = lambda key, spec=".3f": f"{statistics.mean(col(key)):{spec}} ({spread(col(key)):.3f})" if col(key) else "-"  # noqa: E731
        lines.append(
            f"| {arm} | {len(rs)} | {statistics.mean(col('delta1')):+.3f} ± {spread(col('delta1')):.3f} | {rel or '-'} "
            f"| {ms('gsm8k-test-ppl')} | {ms('gsm8k-ref-ppl')} | {ms('mink/auc')} | {ms('minkpp/auc')} "
            f"| {ms('split/loss-planted-minus-unplanted', '+.3f')} | {ms('split/mink-auc')} | {ms('split/minkpp-auc')} |"
        )
    lines += ["", "| arm | seed | planted items by reads of their document: n, L_test |", "|---|---:|---|"]
    for r in results:
        parts = []
        n = 0
        while f"reads/{n}/n" in r["metrics"] or n < 3:
            if f"reads/{n}/n" in r["metrics"]:
                parts.append(f"{n}×: {r['metrics'][f'reads/{n}/n']} items, {r['metrics'][f'reads/{n}/loss']:.3f}")
            n += 1
        lines.append(f"| {r['arm']} | {r['seed']} | {'; '.join(parts)} |")
    return "\n".join(lines) + "\n"


# --- main --------------------------------------------------------------------------------------------------


def parse_runs(specs: list[str]) -> list[tuple[str, int]]:
    """``arm=0,1,2`` ... -> [(arm, seed)], ordered by seed so each seed's arms run close together."""
    runs = []
    for spec in specs:
        arm, _, seeds = spec.partition("=")
        if arm not in ARMS or not seeds:
            raise SystemExit(f"bad --runs entry {spec!r}: expected ARM=SEED[,SEED...] with ARM one of {', '.join(ARMS)}")
        runs += [(arm, int(s)) for s in seeds.split(",") if s.strip()]
    return sorted(dict.fromkeys(runs), key=lambda r: (r[1], ARMS.index(r[0])))


def main(argv=None) -> int:
    D = TrainConfig()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/arms_demo"))
    ap.add_argument("--runs", nargs="+", default=list(DEFAULT_RUNS), help="ARM=SEEDS entries (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=2, help="(arm, seed) runs in parallel (default 2)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    ap.add_argument("--planted", type=int, default=1000, help="GSM8K test items planted in the pool (of 1,319; the rest are a within-model control)")
    ap.add_argument("--host-chars", type=int, default=200_000, help="characters of docstrings and of code")
    ap.add_argument("--budget-tokens", type=int, default=D.budget_tokens)
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--block-size", type=int, default=D.block_size)
    ap.add_argument("--batch-size", type=int, default=D.batch_size)
    ap.add_argument("--n-layer", type=int, default=D.n_layer)
    ap.add_argument("--n-embd", type=int, default=D.n_embd)
    ap.add_argument("--n-head", type=int, default=D.n_head)
    ap.add_argument("--lr", type=float, default=D.lr)
    ap.add_argument("--warmup-steps", type=int, default=D.warmup_steps)
    ap.add_argument("--max-minutes", type=float, default=0.0, help="wall-clock cap per arm (0 = none)")
    ap.add_argument("--k", type=float, default=0.2, help="Min-K%% fraction")
    ap.add_argument("--token-budget", type=int, default=16384, help="padded tokens per probe batch")
    ap.add_argument("--ref", default=None, help="reference set (default: the probe's own lookup in the benchmark folder)")
    ap.add_argument("--eval-limit", type=int, default=0, help="probe only the first N items of each set (0 = all)")
    ap.add_argument("--reuse-checkpoints", action="store_true", help="probe existing experiments instead of training them again")
    ap.add_argument("--pool-only", action="store_true",
                    help="only write <out>/pool (for `contam detect --pool` then `contam arms`) and <out>/planted.json")
    args = ap.parse_args(argv)
    runs = parse_runs(args.runs)

    root = args.out.resolve()
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    load_start = os.getloadavg()
    timings: dict[str, float] = {}

    pool, removed_keys, info = build_pool(args, random.Random(1234))
    write_pool(pool, root / "pool")
    (root / "planted.json").write_text(json.dumps({"planted_test_ids": info["planted_ids"], "item_docs": info["item_docs"],
                                                   "removed": sorted(map(list, removed_keys))}))
    print(f"pool: {root / 'pool'} ({len(pool)} documents, {len(removed_keys)} with planted GSM8K test items)")
    timings["pool_s"] = time.monotonic() - t0
    if args.pool_only:
        return 0

    test = read_jsonl(SHARED / "gsm8k_test.jsonl")
    check_item_order(test, args)

    (root / "tasks").mkdir(exist_ok=True)
    (root / "tasks" / "gsm8k.toml").write_text(TEST_ONLY_GSM8K)
    timings["detect_s"] = contam(["detect", "--pool", str(root / "pool"), "--out", str(root / "out"),
                                  "--benchmarks", str(SHARED), "--tasks-dir", str(root / "tasks"),
                                  "--dagster-home", str(root / "out" / ".dagster_home")], root / "logs" / "detect.log")
    check = check_removals(root / "out" / "contam.duckdb", removed_keys, set(info["planted_ids"]))
    print(f"contam detect ({timings['detect_s']:.0f}s): {json.dumps(check)}")

    # Train the shared tokenizer once, so parallel `contam arms` runs reuse it instead of racing to write it.
    from contam_assets.model.arms.pipeline import ensure_tokenizer, tokenizer_dir

    t = time.monotonic()
    ensure_tokenizer(root / "pool", tokenizer_dir(root / "out"), vocab_size=args.vocab_size)
    timings["tokenizer_s"] = time.monotonic() - t

    arms_args = ("--budget-tokens", str(args.budget_tokens), "--vocab-size", str(args.vocab_size),
                 "--block-size", str(args.block_size), "--batch-size", str(args.batch_size), "--n-layer", str(args.n_layer),
                 "--n-embd", str(args.n_embd), "--n-head", str(args.n_head), "--lr", str(args.lr),
                 "--warmup-steps", str(args.warmup_steps), "--max-minutes", str(args.max_minutes))
    jobs = [Job(arm, seed, root, arms_args, args.threads, args.token_budget, args.k, args.ref, args.eval_limit or None,
                args.reuse_checkpoints) for arm, seed in runs]
    t = time.monotonic()
    results, failed = [], []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs), mp_context=get_context("spawn")) as pool_ex:
        futures = {pool_ex.submit(run_job, job): job for job in jobs}
        for fut, job in futures.items():
            try:
                row = fut.result()
            except Exception as exc:  # one failed run is reported, the others carry on
                failed.append({"experiment": job.experiment, "error": f"{type(exc).__name__}: {exc}"})
                print(f"{job.experiment}: FAILED {exc}")
                continue
            results.append(row)
            mt = row["metrics"]
            print(f"{row['experiment']}: train {row['train_s']:.0f}s probe {row['probe_s']:.0f}s  delta1 {mt['delta1']:+.4f} "
                  f"mink/auc {mt['mink/auc']:.3f} minkpp/auc {mt['minkpp/auc']:.3f} "
                  f"planted-unplanted {mt.get('split/loss-planted-minus-unplanted', float('nan')):+.4f} "
                  f"({time.monotonic() - t0:.0f}s)", flush=True)
    timings["arms_and_probes_s"] = time.monotonic() - t
    timings["total_s"] = time.monotonic() - t0

    table = summarise(results) if results else ""
    exposure_path = root / "out" / "arms" / "exposure.json"
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
               "loadavg_start": load_start, "loadavg_end": os.getloadavg()}
    (root / "results.json").write_text(json.dumps({
        "args": {k: str(v) for k, v in vars(args).items()}, "machine": machine,
        "timings": {k: round(v, 1) for k, v in timings.items()},
        "pool": {"documents": len(pool), "planted_test_items": info["planted_test_items"],
                 "planted_docs": len(removed_keys)},
        "detect": check,
        "exposure": json.loads(exposure_path.read_text()) if exposure_path.is_file() else None,
        "runs": results, "failed": failed,
    }, indent=1))
    (root / "results.md").write_text(table)
    print(table)
    print(f"timings: {json.dumps({k: round(v) for k, v in timings.items()})}; load average {load_start} -> {os.getloadavg()}")
    return 1 if failed else 0


def check_item_order(test: list[dict], args) -> None:
    """The probes' GSM8K test texts are in the file's order, so item i is test row i (planted ids index it)."""
    from contam_assets.model.benchmarks import gsm8k_texts

    texts, _ = gsm8k_texts("test", SHARED)
    want = [f"{r['question']} {r['answer']}" for r in test]
    if texts != want:
        raise SystemExit("the probe's GSM8K test set does not match gsm8k_test.jsonl row by row; planted ids would not line up")


if __name__ == "__main__":
    sys.exit(main())
