"""Positive control for the proxy arms: does the `full` arm show GSM8K test leakage?

Builds a small synthetic pool (host text + GSM8K test items planted in some
documents), removes the documents holding a planted item (what a perfect
detector would do), trains the chosen arms for a few seeds with the arms core
(contam_assets.model.arms) and scores each final checkpoint:

- L_test, L_ref: token-weighted loss (total NLL / predicted tokens, every
  token but the first) of GSM8K test and of the Skywork mock reference set,
  both with the template "{question} {answer}";  delta1 = L_test - L_ref.
- Min-K% (k = 20 %) ROC AUC of GSM8K test items against reference items.

The loss function here is the script's own; the official PPL probe lives in
contam_assets/model/.  Host text: GSM8K *train* problems (math, instruction),
docstrings and source of the Python standard library (web-like prose, code)
and data/demo/host_text.md.  Nothing is downloaded.

    python benchmarks/arms_demo.py --out /tmp/arms_demo            # defaults used for docs/arms.md
    python benchmarks/arms_demo.py --out /tmp/arms_demo --arms decontaminated,full,target_exposure --seeds 0,1,2

Writes <out>/pool/ (shards, re-usable with `contam detect --pool`; --pool-only stops there),
<out>/planted.json (planted test ids, removed (shard, line)),
<out>/experiments/<arm>[-seedN]/ (checkpoints, data/train.jsonl),
<out>/results.json and <out>/results.md.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import statistics
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from contam_assets.model.arms.exposure import TargetScale  # noqa: E402
from contam_assets.model.arms.mix import PoolDoc, build_arm_mix, split_pool  # noqa: E402
from contam_assets.model.arms.pipeline import compute_exposure, write_arm_mix  # noqa: E402
from contam_assets.model.arms.tokenizer import save_tokenizer, token_counter, train_tokenizer  # noqa: E402
from contam_assets.model.arms.train import TrainConfig, experiment_name, train_arm  # noqa: E402

SHARED = Path(os.environ.get("CONTAM_SHARED_DATA", ROOT.parent / "shared" / "data"))


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


# --- host text -------------------------------------------------------------------------------------------


def stdlib_text(max_chars: int, rng: random.Random) -> tuple[list[str], list[str]]:
    """(docstrings, source chunks) of the Python standard library, each list about ``max_chars`` long."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(f for f in lib.rglob("*.py") if not {"test", "tests", "idlelib", "site-packages"} & set(f.parts))
    docs, code = [], []
    for f in files:
        try:
            src = f.read_text(encoding="utf-8")
            tree = ast.parse(src)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                d = ast.get_docstring(node)
                if d and len(d) > 200:
                    docs.append(d)
        lines = src.splitlines()
        for start in range(0, len(lines), 80):
            chunk = "\n".join(lines[start : start + 80]).strip()
            if len(chunk) > 400:
                code.append(chunk)
    rng.shuffle(docs)
    rng.shuffle(code)
    return _take(docs, max_chars), _take(code, max_chars)


def _take(items: list[str], max_chars: int) -> list[str]:
    out, n = [], 0
    for s in items:
        if n >= max_chars:
            break
        out.append(s)
        n += len(s)
    return out


def host_paragraphs() -> list[str]:
    path = ROOT / "data" / "demo" / "host_text.md"
    if not path.is_file():
        return []
    paras = [p.strip() for p in path.read_text(encoding="utf-8").split("\n\n")]
    return [p for p in paras if p and not p.startswith("#") and "contam-assets" not in p]


def qa(item: dict, style: str) -> str:
    q, a = item["question"], item["answer"]
    if style == "chat":
        return f"User: {q}\nAssistant: {a}"
    if style == "code":
        return f'    """\n    {q}\n    {a}\n    """'
    return f"{q}\n{a}"


# --- pool ------------------------------------------------------------------------------------------------


