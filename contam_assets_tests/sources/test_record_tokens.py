"""The token ids the decon filters make, kept beside the records file (`detector/record_tokens.py`): the index build
reads them in place of cleaning and tokenizing the texts again, and they are the ids it would make, on real
benchmarks; ids that do not belong to the records file (written again another way) or to the build's settings are
not read."""

from __future__ import annotations

import filecmp

import numpy as np
import pytest

from contam_assets.defs.resources import DEFAULT_TASKS_DIR
from contam_assets.detector import record_tokens
from contam_assets.detector.config import preset
from contam_assets.detector.index_build import _batches, build_index
from contam_assets.sources import kept_tokens, reference
from contam_assets.sources.registry import load_registry
from contam_assets.store import artifacts


@pytest.fixture(scope="module")
def written(shared_data, tmp_path_factory):
    """Real GSM8K, ARC, MMLU and MBPP (its derived solution suite) written as `reference_set` writes them, in tables of
    997 records whose filter chunks (331) do not divide them."""
    folder = tmp_path_factory.mktemp("tokens") / "reference"
    specs = load_registry(DEFAULT_TASKS_DIR, ["gsm8k", "arc_easy", "mmlu", "mbpp"])
    mp = pytest.MonkeyPatch()
    mp.setattr(reference, "COLUMNS_CHUNK", 997)
    mp.setattr(reference, "FILTER_CHUNK", 331)
    try:
        reference.write_reference_set(specs, shared_data, preset("default"), folder)
    finally:
        mp.undo()
    return folder


def _joined(batches):
    """The record ids and, per field, every record's ids back to back and their counts, over all the batches."""
    ids = np.concatenate([p["record_id"].to_numpy() for p, *_ in batches])
    fields = []
    for k in range(3):
        tokens = np.concatenate([b[1 + k][0] for b in batches])
        assert tokens.dtype == np.uint64
        fields.append((tokens, np.concatenate([np.diff(b[1 + k][1]) for b in batches])))
    return ids, fields


def _same_batches(records, cfg, size):
    """The ids read from the kept file equal the ids the build makes from the texts (``encode_flat``)."""
    kept = list(record_tokens.encoded_batches(records, size, cfg, _batches))
    table = artifacts.read_records(records.path.parent)
    made = list(record_tokens.encoded_batches(table, size, cfg, _batches))
    assert len(kept) > 3 and len(made) > 3
    (rk, fk), (rm, fm) = _joined(kept), _joined(made)
    assert np.array_equal(rk, rm)
    for (tk, nk), (tm, nm) in zip(fk, fm):
        assert np.array_equal(nk, nm) and np.array_equal(tk, tm)
    return kept


def test_kept_ids_are_the_builds_own(written):
    cfg = preset("default")
    records = artifacts.RecordFile(written / artifacts.RECORDS_MAPPED)
    assert record_tokens.saved(records, cfg) == written / record_tokens.TOKENS_FILE
    kept = _same_batches(records, cfg, 1000)  # batches of the build cut across the tables written
    assert sum(len(q) for _, (q, _), _, _ in kept) > 1_000_000
    assert any(len(a) for _, _, (a, _), _ in kept)
    # other settings (answers not indexed, another tokenizer) do not read them
    assert record_tokens.saved(records, preset("default", index_answers=False)) is None
    assert record_tokens.saved(records, preset("default", tokenizer="word")) is None


def test_the_index_built_from_kept_ids_equals_the_one_built_from_the_texts(written, tmp_path):
    cfg = preset("default")
    from_ids = build_index(artifacts.RecordFile(written / artifacts.RECORDS_MAPPED), cfg, spill_dir=tmp_path / "a")
    from_texts = build_index(artifacts.read_records(written), cfg, spill_dir=tmp_path / "b")
    a, b = from_ids.__dict__["_staging"], from_texts.__dict__["_staging"]
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir()) and len(names) > 20
    assert [n for n in names if not filecmp.cmp(a / n, b / n, shallow=False)] == []


def test_ids_of_records_written_again_are_not_read(written, tmp_path):
    cfg = preset("default")
    folder = tmp_path / "again"
    folder.mkdir()
    for name in (artifacts.RECORDS_FILE, artifacts.RECORDS_MAPPED, record_tokens.TOKENS_FILE, record_tokens.TOKENS_STAMP):
        (folder / name).write_bytes((written / name).read_bytes())
    records = artifacts.RecordFile(folder / artifacts.RECORDS_MAPPED)
    assert record_tokens.saved(records, cfg) is None  # a copy: another file than the one they were kept for
    table = artifacts.read_records(written)
    artifacts.write_records(folder, table.head(10))  # the records written another way: the stamp removed
    assert not (folder / record_tokens.TOKENS_STAMP).exists()
    with kept_tokens.TokenWriter(folder, cfg) as ids, artifacts.RecordsWriter(folder, reference.RECORD_SCHEMA) as out:
        recs = table.head(10).select("suite", "question", "answer", "passage", "fingerprint").to_dicts()
        chunk = record_tokens.ChunkTexts(recs, cfg)
        out.write(table.head(10))
        ids.add([chunk.flat()])
    records = artifacts.RecordFile(folder / artifacts.RECORDS_MAPPED)
    assert record_tokens.saved(records, cfg) == folder / record_tokens.TOKENS_FILE
    with artifacts.RecordsWriter(folder, reference.RECORD_SCHEMA) as out:  # written again, without ids
        out.write(table.head(12))
    assert record_tokens.saved(artifacts.RecordFile(folder / artifacts.RECORDS_MAPPED), cfg) is None
