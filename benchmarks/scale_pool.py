"""The scale run's pool (benchmarks/scale_run.py): real-looking text in plain, .gz and .zst shards, with real
benchmark items planted verbatim into a share of the documents, generated once per size and seed."""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import shutil
import sys
from pathlib import Path

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput_pool import Sources  # noqa: E402

MIN_WORDS = 40
UNITS = {"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*([\d.]+)\s*([kmgt]b)?\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"size like 1GB, 200MB or 5MB, got {text!r}")
    return int(float(m.group(1)) * UNITS[m.group(2) or "mb"])


# -- the pool ------------------------------------------------------------------

def benchmark_items(shared: Path) -> list[tuple[str, str]]:
    """(task, verbatim text) of the items planted: GSM8K test, MBPP, HumanEval."""
    def rows(name):
        opener = gzip.open if name.endswith(".gz") else open
        with opener(shared / name, "rt", encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]

    items = [("gsm8k", f"{r['question']}\n{r['answer']}") for r in rows("gsm8k_test.jsonl")]
    items += [("mbpp", f"{r['text']}\n{r['code']}") for r in rows("mbpp.jsonl")]
    items += [("humaneval", r["prompt"] + r["canonical_solution"]) for r in rows("HumanEval.jsonl.gz")]
    # at least MIN_WORDS words: shorter MBPP one-liners (15-27 words) are below what decon's n-gram rules tell
    # from chance (docs/quality.md measures recall per leak type); this benchmark plants what must be caught
    return [(task, text) for task, text in items if len(text.split()) >= MIN_WORDS]


def _writer(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "wb", compresslevel=1)
    if path.suffix == ".zst":
        return zstandard.ZstdCompressor(level=3).stream_writer(open(path, "wb"))
    return open(path, "wb")


def build_pool(pool: Path, size: int, n_shards: int, seed: int, plant_rate: float, shared: Path,
               codecs: tuple[str, ...] = ("", ".gz", ".zst")) -> dict:
    """Shards of about size / n_shards raw JSONL bytes each (by default every third .gz, every third .zst: shard s
    takes ``codecs[s % len(codecs)]``); the planted truth."""
    truth_file = pool.with_name(pool.name + ".truth.json")  # beside the pool: a .json in it would be a shard
    if truth_file.exists() and pool.is_dir():
        return json.loads(truth_file.read_text())
    shutil.rmtree(pool, ignore_errors=True)
    pool.mkdir(parents=True)
    rng, src, items = random.Random(seed), Sources(seed), benchmark_items(shared)
    planted, raw_bytes, docs = [], 0, 0
    for s in range(n_shards):
        name = f"part-{s:04d}.jsonl" + codecs[s % len(codecs)]
        size_s, line = 0, 0
        with _writer(pool / name) as fh:
            while size_s < size / n_shards:
                source, text = src.document()
                if rng.random() < plant_rate:
                    task, item = rng.choice(items)
                    form = rng.choice(["inline", "instruct", "appended"])
                    text = {"inline": f"{src.host.paragraph()}\n\n{item}\n\n{text}",
                            "instruct": f"User: {item.splitlines()[0]}\n\nAssistant: {item}\n\n{text}",
                            "appended": f"{text}\n\n{item}\n"}[form]
                    planted.append(dict(shard=name, line=line, task=task, form=form))
                raw = json.dumps({"id": f"{name}:{line}", "source": source, "text": text}).encode() + b"\n"
                fh.write(raw)
                size_s += len(raw)
                line += 1
        raw_bytes, docs = raw_bytes + size_s, docs + line
    truth = dict(raw_bytes=raw_bytes, documents=docs, shards=n_shards, planted=planted,
                 stored_bytes=sum(p.stat().st_size for p in pool.iterdir()))
    truth_file.write_text(json.dumps(truth))  # last: a half-written pool is rebuilt
    return truth


def pool_shards(pool: Path) -> list[str]:
    return sorted(p.name for p in pool.iterdir() if ".jsonl" in p.name)