def build_pool(args, rng: random.Random) -> tuple[list[PoolDoc], set[tuple[str, int]], dict]:
    train = read_jsonl(SHARED / "gsm8k_train.jsonl")
    test = read_jsonl(SHARED / "gsm8k_test.jsonl")
    rng.shuffle(train)
    docstrings, code_chunks = stdlib_text(args.host_chars, rng)
    paras = host_paragraphs()

    docs: dict[str, list[str]] = {"web": [], "code": [], "math": [], "instruct": []}
    planted_docs: dict[str, list[int]] = {"code": [], "math": [], "instruct": []}

    # web: a few docstrings or host paragraphs per page
    pieces = docstrings + paras
    rng.shuffle(pieces)
    for i in range(0, len(pieces), 3):
        docs["web"].append("\n\n".join(pieces[i : i + 3]))
    docs["code"] = list(code_chunks)
    # math pages (3-6 worked problems each) and instruction rows (one problem each) from GSM8K train
    n_instruct = len(train) // 3
    for item in train[:n_instruct]:
        docs["instruct"].append(qa(item, "chat"))
    rest = train[n_instruct:]
    k = 0
    while k < len(rest):
        n = rng.randint(3, 6)
        docs["math"].append("Worked problems\n\n" + "\n\n".join(qa(it, "plain") for it in rest[k : k + n]))
        k += n

    # plant GSM8K test items: math pages (next to train problems), code dumps, instruction rows
    planted = list(range(len(test)))
    rng.shuffle(planted)
    planted = planted[: args.planted]
    cut1 = int(len(planted) * 0.5)
    cut2 = int(len(planted) * 0.8)
    by_kind = {"math": planted[:cut1], "code": planted[cut1:cut2], "instruct": planted[cut2:]}
    for idx in range(0, len(by_kind["math"]), 4):
        items = [test[j] for j in by_kind["math"][idx : idx + 4]] + rng.sample(train, 2)
        rng.shuffle(items)
        planted_docs["math"].append(len(docs["math"]))
        docs["math"].append("Worked problems\n\n" + "\n\n".join(qa(it, "plain") for it in items))
    for idx in range(0, len(by_kind["code"]), 12):
        body = "\n\n".join(
            f"def problem_{j}():\n{qa(test[j], 'code')}\n    return None" for j in by_kind["code"][idx : idx + 12]
        )
        planted_docs["code"].append(len(docs["code"]))
        docs["code"].append(f"# GSM8K evaluation dump, part {idx // 12}\n\n{body}")
    for j in by_kind["instruct"]:
        planted_docs["instruct"].append(len(docs["instruct"]))
        docs["instruct"].append(qa(test[j], "chat"))

    pool: list[PoolDoc] = []
    removed: set[tuple[str, int]] = set()
    for source, texts in docs.items():
        order = list(range(len(texts)))
        rng.shuffle(order)
        planted_set = set(planted_docs.get(source, []))
        for line, i in enumerate(order):
            shard = f"{source}/part-0000.jsonl"
            pool.append(PoolDoc(shard, line, source, texts[i]))
            if i in planted_set:
                removed.add((shard, line))
    info = {"planted_test_items": len(planted), "planted_ids": sorted(planted)}
    return pool, removed, info


def write_pool(pool: list[PoolDoc], folder: Path) -> None:
    by_shard: dict[str, list[PoolDoc]] = {}
    for d in pool:
        by_shard.setdefault(d.shard, []).append(d)
    for shard, docs in by_shard.items():
        path = folder / shard
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            for d in sorted(docs, key=lambda d: d.line):
                fh.write(json.dumps({"id": f"{d.shard}:{d.line}", "source": d.source, "text": d.text}) + "\n")


# --- scoring ---------------------------------------------------------------------------------------------


