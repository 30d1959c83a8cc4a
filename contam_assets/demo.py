"""Host text the project ships, and the demo pool built from it.

The demo pool mixes documents of five dataset types (web, code, math, instruct,
other) composed from data/demo/host_text.md, plants copies of benchmark items
from whatever benchmarks are available (at least HumanEval, from its package),
and adds a few bad lines so the counted-reject path is visible.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from contam_assets.store.pool import open_writer

HOST_TEXT = Path(__file__).resolve().parents[1] / "data" / "demo" / "host_text.md"
SOURCES = ("web", "code", "math", "instruct", "other")


def host_paragraphs(path: Path = HOST_TEXT) -> list[str]:
    text = path.read_text(encoding="utf-8")
    paras = [p.strip() for p in re.split(r"\n\s*\n", text)]
    return [p for p in paras if p and not p.startswith("#") and len(p.split()) > 30]


def host_sentences(paras: list[str]) -> list[str]:
    out = []
    for p in paras:
        out.extend(s.strip() for s in re.split(r"(?<=[.!?])\s+", p) if len(s.split()) >= 4)
    return out


class HostText:
    """Deterministic generator of real-looking host documents."""

    def __init__(self, seed: int = 0, path: Path = HOST_TEXT):
        self.rng = random.Random(seed)
        self.paras = host_paragraphs(path)
        self.sentences = host_sentences(self.paras)

    def paragraph(self) -> str:
        if self.rng.random() < 0.5:
            return self.rng.choice(self.paras)
        k = self.rng.randint(3, 6)
        return " ".join(self.rng.choice(self.sentences) for _ in range(k))

    def document(self, n_paras: int | None = None) -> str:
        n = n_paras if n_paras is not None else self.rng.randint(1, 4)
        return "\n\n".join(self.paragraph() for _ in range(n))

    def code_document(self) -> str:
        name = self.rng.choice(["load_rows", "clean_value", "merge_maps", "walk_tree", "parse_header"])
        comment = self.rng.choice(self.sentences)
        return (
            f"# {comment}\n"
            f"def {name}(items, limit=10):\n"
            f"    \"\"\"{self.rng.choice(self.sentences)}\"\"\"\n"
            "    out = []\n"
            "    for item in items[:limit]:\n"
            "        if item is not None:\n"
            "            out.append(item)\n"
            "    return out\n"
        )


@dataclass
class Planted:
    shard: str
    line: int
    kind: str
    task: str
    split: str
    instance_index: int
    subject: str | None


def _format_item(rec: dict, style: str) -> str:
    q, a = rec["question"], rec.get("answer")
    if style == "qa":
        return f"{q}\n{a}" if a else q
    if style == "instruct":
        return f"User: {q}\n\nAssistant: {a}" if a else f"User: {q}"
    if style == "question_only":
        return q
    raise ValueError(style)


def _mc_text(rows: list[dict]) -> str:
    rows = sorted(rows, key=lambda r: r["choice_index"])
    letters = "ABCDEFGH"
    opts = "\n".join(f"{letters[i]}. {r['answer']}" for i, r in enumerate(rows))
    gold = next((letters[i] for i, r in enumerate(rows) if r["is_correct"]), "A")
    return f"{rows[0]['question']}\n{opts}\nAnswer: {gold}"


def build_demo_pool(pool_dir: Path, reference: pl.DataFrame, n_docs: int = 1500, plant_rate: float = 0.04,
                    seed: int = 0, bad_lines: bool = True) -> list[Planted]:
    """Write the demo pool; return the planted items (the truth)."""
    rng = random.Random(seed)
    host = HostText(seed)
    pool_dir = Path(pool_dir)
    pool_dir.mkdir(parents=True, exist_ok=True)
    prim = reference.filter(~pl.col("derived") & pl.col("indexed"))
    derived = reference.filter(pl.col("derived") & pl.col("indexed"))
    qa = prim.filter(pl.col("kind") != "multiple-choice").to_dicts()
    mc_groups: dict[tuple, list[dict]] = {}
    for r in prim.filter(pl.col("kind") == "multiple-choice").to_dicts():
        mc_groups.setdefault((r["task"], r["split"], r["instance_index"], r["subject"]), []).append(r)
    mc = [g for g in mc_groups.values() if len(g) >= 2]
    solutions = derived.to_dicts()

    shards = {
        "web/part-000.jsonl.gz": "web", "web/part-001.jsonl": "web", "code/part-000.jsonl.zst": "code",
        "math/part-000.jsonl": "math", "instruct/part-000.jsonl": "instruct", "other/part-000.jsonl": "other",
    }
    per_shard = max(1, n_docs // len(shards))
    planted: list[Planted] = []
    for shard, source in shards.items():
        lines: list[bytes] = []
        for i in range(per_shard):
            doc = host.code_document() if source == "code" and rng.random() < 0.6 else host.document()
            kind = None
            if rng.random() < plant_rate:
                choice = rng.random()
                if source == "code" and solutions and choice < 0.5:
                    rec = rng.choice(solutions)
                    # a reference solution alone, quoted inside a JSON string (seed 003's blind spot)
                    doc = doc + "\n\nsnippet = " + json.dumps({"completion": rec["question"]}) + "\n"
                    kind = "solution_only_escaped"
                elif mc and choice < 0.3:
                    grp = rng.choice(mc)
                    rec = grp[0]
                    doc = doc + "\n\n" + _mc_text(grp) + "\n\n" + host.paragraph()
                    kind = "multiple_choice"
                elif qa and choice < 0.9:
                    rec = rng.choice(qa)
                    style = "instruct" if source == "instruct" else "qa"
                    doc = host.paragraph() + "\n\n" + _format_item(rec, style) + "\n\n" + host.paragraph()
                    kind = "verbatim_" + style
                elif qa:
                    rec = rng.choice(qa)
                    doc = host.paragraph() + "\n\n" + _format_item(rec, "question_only") + "\n\n" + host.paragraph()
                    kind = "question_only"
                if kind:
                    planted.append(Planted(shard, len(lines), kind, rec["task"], rec["split"], rec["instance_index"], rec["subject"]))
            lines.append(json.dumps({"id": f"{source}-{shard.split('/')[-1].split('.')[0]}-{i}", "source": source, "text": doc}).encode())
        if bad_lines and source == "web" and shard.endswith(".jsonl"):
            lines.append(b'{"id": "broken", "text": "an unterminated line')
            lines.append(b'{"id": "latin1", "text": "caf\xe9 au lait"}')
            lines.append(json.dumps({"id": "no-text", "body": "the content is under another key"}).encode())
            lines.append(json.dumps({"id": "empty", "text": "   "}).encode())
        path = pool_dir / shard
        path.parent.mkdir(parents=True, exist_ok=True)
        with open_writer(path) as fh:
            fh.write(b"\n".join(lines) + b"\n")
    return planted
