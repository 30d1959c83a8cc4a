"""A cached token stream's own files and the shard lines it points at.

- ``docs.bin`` / ``meta.json``: a stream cut short, disagreeing with itself or missing a file is no stream, and
  the next writer of its key replaces it;
- the stream key names every cleaning option (a stream's check values prove its lines and ids unchanged, not the
  cleaning the ids were made with);
- ``incremental.iter_documents_from`` (each wanted line read where the stream recorded it starts, the newlines
  before it counted) gives what ``iter_documents_at`` (lines found by their newlines) gives, and no document for a
  line that kept its start under another number.
"""

from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pytest

from contam_assets.rescan import incremental
from contam_assets.store import token_cache
from contam_assets.store.pool import Document, read_shard


@pytest.mark.parametrize("damage", ["truncated", "no_meta", "offsets", "count"])
def test_a_damaged_stream_index_is_no_stream(tmp_path, damage):
    """docs.bin cut short or disagreeing with itself, or meta.json missing: load gives None (the shard is then
    scanned from its text), never a stream with wrong offsets."""
    w = token_cache.StreamWriter(tmp_path, "s.jsonl", "k" * 16, "cl100k")
    w.add(0, np.array([1, 2, 3]), b'{"text": "a"}')
    w.add(2, np.array([4, 5]), b'{"text": "b"}')
    w.commit({"read": 3, "rejected": 0, "bytes": 10, "reject_reasons": "{}", "shard_fingerprint": "f"}, [])
    s = token_cache.load(tmp_path, "s.jsonl", "k" * 16)
    assert s.lines.tolist() == [0, 2] and s.offsets.tolist() == [0, 3, 5] and s.tokens.tolist() == [1, 2, 3, 4, 5]
    assert s.holds(0, b'{"text": "a"}') and not s.holds(0, b'{"text": "b"}') and s.holds(1, b'{"text": "b"}')
    d = token_cache.stream_dir(tmp_path, "s.jsonl", "k" * 16)
    table = np.fromfile(d / "docs.bin", dtype=np.int64)
    if damage == "truncated":
        table[:-1].tofile(d / "docs.bin")
    elif damage == "no_meta":
        (d / "meta.json").unlink()
    elif damage == "offsets":
        table[4] = 6  # offsets 0, 6, 5: the second document would end before it starts
        table.tofile(d / "docs.bin")
    else:
        table[0] = 1
        table.tofile(d / "docs.bin")
    assert token_cache.load(tmp_path, "s.jsonl", "k" * 16) is None
    if damage == "no_meta":
        assert not token_cache.exists(tmp_path, "s.jsonl", "k" * 16)
    w = token_cache.StreamWriter(tmp_path, "s.jsonl", "k" * 16, "cl100k")  # the next writer of the key replaces it
    w.add(0, np.array([1, 2, 3]), b'{"text": "a"}')
    w.commit({"read": 1, "rejected": 0, "bytes": 10, "reject_reasons": "{}", "shard_fingerprint": "f"}, [])
    assert token_cache.load(tmp_path, "s.jsonl", "k" * 16).tokens.tolist() == [1, 2, 3]


def test_the_stream_key_names_every_cleaning_option():
    """A stream tokenized with one cleaning is never found for another (markup included): its check values prove
    the line and the ids unchanged, not the cleaning the ids were made with."""
    import dataclasses

    from contam_assets.detector.config import preset

    cfg = preset("default")
    key = token_cache.cache_key("f", cfg, "text")
    changed = {"punctuation": cfg.punctuation + "~", "unescape": not cfg.unescape, "markup": not cfg.markup}
    assert set(changed) == {f.name for f in dataclasses.fields(cfg.clean_options)}
    for name, value in changed.items():
        assert token_cache.cache_key("f", cfg.replace(**{name: value}), "text") != key, name


