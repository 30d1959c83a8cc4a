"""The planted benchmark pool of scan_throughput.py and the peer detectors it is measured against."""

from __future__ import annotations

import json
import random
import re
import sysconfig
import time
from pathlib import Path

import polars as pl

from contam_assets.demo import HostText

# -- the pool ------------------------------------------------------------------

class Sources:
    """Real-looking host text: the project's host text, Python's own documentation and source."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.host = HostText(seed)
        from pydoc_data.topics import topics

        self.doc_paras = [p.strip() for t in sorted(topics) for p in re.split(r"\n\s*\n", topics[t]) if len(p.split()) > 8]
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        self.code_files = sorted(stdlib.glob("*.py"))
        self._code_cache: dict[Path, list[str]] = {}

    def code_chunk(self) -> str:
        path = self.rng.choice(self.code_files)
        lines = self._code_cache.get(path)
        if lines is None:
            lines = self._code_cache[path] = path.read_text(encoding="utf-8", errors="replace").splitlines()
        k = self.rng.randint(20, 150)
        s = self.rng.randint(0, max(0, len(lines) - k))
        return "\n".join(lines[s : s + k])

    def docs(self, k: int) -> str:
        s = self.rng.randint(0, len(self.doc_paras) - k)
        return "\n\n".join(self.doc_paras[s : s + k])

    def document(self) -> tuple[str, str]:
        r = self.rng.random()
        if r < 0.35:
            return "web", self.host.document()
        if r < 0.55:
            return "docs", self.docs(self.rng.randint(2, 12))
        if r < 0.75:
            return "code", self.host.code_document() if self.rng.random() < 0.5 else self.code_chunk()
        if r < 0.90:
            return "instruct", f"User: {self.rng.choice(self.host.sentences)}\n\nAssistant: {self.host.document()}"
        parts = [self.host.paragraph() if self.rng.random() < 0.5 else self.docs(1) for _ in range(self.rng.randint(15, 60))]
        return "long", "\n\n".join(parts)


def plant(rng: random.Random, src: Sources, doc: str, records: dict) -> tuple[str, str, dict]:
    kind = rng.choice(["verbatim_qa", "instruct", "question_only", "mc", "solution_escaped", "near_miss"])
    if kind == "mc" and records["mc"]:
        grp = rng.choice(records["mc"])
        opts = "\n".join(f"{'ABCDEFGH'[i]}. {r['answer']}" for i, r in enumerate(grp))
        return kind, f"{doc}\n\n{grp[0]['question']}\n{opts}\nAnswer: A\n\n{src.host.paragraph()}", grp[0]
    if kind == "solution_escaped" and records["solutions"]:
        rec = rng.choice(records["solutions"])
        return kind, f"{doc}\n\nsnippet = {json.dumps({'completion': rec['question']})}\n", rec
    rec = rng.choice(records["qa"])
    q, a = rec["question"], rec["answer"] or ""
    if kind == "instruct":
        return kind, f"User: {q}\n\nAssistant: {a}\n\n{doc}", rec
    if kind == "question_only":
        return kind, f"{doc}\n\n{q}\n\n{src.host.paragraph()}", rec
    if kind == "near_miss":
        ws = q.split()
        q = " ".join(rng.choice(src.host.sentences).split()[0] if i % 7 == 6 else w for i, w in enumerate(ws))
        return kind, f"{doc}\n\n{q}\n{a}", rec
    return "verbatim_qa", f"{src.host.paragraph()}\n\n{q}\n{a}\n\n{doc}", rec


def build_pool(pool_dir: Path, records: pl.DataFrame, mb: float, seed: int, plant_rate: float, n_shards: int = 2) -> list[dict]:
    """Write ``n_shards`` shards of about ``mb / n_shards`` MB each; return the planted truth."""
    rng = random.Random(seed)
    src = Sources(seed)
    prim = records.filter(~pl.col("derived") & pl.col("indexed")).sort("record_id")
    mc: dict[tuple, list[dict]] = {}
    for r in prim.filter(pl.col("kind") == "multiple-choice").to_dicts():
        mc.setdefault((r["task"], r["split"], r["instance_index"], r["subject"]), []).append(r)
    pools = {
        "qa": prim.filter(pl.col("kind") != "multiple-choice").to_dicts(),
        "mc": [sorted(g, key=lambda r: r["choice_index"]) for g in mc.values() if len(g) >= 2],
        "solutions": records.filter(pl.col("derived") & pl.col("indexed")).sort("record_id").to_dicts(),
    }
    truth = []
    target = mb * 1e6 / n_shards
    pool_dir.mkdir(parents=True, exist_ok=True)
    for s in range(n_shards):
        shard = f"part-{s:03d}.jsonl"
        size, line = 0, 0
        with open(pool_dir / shard, "wb") as fh:
            while size < target:
                source, text = src.document()
                if rng.random() < plant_rate:
                    kind, text, rec = plant(rng, src, text, pools)
                    truth.append(dict(shard=shard, line=line, kind=kind, task=rec["task"], split=rec["split"],
                                      instance_index=rec["instance_index"]))
                raw = json.dumps({"id": f"{shard}:{line}", "source": source, "text": text}).encode() + b"\n"
                fh.write(raw)
                size += len(raw)
                line += 1
    return truth


def novel_pool(paths: list[Path], out: Path, rate: float, seed: int) -> list[Path]:
    """Copies of the shards with a share of the words replaced by random lowercase words."""
    rng = random.Random(seed + 7)
    letters = "abcdefghijklmnopqrstuvwxyz"
    out.mkdir(parents=True, exist_ok=True)
    result = []
    for p in paths:
        dst = out / p.name
        with open(p, "rb") as fin, open(dst, "wb") as fout:
            for raw in fin:
                obj = json.loads(raw)
                words = obj["text"].split(" ")
                obj["text"] = " ".join("".join(rng.choice(letters) for _ in range(rng.randint(4, 10)))
                                       if rng.random() < rate else w for w in words)
                fout.write(json.dumps(obj).encode() + b"\n")
        result.append(dst)
    return result


def _str_hash(func):
    """datatrove 0.10 hands str to xxhash, which xxhash >= 4 refuses; older xxhash hashed the UTF-8 bytes."""
    def hash_str(s):
        return func(s.encode("utf-8") if isinstance(s, str) else s)

    return hash_str


class DatatrovePeer:
    def __init__(self, records: pl.DataFrame, folder: Path):
        import numpy as np
        from datatrove.data import Document
        from datatrove.pipeline.decont.n_grams import (
            NGramsDecontConfig,
            NGramsDecontFilter,
            NGramsDecontIndexer,
        )

        self.Document = Document
        # NGramsDecontIndexer.run() loads tasks through lighteval and the Hub, and constructing the
        # step demands lighteval; its compute_hashes needs only these three attributes.
        from types import SimpleNamespace

        from datatrove.utils.hashing import create_hash_func
        from datatrove.utils.typeshelper import Languages
        from datatrove.utils.word_tokenizers import load_word_tokenizer

        config = NGramsDecontConfig()
        hash_func = _str_hash(create_hash_func(config.hash_config))
        state = SimpleNamespace(config=config, tokenizer=load_word_tokenizer(Languages.english), hash_func=hash_func)
        indexer = SimpleNamespace(config=config, compute_hashes=lambda label, query=None:
                                  NGramsDecontIndexer.compute_hashes(state, label, query))
        by_task: dict[str, set] = {}
        for r in records.filter(pl.col("indexed")).iter_rows(named=True):
            label = r["answer"] or r["question"]
            query = r["question"] if r["answer"] else None
            by_task.setdefault(r["task"], set()).update(indexer.compute_hashes(label, query))
        for task, hashes in by_task.items():
            np.array(sorted(hashes), dtype=indexer.config.hash_config.np_descr).tofile(folder / f"{task}.index.hashes")
        self.filter = NGramsDecontFilter(index_folder=str(folder))
        self.filter.hash_func = _str_hash(self.filter.hash_func)
        self.filter.load_index_hashes()
        self.n_hashes = sum(len(h) for h in by_task.values())

    def run(self, texts: list[str]) -> tuple[float, set[int]]:
        flagged = set()
        t0 = time.process_time()
        for i, t in enumerate(texts):
            keep = self.filter.filter(self.Document(text=t, id=str(i)))
            if keep is not True:
                flagged.add(i)
        return time.process_time() - t0, flagged


class JanitorPeer:
    def __init__(self, records: pl.DataFrame):
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            from lm_eval.decontamination.janitor import Janitor
        self.janitor = Janitor()
        for r in records.filter(pl.col("indexed")).iter_rows(named=True):
            self.janitor.register_contaminant_python(f"{r['question']} {r['answer'] or ''}")

    def run(self, texts: list[str]) -> tuple[float, set[int]]:
        t0 = time.process_time()
        for t in texts:
            self.janitor.clean_python(t)
        secs = time.process_time() - t0
        # which documents it found: the same n-gram test clean_python makes, outside the timing
        from lm_eval.decontamination.janitor import word_ngrams_indices

        j = self.janitor
        flagged = {i for i, t in enumerate(texts)
                   if any(j.normalize_string(g) in j.dirt_ngrams for g, _ in word_ngrams_indices(t, j.ngram_n))}
        return secs, flagged
