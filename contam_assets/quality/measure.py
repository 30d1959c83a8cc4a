"""Run the detector over a written planted suite with one preset and score it.

The suite's shards are scanned with ``rescan.shard.scan_shard``, the very code
path of ``contam detect`` (reference set and index built for the preset, since
presets change the index: answer n-gram size, passages).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.config import preset as preset_config
from contam_assets.detector.index_build import build_index
from contam_assets.detector.matches import MATCH_SCHEMA, Reference
from contam_assets.quality.items import items_from_records
from contam_assets.quality.overlap import PresenceIndex
from contam_assets.quality.scores import QualityResult, Targets, evaluate
from contam_assets.quality.suite import load_suite_tables
from contam_assets.rescan.shard import scan_shard
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import TaskSpec
from contam_assets.store.pool import Document, list_shards, read_shard

MATCH_KEEP = ["shard", "line", "doc_id", "task", "suite", "split", "instance_index", "subject", "choice_index",
              "score", "required_score", "flagged", "needs_review", "question_overlap", "answer_overlap", "training_text",
              "reason"]


@dataclass
class Detector:
    name: str
    cfg: DetectConfig
    records: pl.DataFrame
    index: object
    reference: Reference
    seconds: float


def build_detector(name: str, specs: list[TaskSpec], benchmarks_dir: Path | None, **overrides) -> Detector:
    t0 = time.perf_counter()
    cfg = preset_config(name, **overrides)
    records, _ = build_reference_set(specs, benchmarks_dir, cfg)
    if records.filter(pl.col("indexed")).height == 0:
        raise ValueError(f"no indexable benchmark instance for the tasks {[s.name for s in specs]} in {benchmarks_dir}")
    index = build_index(records, cfg)
    return Detector(name, cfg, records, index, Reference(records), time.perf_counter() - t0)


def scan_suite(pool: Path, det: Detector) -> tuple[pl.DataFrame, list[dict]]:
    """Match rows (selected columns) of every shard of the suite pool, and the shards' stats."""
    frames, stats = [], []
    for shard in list_shards(pool):
        res = scan_shard(pool / shard, shard, det.index, det.reference, det.cfg, preset=det.name)
        stats.append(res.stats)
        if res.matches.height:
            frames.append(res.matches.select(MATCH_KEEP))
    if not frames:
        return pl.DataFrame(schema={c: MATCH_SCHEMA[c] for c in MATCH_KEEP}), stats
    return pl.concat(frames), stats


def read_texts(pool: Path, wanted: set[tuple[str, int]]) -> dict[tuple[str, int], str]:
    out: dict[tuple[str, int], str] = {}
    for shard in sorted({s for s, _ in wanted}):
        lines = {l for s, l in wanted if s == shard}
        for doc in read_shard(pool / shard, shard):
            if isinstance(doc, Document) and doc.line in lines:
                out[(shard, doc.line)] = doc.text
    return out


def measure(preset_name: str, suite_dir: Path, specs: list[TaskSpec], benchmarks_dir: Path | None,
            targets: Targets | None = None, log=print, **overrides) -> tuple[QualityResult, pl.DataFrame]:
    """Score one preset on the suite in ``suite_dir``; returns (result, match rows)."""
    truth, docs, meta = load_suite_tables(suite_dir)
    pool = Path(suite_dir) / "pool"
    suite_tasks = set(meta.get("tasks") or [])
    specs = [s for s in specs if not suite_tasks or s.name in suite_tasks]
    det = build_detector(preset_name, specs, benchmarks_dir, **overrides)
    log(f"[{preset_name}] reference set and index: {det.index.n_records} records in {det.seconds:.1f}s")
    t0 = time.perf_counter()
    matches, stats = scan_suite(pool, det)
    read = sum(s["read"] for s in stats)
    rejected = sum(s["rejected"] for s in stats)
    if read - rejected != docs.height:
        raise ValueError(f"suite pool holds {read - rejected} readable documents but documents.jsonl lists {docs.height}")
    log(f"[{preset_name}] scanned {read} documents, {matches.height} match rows in {time.perf_counter() - t0:.1f}s")
    wanted = {(d["shard"], d["line"]) for d in docs.filter(pl.col("doc_class") == "planted").select("shard", "line").to_dicts()}
    if matches.height:
        wanted |= {(r["shard"], r["line"]) for r in matches.filter(pl.col("flagged")).select("shard", "line").unique().to_dicts()}
    texts = read_texts(pool, wanted)
    items = [it for it in items_from_records(det.records) if not suite_tasks or it.task in suite_tasks]
    presence = PresenceIndex((it.key, it.question) for it in items)
    result = evaluate(preset_name, truth, docs, matches, texts, items, presence, targets)
    result.summary.update(scan_seconds=round(time.perf_counter() - t0, 1), index_seconds=round(det.seconds, 1),
                          documents_scanned=read, bytes_scanned=sum(s["bytes"] for s in stats),
                          config=det.cfg.reference_key() | {"threshold": det.cfg.threshold})
    return result, matches
