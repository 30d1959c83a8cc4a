"""Fresh-set gap (GSM1k, Zhang et al. 2024): n-shot GSM8K accuracy minus accuracy on a fresh GSM-style set.

Both sets use the same prompt: ``n_shot`` worked examples drawn (seeded) from
GSM8K train as ``Question: …\\nAnswer: …``, then the question; the model
answers greedily and the last number in its answer is compared with the gold
number (as the LM Evaluation Harness does).  A positive gap means the model
does better on GSM8K than on comparable fresh problems: overfit.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Sequence

from contam_assets.detector.text import normalize_ws_case
from contam_assets.model.batching import LogFn
from contam_assets.model.generation import generate_greedy
from contam_assets.model.loader import LoadedModel

STOP = ("Question:", "\n\n\n")
SHOT_SEED = 1234
_NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class GsmItem:
    dataset: str  # gsm8k-test | fresh
    item: str
    predicted: float | None
    gold: float | None
    correct: bool


def parse_number(text: str) -> float | None:
    cleaned = text.replace("$", "").replace(",", "").rstrip(".")
    try:
        return float(cleaned)
    except ValueError:
        return None


def last_number(text: str) -> float | None:
    found = _NUMBER.findall(text)
    return parse_number(found[-1]) if found else None


def gold_number(answer) -> float | None:
    """GSM8K answers end in ``#### N``; other sets give a number (or text ending in one)."""
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        return float(answer)
    text = str(answer)
    if "####" in text:
        return parse_number(text.split("####")[-1].strip())
    return last_number(text)


def same_number(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= 1e-6 * max(1.0, abs(b))


def shot_text(rows: Sequence[dict]) -> str:
    return "".join(f"Question: {r['question']}\nAnswer: {r['answer']}\n\n" for r in rows)


def fewshot_prefixes(train_rows: Sequence[dict], n_items: int, n_shot: int, seed: int = SHOT_SEED) -> list[str]:
    """One prefix per question: lm-evaluation-harness's sampler (a seeded Random per set, a new sample each)."""
    if n_shot <= 0:
        return [""] * n_items
    rng, pool = random.Random(seed), list(train_rows)
    return [shot_text(rng.sample(pool, min(n_shot, len(pool)))) for _ in range(n_items)]


def drop_gsm8k_questions(fresh: Sequence[dict], *gsm8k: Sequence[dict]) -> tuple[list[dict], list[int]]:
    """(fresh rows whose question is not a GSM8K question, indices of the rows dropped)."""
    known = {normalize_ws_case(r["question"]) for rows in gsm8k for r in rows if isinstance(r.get("question"), str)}
    dropped = [i for i, row in enumerate(fresh) if normalize_ws_case(row["question"]) in known]
    skip = set(dropped)
    return [row for i, row in enumerate(fresh) if i not in skip], dropped


def gsm_accuracy(
    lm: LoadedModel,
    rows: Sequence[dict],
    prefixes: Sequence[str] | str,
    dataset: str,
    max_new_tokens: int = 256,
    log: LogFn | None = None,
) -> list[GsmItem]:
    """Greedy answers to every row; ``prefixes``: one few-shot prefix per row (or one for all)."""
    if isinstance(prefixes, str):
        prefixes = [prefixes] * len(rows)
    prompts = [f"{prefix}Question: {r['question']}\nAnswer:" for prefix, r in zip(prefixes, rows)]
    gens = generate_greedy(lm, prompts, max_new_tokens, STOP, log=log, what=f"answering {dataset}")
    items = []
    for i, (row, g) in enumerate(zip(rows, gens)):
        pred, gold = last_number(g.text), gold_number(row["answer"])
        items.append(GsmItem(dataset, str(i), pred, gold, same_number(pred, gold)))
    return items


def gap_metrics(items: Sequence[GsmItem], base: str = "gsm8k-test", fresh: str = "fresh") -> dict[str, float | None]:
    """``fresh/gsm8k-acc``, ``fresh/fresh-acc``, ``fresh/gap`` (= GSM8K − fresh), counts."""
    acc = {}
    metrics: dict[str, float | None] = {}
    for name, label in ((base, "gsm8k"), (fresh, "fresh")):
        group = [i for i in items if i.dataset == name]
        acc[name] = sum(i.correct for i in group) / len(group) if group else None
        metrics[f"fresh/{label}-acc"] = acc[name]
        metrics[f"fresh/n-{label}"] = float(len(group))
    metrics["fresh/gap"] = acc[base] - acc[fresh] if acc[base] is not None and acc[fresh] is not None else None
    return metrics
