"""What `ngram_index` does: the index of the reference set, taken as it is, grown by the tasks that changed, or built.
(And the digest of what `reference_set` is built from, its files' hashes kept between runs: ``reference_inputs``.)

- **Kept by its inputs.**  Where the reference set was built from the same inputs as the current index
  (`registry.inputs_digest`, recorded in `reference_state` and in `<out>/index/current.json`), the index is mapped
  from its folder and its task hashes read from there: the records are not read from DuckDB, nor digested.
- **Kept by its records.**  Else the records are read and digested (`artifacts.reference_digest`); an index saved
  under that digest is mapped.
- **Grown.**  Else, where the current index was saved with its token frequencies and the tasks it shares with the
  new set are the same records in the same order, only the changed tasks' records are indexed and the rest is
  written from the saved index (detector/index_grow.py): the same files a build gives.
- **Built** otherwise (detector/index_build.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from contam_assets import store
from contam_assets.detector import build_budget
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.index_build import build_index
from contam_assets.detector.index_grow import grow_index
from contam_assets.rescan.plan import TASK_HASHES_FILE, TaskHasher, load_task_hashes, task_hashes
from contam_assets.sources.registry import inputs_digest
from contam_assets.store import artifacts, tables
from contam_assets.store.files import atomic_write_text

SOURCE_HASHES = "source_hashes.json"  # under <out>/index/: the benchmark files' hashes, by size, times and inode


def reference_inputs(out: Path, specs, benchmarks_dir, cfg: DetectConfig, version: str) -> str:
    """``registry.inputs_digest`` of the reference set, the hashes of files unchanged since the last run (size,
    mtime, ctime, inode) taken from ``<out>/index/source_hashes.json`` instead of reading the files again."""
    path = Path(out) / "index" / SOURCE_HASHES
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    hashes = dict(known) if isinstance(known, dict) else {}
    inputs = inputs_digest(specs, benchmarks_dir, cfg.reference_key(), version, file_hashes=hashes)
    if hashes != known:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(hashes, sort_keys=True))
    return inputs


@dataclass
class IndexStep:
    index: NgramIndex
    digest: str
    hashes: dict[str, str]  # task -> task hash (rescan/plan.py)
    how: str  # kept | reused | grown | built
    records: pl.DataFrame | None  # as read from DuckDB; None where the index was kept by its inputs (not read)

    @property
    def reused(self) -> bool:
        return self.how in ("kept", "reused")


def index_step(out: Path, cfg: DetectConfig, contam_db, say) -> IndexStep:
    """The current index of the reference set in DuckDB (kept, grown or built), its folder marked current."""
    with contam_db.connect(read_only=True) as con:
        state = tables.reference_state(con)
        inputs = state["inputs"] if state else None
        digest = artifacts.digest_for_inputs(out, inputs)
        # the records as `reference_set` wrote them, mapped (page cache, not a copy of this process's), else from DuckDB
        staged = None if digest else artifacts.reference_records(out, inputs, state["records"] if state else None)
        records = None if digest or staged else store.query_df(con, "select * from instances order by record_id")
    records = artifacts.read_records(staged) if staged is not None else records
    source = records  # what the digests and the build read the texts from
    if staged is not None and records["record_id"].is_sorted():
        records = records.with_columns(pl.col("record_id").set_sorted())  # ids in order: no sort copies the table
        # the texts read from the file a batch at a time, not through the mapped table (whose pages, once touched,
        # would count in this process's memory: the whole file's at 6 M records)
        source = artifacts.RecordFile(staged / artifacts.RECORDS_MAPPED)
    folder = artifacts.index_dir(out, digest) if digest else None
    if records is None:
        index = NgramIndex.load(folder / "index")
        step = IndexStep(index, digest, load_task_hashes(folder, None, cfg), "kept", None)
        artifacts.mark_current(out, digest, inputs)
        return step
    previous = _current(out)
    digest, hashes, text_bytes = _digests(source, cfg)
    folder = artifacts.index_dir(out, digest)
    if artifacts.has_index(out, digest):
        index, how = NgramIndex.load(folder / "index"), "reused"
    else:
        progress = build_budget.BuildProgress(say, text_bytes, phases=("index",))
        index, how = _grown(out, previous, records, hashes, cfg, progress), "grown"
        if index is None:  # the spill files under the output folder, in a temporary folder the sweep recognises
            index, how = build_index(source, cfg, progress=progress, spill_dir=out / "index"), "built"
        artifacts.save_index(out, digest, records, index, records_from=staged)  # the files linked, not written again
    atomic_write_text(folder / TASK_HASHES_FILE, json.dumps(hashes, indent=1))
    artifacts.mark_current(out, digest, inputs)
    return IndexStep(index, digest, hashes, how, records)


TEXTS = ("question", "answer", "passage")


def _digests(records, cfg: DetectConfig) -> tuple[str, dict[str, str], int]:
    """The records' digest (`artifacts.reference_digest`), task hashes (`rescan.plan.task_hashes`) and bytes of
    text; ``records``: a table, or a file of them in record_id order (`artifacts.RecordFile`), read once, a batch
    at a time, for all three."""
    if isinstance(records, pl.DataFrame):
        text_bytes = sum(int(records[c].str.len_bytes().sum() or 0) for c in TEXTS)
        return artifacts.reference_digest(records, cfg), task_hashes(records, cfg), text_bytes
    digest, hasher, text_bytes = artifacts.RecordsDigest(cfg), TaskHasher(cfg), 0
    for part in records.batches():
        digest.add(part)
        hasher.add(part)
        text_bytes += sum(int(part[c].str.len_bytes().sum() or 0) for c in TEXTS)
    return digest.hexdigest(), hasher.hashes(), text_bytes


def _current(out: Path) -> str | None:
    try:
        return artifacts.current_digest(out)
    except (FileNotFoundError, ValueError, KeyError):
        return None


def _grown(out: Path, previous: str | None, records: pl.DataFrame, hashes: dict[str, str], cfg: DetectConfig,
           progress) -> NgramIndex | None:
    """The index of ``records`` grown from the current one (``previous``), or None where it cannot be."""
    if previous is None or not artifacts.has_index(out, previous):
        return None
    folder = artifacts.index_dir(out, previous)
    if not (folder / TASK_HASHES_FILE).is_file():
        return None
    old = NgramIndex.load(folder / "index")
    return grow_index(old, pl.scan_parquet(folder / "records.parquet"), json.loads((folder / TASK_HASHES_FILE).read_text()), records, hashes, cfg,
                      spill_dir=out / "index", progress=progress)