def _odd_shard(rng: random.Random) -> bytes:
    """JSONL with what a pool holds: CRLF, blank and broken lines, lines over the limit, a BOM before the first
    line, non-ASCII text, sometimes no newline after the last line."""
    out = []
    for i in range(rng.randint(1, 40)):
        kind = rng.random()
        if kind < 0.1:
            body = b"{not json"
        elif kind < 0.15:
            body = b"   "
        elif kind < 0.25:
            body = json.dumps({"text": "y" * rng.choice([300, 3000])}).encode()
        else:
            body = json.dumps({"id": i, "text": f"line {i} caf\u00e9 " * rng.randint(1, 30)}, ensure_ascii=rng.random() < 0.5).encode()
        out.append(body + rng.choice([b"\n", b"\r\n"]))
    data = b"".join(out)
    if rng.random() < 0.3:
        data = b"\xef\xbb\xbf" + data
    if rng.random() < 0.3:
        data = data.rstrip(b"\r\n")
    return data


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst"])
def test_documents_read_where_their_lines_start_equal_those_found_by_counting(tmp_path, monkeypatch, suffix):
    """read_shard records where each document's line starts (Document.offset, in the decompressed shard); reading
    the shard up to there and counting its newlines gives the same documents and numbers as finding the lines by
    their newlines' positions; a line that starts where it did but under another number (a newline made before
    it) is no document, nor is any after it."""
    import zstandard

    monkeypatch.setattr(incremental, "BLOCK", 64)
    rng = random.Random(4)
    compared = 0
    for trial in range(150):
        data = _odd_shard(rng)
        path = tmp_path / f"s{trial}{suffix}"
        path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else
                         zstandard.ZstdCompressor().compress(data) if suffix.endswith(".zst") else data)
        docs = [d for d in read_shard(path, path.name, "text", 1000) if isinstance(d, Document)]
        for d in docs:
            assert data[d.offset:].startswith(d.raw) or (d.offset == 0 and data[3:].startswith(d.raw)), (trial, d.line)
        pick = sorted(rng.sample(docs, rng.randint(0, len(docs))), key=lambda d: d.line)
        got = list(incremental.iter_documents_from(path, path.name, "text", 1000, [(d.line, d.offset) for d in pick]))
        want = list(incremental.iter_documents_at(path, path.name, "text", 1000, {d.line for d in pick}))
        assert got == want, trial
        compared += len(got)
        # one byte of an earlier line made a newline: every later line keeps its start but not its number
        if pick and pick[-1].line > 0:
            cut = data.rfind(b"e", 0, pick[-1].offset - 1)
            if cut > 0:
                moved = data[:cut] + b"\n" + data[cut + 1 :]
                path.write_bytes(gzip.compress(moved) if suffix.endswith(".gz") else
                                 zstandard.ZstdCompressor().compress(moved) if suffix.endswith(".zst") else moved)
                got = dict(incremental.iter_documents_from(path, path.name, "text", 1000, [(d.line, d.offset) for d in pick]))
                assert got[pick[-1].line] is None, trial
    assert compared > 500
    # a start past the end, or one a compressed read has passed already: no document (the stream is then stale)
    assert [d for _, d in incremental.iter_documents_from(path, path.name, "text", 1000, [(0, len(data) + 5)])] == [None]
    assert [d for _, d in incremental.iter_documents_from(path, path.name, "text", 1000, [(1, 10), (0, 0)])] == [None, None]


@pytest.mark.parametrize("block", [7, 64, 4096])
def test_lines_at_the_size_limit_read_from_blocks_equal_those_found_by_counting(tmp_path, monkeypatch, block):
    """Lines one byte under, at and over the size limit (a body of max_doc_bytes plus its line end), each before a
    wanted line: the block reader cuts a line at the limit as readline(limit) does, counts the newline it did not
    take, and numbers every later line as iter_documents_at does."""
    monkeypatch.setattr(incremental, "BLOCK", block)
    out = []
    for i, (size, end) in enumerate([(99, b"\n"), (100, b"\r\n"), (101, b"\n"), (102, b"\n"), (102, b"\r\n"), (103, b"\n"), (100, b"\n")]):
        out.append(json.dumps({"text": "x" * (size - 12)}).encode() + end)  # a body of `size` bytes
        out.append(json.dumps({"text": f"wanted {i}"}).encode() + b"\n")
    path = tmp_path / "limits.jsonl"
    path.write_bytes(b"".join(out))
    wanted = [(k, sum(map(len, out[:k]))) for k in range(len(out))]
    got = list(incremental.iter_documents_from(path, path.name, "text", 100, wanted))
    assert got == list(incremental.iter_documents_at(path, path.name, "text", 100, set(range(len(out)))))
    assert [no for no, d in got if d is None] == [4, 6, 8, 10]  # bodies over 100 bytes
    assert all(d.text == f"wanted {no // 2}" for no, d in got if no % 2)
