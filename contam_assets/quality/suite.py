"""The planted-contamination suite: documents with known benchmark leaks, and clean documents.

``build_suite`` draws, for every leak type and task, ``per_type`` instances the
detector indexes, renders each as that leak type (``quality.leaks``), embeds it
in host text (``quality.hosts``) and records the truth: which instance, which
leak type and variant, where in the document.  Clean documents (host text only)
and hard negatives (GSM-style problems that are no benchmark item: Skywork's
mock GSM8K sets) are checked against every instance's question shingles and
dropped if they overlap one.  ``write_suite`` writes it all as a real pool
(shards ``contam detect`` can scan) plus ``truth.jsonl`` and ``documents.jsonl``.

Everything is deterministic in (seed, registry, benchmark files, Python version).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import polars as pl

from contam_assets.detector.text import clean_text
from contam_assets.quality.hosts import Hosts
from contam_assets.quality.items import Key, PlantedItem, items_from_records
from contam_assets.quality.leaks import LEAK_TYPES, Block, Context, qa_text
from contam_assets.quality.overlap import ShingleIndex
from contam_assets.store.files import atomic_write_text
from contam_assets.store.pool import open_writer

# Task whose items are number-changed copies of another task's split (GSM-Hard of GSM8K test).
NUMBER_CHANGED_COPIES = {"gsm_hard": ("gsm8k", "test")}
# Hard negatives: GSM-style problems that are no benchmark item (files in the benchmark folder).
HARD_NEGATIVE_FILES = {
    "skywork_mock_eval": ("skywork_mock_gsm8k_eval_1419.jsonl", "question", "answer"),
    "skywork_mock_public": ("skywork_mock_gsm8k_test_public.jsonl", None, "text"),
}
CLEAN_SHARD_DOCS = 10_000


def derive_seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()[:8], "big")


@dataclass
class SuiteDoc:
    doc_id: str
    doc_class: str  # planted | clean | hard_negative
    kind: str  # planted: leak type; clean: web/code/prose; hard negative: its file
    variant: str
    source: str  # dataset type written into the shard
    task: str | None
    text: str
    shard: str = ""
    line: int = -1


@dataclass
class TruthRow:
    doc_id: str
    leak_type: str
    variant: str
    task: str
    split: str
    instance_index: int
    subject: str | None
    choice_index: int | None  # multiple choice: the gold option's index in the source
    role: str  # planted (the item the document was built from) | contains (another instance the text holds verbatim)
    char_start: int
    char_end: int
    detail: str  # JSON: what the leak type changed
    shard: str = ""
    line: int = -1


@dataclass
class Suite:
    seed: int
    per_type: int
    docs: list[SuiteDoc] = field(default_factory=list)
    truth: list[TruthRow] = field(default_factory=list)
    skipped: dict = field(default_factory=dict)  # counted reasons for items/documents left out
    tasks: list[str] = field(default_factory=list)

    def counts(self) -> dict:
        by_class: dict[str, int] = defaultdict(int)
        for d in self.docs:
            by_class[d.doc_class] += 1
        return dict(by_class)


# -- GSM-Hard: pair each changed item with its GSM8K source ----------------------------

def _grams(text: str, n: int = 3) -> set:
    w = clean_text(text).split()
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)} or {tuple(w)}


def pair_number_changed(copies: list[PlantedItem], sources: list[PlantedItem], min_jaccard: float = 0.5) -> list[tuple[PlantedItem, PlantedItem]]:
    """(copy, source) for every copy whose text differs from its most similar source (word 3-gram Jaccard)."""
    src_grams = [_grams(s.question) for s in sources]
    inv: dict[tuple, list[int]] = defaultdict(list)
    for i, g in enumerate(src_grams):
        for k in g:
            inv[k].append(i)
    out = []
    for c in copies:
        g = _grams(c.question)
        counts: dict[int, int] = defaultdict(int)
        for k in g:
            for i in inv.get(k, ()):
                counts[i] += 1
        if not counts:
            continue
        i = max(counts, key=lambda j: (counts[j], -j))
        jac = counts[i] / len(g | src_grams[i])
        if jac >= min_jaccard and clean_text(c.question) != clean_text(sources[i].question):
            out.append((c, sources[i]))
    return out


# -- building ------------------------------------------------------------------------

def _truth_rows(doc_id: str, leak: str, block: Block, spans: list[tuple[Key, int, int]], by_key: dict[Key, PlantedItem],
                roles: dict[Key, str] | None = None) -> list[TruthRow]:
    rows = []
    for key, s, e in spans:
        it = by_key[key]
        rows.append(TruthRow(doc_id=doc_id, leak_type=leak, variant=block.variant, task=it.task, split=it.split,
                             instance_index=it.instance_index, subject=it.subject,
                             choice_index=it.gold if it.kind == "multiple-choice" else None,
                             role=(roles or {}).get(key, "planted"), char_start=s, char_end=e,
                             detail=json.dumps(block.detail, sort_keys=True, ensure_ascii=False)))
    return rows


def _place(block: Block, item: PlantedItem, hosts: Hosts) -> tuple[str, list[tuple[Key, int, int]]]:
    if block.wrap:
        doc, s, e = hosts.wrap(block.text, block.source)
        spans = [(k, s + a, s + b) for k, a, b in block.spans] if block.spans else [(item.key, s, e)]
        return doc, spans
    return block.text, block.spans or [(item.key, 0, len(block.text))]


def _eligible(leak: str, item: PlantedItem) -> bool:
    return item.solution_indexed if leak == "solution_only" else item.indexed


def build_suite(records: pl.DataFrame, seed: int = 0, per_type: int = 20, clean_docs: int = 2000,
                hard_negatives: int | None = None, benchmarks_dir: Path | None = None,
                leak_types: list[str] | None = None, tasks: list[str] | None = None) -> Suite:
    """The planted suite for the reference ``records`` (see the module docstring).

    ``per_type``: documents per (leak type, task); ``clean_docs``: clean host documents;
    ``hard_negatives``: at most this many hard-negative documents (None = every row of the files).
    """
    items = items_from_records(records)
    if tasks:
        items = [it for it in items if it.task in tasks]
    by_key = {it.key: it for it in items}
    suite = Suite(seed=seed, per_type=per_type, tasks=sorted({it.task for it in items}))
    skipped: dict[str, int] = defaultdict(int)
    leak_types = leak_types or list(LEAK_TYPES)
    unknown = set(leak_types) - set(LEAK_TYPES)
    if unknown:
        raise ValueError(f"unknown leak type(s) {sorted(unknown)}; known: {list(LEAK_TYPES)}")

    by_task: dict[str, list[PlantedItem]] = defaultdict(list)
    by_split: dict[tuple[str, str], list[PlantedItem]] = defaultdict(list)
    for it in items:
        by_task[it.task].append(it)
        if it.indexed:
            by_split[(it.task, it.split)].append(it)

    for leak in leak_types:
        fn = LEAK_TYPES[leak]
        for task in sorted(by_task):
            rng = random.Random(derive_seed(seed, leak, task))
            hosts = Hosts(derive_seed(seed, leak, task, "hosts"))

            def same_split(item: PlantedItem, k: int, _rng=rng) -> list[PlantedItem]:
                pool = [x for x in by_split[(item.task, item.split)] if x.key != item.key]
                return _rng.sample(pool, min(k, len(pool)))

            ctx = Context(hosts=hosts, same_split=same_split)
            pool = [it for it in by_task[task] if _eligible(leak, it)]
            if task in NUMBER_CHANGED_COPIES and leak == "numbers_changed":
                pool = []  # its items are the natural examples of another task (below)
            rng.shuffle(pool)
            made = 0
            for it in pool:
                if made >= per_type:
                    break
                block = fn(it, rng, ctx)
                if block is None:
                    continue
                doc_id = f"{leak}/{task}/{made}"
                text, spans = _place(block, it, hosts)
                suite.docs.append(SuiteDoc(doc_id, "planted", leak, block.variant, block.source, task, text))
                suite.truth.extend(_truth_rows(doc_id, leak, block, spans, by_key))
                made += 1
            if 0 < made < per_type:  # made == 0: the leak type does not apply to this task
                skipped[f"{leak}/{task}: fewer eligible items than per_type"] += per_type - made
        if leak == "numbers_changed":
            _natural_number_changes(suite, items, by_key, seed, per_type, skipped)

    shingles = ShingleIndex((it.key, it.question) for it in items)
    _clean_documents(suite, shingles, seed, clean_docs, skipped)
    if benchmarks_dir is not None:
        _hard_negatives(suite, shingles, seed, hard_negatives, Path(benchmarks_dir), skipped)
    suite.skipped = dict(skipped)
    return suite


def _natural_number_changes(suite: Suite, items: list[PlantedItem], by_key: dict, seed: int, per_type: int, skipped: dict) -> None:
    """GSM-Hard items whose question differs from their GSM8K source: the source item, numbers changed."""
    for copy_task, (src_task, src_split) in NUMBER_CHANGED_COPIES.items():
        copies = [it for it in items if it.task == copy_task]
        sources = [it for it in items if it.task == src_task and it.split == src_split]
        if not copies or not sources:
            continue
        pairs = [(c, s) for c, s in pair_number_changed(copies, sources) if s.indexed]
        rng = random.Random(derive_seed(seed, "numbers_changed", copy_task, "natural"))
        hosts = Hosts(derive_seed(seed, "numbers_changed", copy_task, "natural", "hosts"))
        rng.shuffle(pairs)
        for n, (copy, src) in enumerate(pairs[:per_type]):
            text, layout = qa_text(copy, rng)
            block = Block(text, rng.choice(("math", "instruct", "web")), copy_task,
                          {"layout": layout, "copy_of": list(src.key)})
            doc, s, e = hosts.wrap(block.text, block.source)
            doc_id = f"numbers_changed/{src_task}/{copy_task}-{n}"
            suite.docs.append(SuiteDoc(doc_id, "planted", "numbers_changed", copy_task, block.source, src_task, doc))
            suite.truth.extend(_truth_rows(doc_id, "numbers_changed", block, [(src.key, s, e), (copy.key, s, e)], by_key,
                                           roles={copy.key: "contains"}))


def _clean_documents(suite: Suite, shingles: ShingleIndex, seed: int, n: int, skipped: dict) -> None:
    if n <= 0:
        return
    hosts = Hosts(derive_seed(seed, "clean"))
    made = tries = 0
    while made < n and tries < n * 2:
        tries += 1
        source, text = hosts.clean_document()
        if len(text.strip()) < 20:
            skipped["clean: empty host text"] += 1
            continue
        if shingles.contains_any(text):
            skipped["clean: overlaps an instance"] += 1
            continue
        suite.docs.append(SuiteDoc(f"clean/{made}", "clean", source, source, source, None, text))
        made += 1


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                rows.append(obj)
    return rows


def _hard_negatives(suite: Suite, shingles: ShingleIndex, seed: int, limit: int | None, bench: Path, skipped: dict) -> None:
    rng = random.Random(derive_seed(seed, "hard_negative"))
    hosts = Hosts(derive_seed(seed, "hard_negative", "hosts"))
    candidates: list[tuple[str, str]] = []
    for name, (fname, qf, af) in HARD_NEGATIVE_FILES.items():
        path = bench / fname
        if not path.is_file():
            skipped[f"hard negatives: {fname} not in the benchmark folder"] += 1
            continue
        for row in _read_jsonl(path):
            q, a = (row.get(qf) if qf else None), row.get(af)
            if not isinstance(a, str) or (qf and not isinstance(q, str)):
                skipped[f"hard negatives: {fname}: row without text"] += 1
                continue
            candidates.append((name, f"Question: {q}\nAnswer: {a}" if q else a))
    rng.shuffle(candidates)
    if limit is not None:
        candidates = candidates[:limit]
    for n, (name, block) in enumerate(candidates):
        if shingles.contains_any(block):
            skipped[f"hard negatives: {name} overlaps an instance"] += 1
            continue
        source = rng.choice(("math", "instruct", "web"))
        doc, _, _ = hosts.wrap(block, source)
        suite.docs.append(SuiteDoc(f"hard_negative/{name}/{n}", "hard_negative", name, name, source, None, doc))


# -- writing -----------------------------------------------------------------------

def assign_shards(suite: Suite) -> None:
    """Shard and line of every document: planted/<leak type>.jsonl, clean/part-NNN.jsonl.gz, clean/hard_negatives.jsonl."""
    counters: dict[str, int] = defaultdict(int)
    clean_i = 0
    for d in suite.docs:
        if d.doc_class == "planted":
            d.shard = f"planted/{d.kind}.jsonl"
        elif d.doc_class == "hard_negative":
            d.shard = "clean/hard_negatives.jsonl"
        else:
            d.shard = f"clean/part-{clean_i // CLEAN_SHARD_DOCS:03d}.jsonl.gz"
            clean_i += 1
        d.line = counters[d.shard]
        counters[d.shard] += 1
    pos = {d.doc_id: (d.shard, d.line) for d in suite.docs}
    for t in suite.truth:
        t.shard, t.line = pos[t.doc_id]


def write_suite(suite: Suite, out_dir: Path) -> dict:
    """Write the pool (shards), truth.jsonl, documents.jsonl and suite.json; return suite.json's content."""
    out_dir = Path(out_dir)
    assign_shards(suite)
    pool = out_dir / "pool"
    if pool.exists():
        import shutil

        shutil.rmtree(pool)  # a new suite replaces the old one entirely (no stale shards)
    by_shard: dict[str, list[SuiteDoc]] = defaultdict(list)
    for d in suite.docs:
        by_shard[d.shard].append(d)
    for shard, docs in by_shard.items():
        path = pool / shard
        path.parent.mkdir(parents=True, exist_ok=True)
        with open_writer(path) as fh:
            for d in docs:
                fh.write(json.dumps({"id": d.doc_id, "source": d.source, "text": d.text}, ensure_ascii=False).encode() + b"\n")
    atomic_write_text(out_dir / "truth.jsonl", "".join(json.dumps(asdict(t), ensure_ascii=False) + "\n" for t in suite.truth))
    docs_meta = [{k: v for k, v in asdict(d).items() if k != "text"} | {"n_chars": len(d.text)} for d in suite.docs]
    atomic_write_text(out_dir / "documents.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in docs_meta))
    digest = hashlib.sha256()
    for d in suite.docs:
        digest.update(d.doc_id.encode() + b"\0" + d.text.encode() + b"\0")
    meta = {"seed": suite.seed, "per_type": suite.per_type, "tasks": suite.tasks, "documents": suite.counts(),
            "planted_items": sum(t.role == "planted" for t in suite.truth), "shards": len(by_shard),
            "skipped": suite.skipped, "digest": digest.hexdigest()[:16], "pool": str(pool)}
    atomic_write_text(out_dir / "suite.json", json.dumps(meta, indent=2))
    return meta


def truth_frame(suite: Suite) -> pl.DataFrame:
    return pl.DataFrame([asdict(t) for t in suite.truth], schema=TRUTH_SCHEMA) if suite.truth else pl.DataFrame(schema=TRUTH_SCHEMA)


def documents_frame(suite: Suite) -> pl.DataFrame:
    rows = [{k: v for k, v in asdict(d).items() if k != "text"} | {"n_chars": len(d.text)} for d in suite.docs]
    return pl.DataFrame(rows, schema=DOCUMENT_SCHEMA) if rows else pl.DataFrame(schema=DOCUMENT_SCHEMA)


TRUTH_SCHEMA = {
    "doc_id": pl.Utf8, "leak_type": pl.Utf8, "variant": pl.Utf8, "task": pl.Utf8, "split": pl.Utf8,
    "instance_index": pl.Int32, "subject": pl.Utf8, "choice_index": pl.Int32, "role": pl.Utf8,
    "char_start": pl.Int64, "char_end": pl.Int64, "detail": pl.Utf8, "shard": pl.Utf8, "line": pl.Int32,
}
DOCUMENT_SCHEMA = {
    "doc_id": pl.Utf8, "doc_class": pl.Utf8, "kind": pl.Utf8, "variant": pl.Utf8, "source": pl.Utf8,
    "task": pl.Utf8, "shard": pl.Utf8, "line": pl.Int32, "n_chars": pl.Int64,
}


def load_suite_tables(suite_dir: Path) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    """(truth, documents, suite.json) of a written suite."""
    suite_dir = Path(suite_dir)
    meta_path = suite_dir / "suite.json"
    if not meta_path.exists():
        raise FileNotFoundError(f"no planted suite in {suite_dir}; materialize `planted_suite` (or run `contam quality`) first")
    truth = pl.read_ndjson(suite_dir / "truth.jsonl", schema=TRUTH_SCHEMA) if (suite_dir / "truth.jsonl").stat().st_size else pl.DataFrame(schema=TRUTH_SCHEMA)
    docs = pl.read_ndjson(suite_dir / "documents.jsonl", schema=DOCUMENT_SCHEMA)
    return truth, docs, json.loads(meta_path.read_text())
