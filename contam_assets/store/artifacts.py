"""Files the data side keeps beside the DuckDB database.

<out>/index/<digest>/records.parquet   reference records (what a match says about the instance)
<out>/index/<digest>/index.npz         the n-gram index
<out>/index/current.json               digest of the index the last `ngram_index` run built
<out>/mix/<shard>                      decontaminated mix (same relative paths as the pool)
<out>/rejected/<shard>.jsonl           documents rejected as bad input, with the reason
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import polars as pl

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex
from contam_assets.store.files import atomic_write_text
from contam_assets.store.pool import Reject, open_binary, open_writer


def reference_digest(records: pl.DataFrame, cfg: DetectConfig) -> str:
    h = hashlib.sha256(json.dumps(cfg.reference_key(), sort_keys=True).encode())
    cols = ["record_id", "suite", "split", "instance_index", "question", "answer", "passage", "indexed"]
    h.update(records.select(cols).write_csv().encode())
    return h.hexdigest()[:16]


def index_dir(out_dir: Path, digest: str) -> Path:
    return Path(out_dir) / "index" / digest


def save_index(out_dir: Path, digest: str, records: pl.DataFrame, index: NgramIndex) -> Path:
    d = index_dir(out_dir, digest)
    d.mkdir(parents=True, exist_ok=True)
    records.write_parquet(d / "records.parquet")
    index.save(d / "index.npz")
    atomic_write_text(Path(out_dir) / "index" / "current.json", json.dumps({"digest": digest}))
    return d


def has_index(out_dir: Path, digest: str) -> bool:
    d = index_dir(out_dir, digest)
    return (d / "index.npz").exists() and (d / "records.parquet").exists()


def current_digest(out_dir: Path) -> str:
    p = Path(out_dir) / "index" / "current.json"
    if not p.exists():
        raise FileNotFoundError(f"no n-gram index under {out_dir}; materialize `ngram_index` (or run `contam detect`) first")
    return json.loads(p.read_text())["digest"]


def load_index(out_dir: Path, digest: str | None = None) -> tuple[NgramIndex, pl.DataFrame, str]:
    digest = digest or current_digest(out_dir)
    d = index_dir(out_dir, digest)
    return NgramIndex.load(d / "index.npz"), pl.read_parquet(d / "records.parquet"), digest


def write_rejects(out_dir: Path, shard: str, rejects: list[Reject]) -> Path | None:
    path = Path(out_dir) / "rejected" / f"{shard}.jsonl"
    if not rejects:
        if path.exists():
            path.unlink()
        return None
    atomic_write_text(path, "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in rejects))
    return path


def write_mix_shard(pool_dir: Path, out_dir: Path, shard: str, drop: set[int], rejected: set[int], cut=None) -> dict:
    """Copy a shard to <out>/mix/<shard> without the dropped and rejected lines, atomically.

    Lines are copied byte for byte (same format and compression as the input).
    ``cut`` (span removal, store/cuts.SpanCutter): a dropped line is replaced by ``cut(line, raw)``
    instead, counted as ``cut``; a None from it drops the line after all.
    """
    src = Path(pool_dir) / shard
    dst = Path(out_dir) / "mix" / shard
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp-{os.getpid()}")
    written = dropped = skipped = read = n_cut = 0
    try:
        with open_binary(src) as fin, open_writer(tmp, like=dst) as fout:
            for line_no, raw in enumerate(fin):
                read += 1
                if line_no in rejected:
                    skipped += 1
                    continue
                if line_no in drop:
                    new = cut(line_no, raw.rstrip(b"\r\n")) if cut is not None else None  # span removal hook
                    if new is None:
                        dropped += 1
                    else:
                        fout.write(new + b"\n")
                        n_cut += 1
                    continue
                fout.write(raw if raw.endswith(b"\n") else raw + b"\n")
                written += 1
    except (OSError, EOFError):
        # The unreadable rest of a corrupt shard was already counted as a reject by the scan;
        # anything else is a real error.
        if not rejected or max(rejected) < read:
            tmp.unlink(missing_ok=True)
            raise
    tmp.replace(dst)
    return {"shard": shard, "written": written, "dropped": dropped, "rejected": skipped, "path": str(dst), "cut": n_cut}


def count_lines(path: Path) -> int:
    with open_binary(path) as fh:
        return sum(1 for _ in fh)
