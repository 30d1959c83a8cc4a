"""Tiny on-disk inputs for the arms tests, laid out as the data side's contract says.

A pool of GSM8K train problems (math), host paragraphs (web) and a few
documents with planted GSM8K test items; a ``removals`` table naming the
planted documents; ``<out>/mix/<shard>`` without them.
"""

from __future__ import annotations

import json
from pathlib import Path

from contam_assets import store

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def read_jsonl(path: Path, limit: int | None = None) -> list[dict]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                out.append(json.loads(line))
            if limit is not None and len(out) >= limit:
                break
    return out


def host_paragraphs() -> list[str]:
    text = (PROJECT_ROOT / "data" / "demo" / "host_text.md").read_text(encoding="utf-8")
    paras = [p.strip() for p in text.split("\n\n")]
    return [p for p in paras if p and not p.startswith("#")]


def build_tiny_contract(shared_data: Path, tmp: Path, n_train: int = 120, n_planted: int = 8) -> dict:
    """Write pool/, out/contam.duckdb (removals) and out/mix/; return paths and the removed keys."""
    train = read_jsonl(shared_data / "gsm8k_train.jsonl", n_train)
    test = read_jsonl(shared_data / "gsm8k_test.jsonl", n_planted)
    paras = host_paragraphs() or ["A short paragraph about nothing in particular."]
    pool, out = tmp / "pool", tmp / "out"
    shards = {
        "math/part-0000.jsonl": [{"text": f"{r['question']}\n{r['answer']}"} for r in train],
        # no `source` field: the shard's folder names the source
        "web/part-0000.jsonl": [{"text": "\n\n".join(paras[i : i + 3])} for i in range(0, len(paras), 2)],
        "mixed.jsonl": [],
    }
    removed = []
    for i, r in enumerate(test):
        # planted test items: in a math page (source field set) and in the un-foldered shard
        doc = {"text": f"Worked problems\n\n{train[i]['question']}\n{train[i]['answer']}\n\n{r['question']}\n{r['answer']}",
               "source": "math" if i % 2 == 0 else "instruct", "id": f"planted-{i}"}
        shard = "math/part-0000.jsonl" if i % 2 == 0 else "mixed.jsonl"
        shards[shard].insert(min(len(shards[shard]), 3 * i + 1), doc)
    shards["mixed.jsonl"].append({"text": paras[0], "source": "other"})
    for shard, rows in shards.items():
        path = pool / shard
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            for line, row in enumerate(rows):
                fh.write(json.dumps(row) + "\n")
                if str(row.get("id", "")).startswith("planted-"):
                    removed.append((shard, line, row.get("id"), row.get("source"), len(row["text"])))
        # the decontaminated mix: the same shard without the removed lines
        mix_path = out / "mix" / shard
        mix_path.parent.mkdir(parents=True, exist_ok=True)
        drop = {r[1] for r in removed if r[0] == shard}
        with open(mix_path, "w", encoding="utf-8") as fh:
            for line, row in enumerate(rows):
                if line not in drop:
                    fh.write(json.dumps(row) + "\n")
    with store.connect(out / "contam.duckdb") as con:
        con.execute("create table removals (shard VARCHAR, line INTEGER, doc_id VARCHAR, source VARCHAR, "
                    "n_chars BIGINT, reason VARCHAR)")
        for shard, line, doc_id, source, n in removed:
            con.execute("insert into removals values (?, ?, ?, ?, ?, 'flagged')", [shard, line, doc_id, source, n])
    return {"pool": pool, "out": out, "removed": {(s, l) for s, l, *_ in removed}, "db": out / "contam.duckdb"}


def table_rows(db: Path, sql: str) -> list[tuple]:
    with store.connect(db, read_only=True) as con:
        return con.execute(sql).fetchall()