def score_items(model, tokenizer, texts: list[str], max_len: int, batch_size: int = 32) -> list[tuple[float, int, list[float]]]:
    """Per text: (summed NLL over tokens 2..n, number of predicted tokens, per-token log-probs)."""
    import torch

    model.eval()
    out = []
    enc = [tokenizer(t, add_special_tokens=False)["input_ids"][:max_len] for t in texts]
    pad = tokenizer.pad_token_id
    with torch.no_grad():
        for s in range(0, len(enc), batch_size):
            chunk = enc[s : s + batch_size]
            width = max(len(x) for x in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, x in enumerate(chunk):
                ids[i, : len(x)] = torch.tensor(x)
                mask[i, : len(x)] = 1
            logits = model(input_ids=ids, attention_mask=mask).logits.float()
            logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
            for i, x in enumerate(chunk):
                lp = logp[i, : len(x) - 1].tolist()
                out.append((-sum(lp), len(lp), lp))
    return out


def token_loss(scores) -> float:
    return sum(s[0] for s in scores) / sum(s[1] for s in scores)


def min_k(lp: list[float], k: float = 0.2) -> float:
    n = max(1, int(len(lp) * k))
    return sum(sorted(lp)[:n]) / n


def auc(pos: list[float], neg: list[float]) -> float:
    """P(score of a positive > score of a negative), ties counted half (Mann-Whitney)."""
    from scipy.stats import mannwhitneyu

    u = mannwhitneyu(pos, neg, alternative="two-sided").statistic
    return float(u) / (len(pos) * len(neg))


def evaluate(folder: str, test: list[dict], ref: list[dict], planted: set[int], max_len: int) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    t_scores = score_items(model, tok, [f"{r['question']} {r['answer']}" for r in test], max_len)
    r_scores = score_items(model, tok, [f"{r['question']} {r['answer']}" for r in ref], max_len)
    l_test, l_ref = token_loss(t_scores), token_loss(r_scores)
    res = {
        "L_test": l_test,
        "L_ref": l_ref,
        "delta1": l_test - l_ref,
        "mink_auc": auc([min_k(s[2]) for s in t_scores], [min_k(s[2]) for s in r_scores]),
    }
    if planted and len(planted) < len(test):
        p = [s for i, s in enumerate(t_scores) if i in planted]
        u = [s for i, s in enumerate(t_scores) if i not in planted]
        res["L_test_planted"] = token_loss(p)
        res["L_test_unplanted"] = token_loss(u)
    return res


# --- main ------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    D = TrainConfig()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/arms_demo"))
    ap.add_argument("--arms", default="decontaminated,full")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--budget-tokens", type=int, default=D.budget_tokens)
    ap.add_argument("--planted", type=int, default=1000, help="GSM8K test items planted in the pool (of 1,319; the rest are a within-model control)")
    ap.add_argument("--host-chars", type=int, default=200_000, help="characters of docstrings and of code")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--block-size", type=int, default=D.block_size)
    ap.add_argument("--batch-size", type=int, default=D.batch_size)
    ap.add_argument("--n-layer", type=int, default=D.n_layer)
    ap.add_argument("--n-embd", type=int, default=D.n_embd)
    ap.add_argument("--n-head", type=int, default=D.n_head)
    ap.add_argument("--lr", type=float, default=D.lr)
    ap.add_argument("--warmup-steps", type=int, default=D.warmup_steps)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = every core)")
    ap.add_argument("--max-minutes", type=float, default=0.0)
    ap.add_argument("--eval-limit", type=int, default=0, help="score only the first N items of each set (0 = all)")
    ap.add_argument("--pool-only", action="store_true",
                    help="only write <out>/pool (for `contam detect --pool` then `contam arms`) and <out>/planted.json")
    args = ap.parse_args(argv)

    rng = random.Random(1234)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    pool, removed_keys, info = build_pool(args, rng)
    write_pool(pool, out / "pool")
    (out / "planted.json").write_text(json.dumps({"planted_test_ids": info["planted_ids"],
                                                  "removed": sorted(map(list, removed_keys))}))
    if args.pool_only:
        print(f"pool: {out / 'pool'} ({len(pool)} documents, {len(removed_keys)} with planted GSM8K test items)")
        return 0
    decon, removed = split_pool(pool, removed_keys)
    tokenizer = train_tokenizer([d.text for d in pool], vocab_size=args.vocab_size)
    save_tokenizer(tokenizer, out / "tokenizer", {"demo": True})
    count = token_counter(tokenizer)
    config = TrainConfig(
        budget_tokens=args.budget_tokens, block_size=args.block_size, batch_size=args.batch_size,
        n_layer=args.n_layer, n_embd=args.n_embd, n_head=args.n_head, lr=args.lr, max_minutes=args.max_minutes,
        warmup_steps=args.warmup_steps, num_threads=args.threads,
    )

    from contam_assets.model.arms.exposure import SourceStats

    stats = {}
    for d, n in zip(pool, count([d.text for d in pool])):
        s = stats.setdefault(d.source, [0, 0, 0, 0])
        s[0] += 1
        s[1] += n
        if d.key in removed_keys:
            s[2] += 1
            s[3] += n
    source_stats = [SourceStats(k, *v) for k, v in sorted(stats.items())]
    report = compute_exposure(source_stats, config.effective_budget, {}, TargetScale())
    print(f"pool: {len(pool)} docs, {sum(v[1] for v in stats.values())} tokens; removed {len(removed)} docs, "
          f"{sum(v[3] for v in stats.values())} tokens; planted {info['planted_test_items']} test items "
          f"({time.monotonic() - t0:.0f}s)")
    print(report.markdown())

    test = read_jsonl(SHARED / "gsm8k_test.jsonl")
    ref = read_jsonl(SHARED / "skywork_mock_gsm8k_eval_1419.jsonl")
    planted = set(info["planted_ids"])
    if args.eval_limit:
        test, ref = test[: args.eval_limit], ref[: args.eval_limit]
        planted = {i for i in planted if i < args.eval_limit}

    from dataclasses import replace

    results = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for arm in args.arms.split(","):
            exp = experiment_name(arm, seed)
            exp_dir = out / "experiments" / exp
            mix = build_arm_mix(arm, decon, removed, config.effective_budget, count, seed=seed,
                                target_exposure=report.target_by_source)
            summary = write_arm_mix(mix, exp_dir)
            res = train_arm([r.text for r in mix.rows], tokenizer, replace(config, seed=seed), exp_dir, exp, recipe=arm,
                            log=lambda m: print("  " + m) if "checkpoint" in m or "parameters" in m else None)
            ev = evaluate(res.checkpoints[-1], test, ref, planted, args.block_size)
            row = {"arm": arm, "seed": seed, "steps": res.steps_done, "tokens": res.tokens_seen,
                   "train_s": round(res.wall_s, 1), "final_loss": res.losses[-1],
                   "readded_copies": summary["readded_copies"], **ev}
            results.append(row)
            print(json.dumps(row))

    table = summarise(results)
    (out / "results.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                                   "pool": {k: v for k, v in info.items() if k != "planted_ids"},
                                                   "exposure": report.to_json(), "runs": results}, indent=2))
    (out / "results.md").write_text(table)
    print(table)
    print(f"total {time.monotonic() - t0:.0f}s")
    return 0


def summarise(results: list[dict]) -> str:
    lines = ["| arm | seed | L_test | L_ref | delta1 | Min-K% AUC | train s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['arm']} | {r['seed']} | {r['L_test']:.4f} | {r['L_ref']:.4f} | {r['delta1']:+.4f} "
                     f"| {r['mink_auc']:.3f} | {r['train_s']:.0f} |")
    lines += ["", "| arm | delta1 mean | delta1 spread (max-min over seeds) | Min-K% AUC mean |", "|---|---:|---:|---:|"]
    for arm in dict.fromkeys(r["arm"] for r in results):
        d = [r["delta1"] for r in results if r["arm"] == arm]
        a = [r["mink_auc"] for r in results if r["arm"] == arm]
        lines.append(f"| {arm} | {statistics.mean(d):+.4f} | {max(d) - min(d):.4f} | {statistics.mean(a):.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
