"""Pools in every format a reader is registered for, with planted GSM8K copies.

Documents are host text around real GSM8K test items (question and worked answer) from the shared
benchmark data, or clean host text; the planted ones must be removed, the clean ones kept.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

CLEAN = "A clean document about gardening and the weather, nothing more to say about it today. "


def gsm_items(shared_data: Path, n: int, start: int = 0) -> list[dict]:
    with open(shared_data / "gsm8k_test.jsonl") as fh:
        rows = [json.loads(line) for line in fh]
    return rows[start:start + n]


def docs(shared_data: Path, tag: str, copies: int, clean: int, start: int) -> list[dict]:
    """``copies`` planted documents then ``clean`` clean ones: {id, text, url}; planted ids start with 'p'."""
    out = [{"id": f"p-{tag}-{i}", "text": f"Notes from class.\n{g['question']}\n{g['answer']}\nEnd of notes.",
            "url": f"https://example.org/{tag}/{i}"} for i, g in enumerate(gsm_items(shared_data, copies, start))]
    out += [{"id": f"c-{tag}-{i}", "text": f"{i}. " + CLEAN * 3, "url": f"https://example.org/{tag}/c{i}"}
            for i in range(clean)]
    return out


def tasks_dir(folder: Path) -> Path:
    """A task folder with GSM8K's test split only (a small reference set: fast runs)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gsm8k_test_only.toml").write_text(
        'name = "gsm8k_test_only"\nkind = "qa"\n[fields]\nquestion = "question"\nanswer = "answer"\n'
        '[[splits]]\nname = "test"\nfile = "gsm8k_test.jsonl"\n')
    return folder


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_parquet(path: Path, rows: list[dict], compression: str = "zstd", row_group_size: int = 3) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path, compression=compression, row_group_size=row_group_size)


def jsonl_and_parquet_pool(pool: Path, shared_data: Path) -> Path:
    """``a.jsonl`` (2 copies, 3 clean documents) and ``web/b.parquet`` (2 copies, 4 clean): the object-store tests' pool."""
    write_jsonl(pool / "a.jsonl", docs(shared_data, "a", 2, 3, 100))
    write_parquet(pool / "web" / "b.parquet", docs(shared_data, "b", 2, 4, 110))
    return pool


def write_feather(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    feather.write_feather(pa.Table.from_pylist(rows), path)


def save_to_disk(folder: Path, rows: list[dict]) -> None:
    """A `datasets` save_to_disk folder (state.json, dataset_info.json, data-00000-of-00001.arrow)."""
    import datasets

    datasets.disable_progress_bars()
    datasets.Dataset.from_list(rows).save_to_disk(str(folder))


def hf_cache(root: Path, rows: list[dict], repo: str = "datasets--org--fineweb-mini") -> Path:
    """A Hugging Face Hub cache folder as `huggingface_hub` lays it out: blobs, refs/main, a snapshot of symlinks."""
    base = root / repo
    (base / "blobs").mkdir(parents=True, exist_ok=True)
    rev = "0123456789abcdef0123456789abcdef01234567"
    blob = base / "blobs" / "5f1e0c7d2b"
    pq.write_table(pa.Table.from_pylist(rows), blob, compression="snappy")
    (base / "refs").mkdir(exist_ok=True)
    (base / "refs" / "main").write_text(rev)
    snap = base / "snapshots" / rev / "data"
    snap.mkdir(parents=True)
    (snap / "train-00000-of-00001.parquet").symlink_to(os.path.relpath(blob, snap))
    (base / "snapshots" / rev / "README.md").write_text("# fineweb-mini\n")
    return base


def contam(*args, env_extra=None, cwd=None, unset=()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in {**os.environ, **(env_extra or {})}.items() if k not in unset}
    return subprocess.run([sys.executable, "-m", "contam_assets.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=900)


def ids(table: pa.Table) -> list[str]:
    return table.column("id").to_pylist()
