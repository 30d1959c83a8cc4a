"""An incremental rescan's own steps equal what they replace.

- ``key_table.docs_with_key`` (the compiled first step: which cached documents hold one of the
  task's start n-grams) equals the numpy path (``CONTAM_COMPILED=off``) on random streams with
  planted keys, n-grams across a document boundary, short documents, 32- and 64-bit ids;
- ``incremental.iter_raw_lines_at`` (lines found by counting newlines a block at a time) numbers
  and cuts lines exactly as ``store.pool.iter_lines``, over random line lengths, CRLF, a last
  line without a newline, lines over the size limit and tiny blocks, plain and gzip;
- ``scan_many(only=...)`` (the added task's candidates only: documents none of its records can
  reach are not walked, other records are not scored) equals filtering the full result, on real
  GSM8K and MBPP items planted side by side in host text;
- the lead gate finds what hashing every position finds, and is not made when a key is not accounted for;
- a cached stream whose line (in place, renumbered) or ids changed is stale, and the rescan renews it; so is
  one whose compressed shard breaks where the stream read it whole (the text scan then reports the break);
- a row's window holds every span its segments read;
- the opt-in parts' code is part of the scan config of the shards they ran on (an upgraded verifier rescans them).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import re

import numpy as np
import pytest

from contam_assets.demo import HostText
from contam_assets.detector import key_table
from contam_assets.detector.matches import Reference, tokenize_batch
from contam_assets.detector.ngrams import ngram_hashes
from contam_assets.detector.scan import scan_many
from contam_assets.detector.text import clean_words, join_words
from contam_assets.detector.tokenize import get_tokenizer
from contam_assets.executor.shard_work import ShardWork, run_shard_work, tokenize_and_scan
from contam_assets.rescan import incremental
from contam_assets.rescan.incremental import KeySet, docs_containing, iter_raw_lines_at, task_locals
from contam_assets.rescan.plan import ShardPlan, shard_identity
from contam_assets.store import token_cache
from contam_assets.store.compression import StreamError
from contam_assets.store.pool import Document, StreamFailure, iter_lines, read_shard
from contam_assets.store.token_cache import TokenStream


def _stream(rng: np.random.Generator, dtype, n_docs: int) -> TokenStream:
    lengths = rng.integers(0, 40, n_docs)
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = rng.integers(0, 50, int(offsets[-1])).astype(dtype)  # a small vocabulary: n-grams repeat
    return TokenStream("k", np.arange(n_docs, dtype=np.int64), offsets, tokens)


@pytest.mark.skipif(not key_table.AVAILABLE, reason="numba not installed")
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_docs_with_key_equals_the_numpy_path(monkeypatch, dtype):
    rng = np.random.default_rng(5)
    checked = 0
    for trial in range(60):
        stream = _stream(rng, dtype, int(rng.integers(1, 300)))
        n = int(rng.integers(1, 7))
        every = ngram_hashes(np.asarray(stream.tokens, dtype=np.uint64), n)  # across boundaries too: decoys
        pick = rng.choice(len(every), size=min(len(every), int(rng.integers(0, 30))), replace=False) if len(every) else []
        keys = np.unique(np.concatenate([every[pick], rng.integers(0, 2**63, 20, dtype=np.uint64)]))
        ks = KeySet(keys)
        min_tokens = int(rng.integers(0, 15))
        got = docs_containing(stream, ks, n, min_tokens)
        monkeypatch.setenv("CONTAM_COMPILED", "off")
        want = docs_containing(stream, ks, n, min_tokens)
        monkeypatch.delenv("CONTAM_COMPILED")
        assert got.dtype == np.int64 and np.array_equal(got, want), trial
        checked += len(want)
    assert checked > 200


def test_a_key_set_over_the_table_limit_takes_the_numpy_path(monkeypatch):
    rng = np.random.default_rng(8)
    stream = _stream(rng, np.uint32, 200)
    keys = np.unique(ngram_hashes(np.asarray(stream.tokens, dtype=np.uint64), 5)[::7])
    small = KeySet(keys)
    monkeypatch.setattr(incremental, "TABLE_MAX_KEYS", len(keys) - 1)
    big = KeySet(keys)
    assert big.slots is None and (small.slots is not None or not key_table.AVAILABLE)
    assert np.array_equal(docs_containing(stream, big, 5, 0), docs_containing(stream, small, 5, 0))


def test_a_window_across_two_documents_is_no_hit():
    a, b = np.array([1, 2, 3], dtype=np.uint32), np.array([4, 5, 6], dtype=np.uint32)
    stream = TokenStream("k", np.arange(2), np.array([0, 3, 6]), np.concatenate([a, b]))
    across = ngram_hashes(np.array([2, 3, 4], dtype=np.uint64), 3)  # the last two of a, the first of b
    inside = ngram_hashes(np.array([4, 5, 6], dtype=np.uint64), 3)
    assert docs_containing(stream, KeySet(np.unique(across)), 3, 0).tolist() == []
    assert docs_containing(stream, KeySet(np.unique(np.concatenate([across, inside]))), 3, 0).tolist() == [1]
    assert docs_containing(stream, KeySet(np.unique(inside)), 3, 4).tolist() == []  # under min_tokens


def _random_stream(rng: random.Random) -> bytes:
    lines = [b"x" * rng.choice([0, 1, 5, 50, 300, 2000]) + rng.choice([b"\n", b"\r\n"]) for _ in range(rng.randint(0, 30))]
    return b"".join(lines) + b"y" * rng.choice([0, 0, 3, 900])


def test_lines_at_equal_iter_lines(monkeypatch):
    rng = random.Random(3)
    compared = 0
    for trial in range(2500):
        data = _random_stream(rng)
        monkeypatch.setattr(incremental, "BLOCK", rng.choice([1, 2, 7, 64, 1 << 20]))
        limit = rng.choice([10, 100, 1000, 8 << 20])
        ref = list(iter_lines(io.BytesIO(data), limit))
        want_lines = sorted(rng.sample(range(len(ref) + 3), rng.randint(0, len(ref) + 3)))
        opener = (lambda d: gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(d)))) if trial % 5 == 0 else io.BytesIO
        got = list(iter_raw_lines_at(opener(data), want_lines, limit))
        want = [(w, ref[w][0] if ref[w][1] is None else None) for w in want_lines if w < len(ref)]
        assert got == want, (trial, want_lines, limit)
        compared += len(want)
    assert compared > 10_000


def test_documents_at_in_a_truncated_gzip_shard(tmp_path, monkeypatch):
    """Lines before the break are read and parsed, with the bad lines None; asking for one past it raises the
    StreamError that read_shard reports as the shard's failure, at the same line."""
    monkeypatch.setattr(incremental, "BLOCK", 4096)
    rows = [json.dumps({"id": str(i), "text": f"document {i} " + "word " * (i % 50)}) for i in range(2000)]
    rows[7] = "{not json"
    rows[11] = json.dumps({"id": "11"})  # no text
    body = gzip.compress(("\n".join(rows) + "\n").encode())
    path = tmp_path / "s.jsonl.gz"
    path.write_bytes(body[: len(body) // 2])
    failure = [x for x in read_shard(path, "s.jsonl.gz") if isinstance(x, StreamFailure)]
    assert len(failure) == 1
    broken_at = failure[0].line
    assert 100 < broken_at < 2000
    before = {0, 7, 11, 99, broken_at - 1}
    got = dict(incremental.iter_documents_at(path, "s.jsonl.gz", "text", 1 << 20, before))
    assert sorted(got) == sorted(before)
    assert got[7] is None and got[11] is None  # a reject is no document
    assert got[99].text == json.loads(rows[99])["text"] and got[broken_at - 1].doc_id == str(broken_at - 1)
    with pytest.raises(StreamError) as err:
        dict(incremental.iter_documents_at(path, "s.jsonl.gz", "text", 1 << 20, {5, broken_at + 1}))
    assert err.value.kind == failure[0].kind


def test_scan_many_only_equals_the_filtered_scan(two_tasks, shared_data):
    cfg, records, index = two_tasks
    gsm = [json.loads(line) for line in open(shared_data / "gsm8k_test.jsonl")][:40]
    mbpp = [json.loads(line) for line in open(shared_data / "mbpp.jsonl")][:40]
    rng = random.Random(9)
    texts = []
    for i in range(120):
        h = HostText(i)
        parts = [h.document(1)]
        kind = i % 4
        if kind in (0, 2):
            g = rng.choice(gsm)
            parts.append(g["question"] + "\n" + g["answer"])
        if kind in (1, 2):
            m = rng.choice(mbpp)
            parts.append(m["text"] + "\n" + m["code"])
        if kind == 3:  # a question cut short, then the other task's item right after it
            g, m = rng.choice(gsm), rng.choice(mbpp)
            parts += [" ".join(g["question"].split()[: rng.randint(4, 30)]), m["text"]]
        parts.append(h.document(1))
        texts.append("\n\n".join(parts))
    docs = [Document(line=i, doc_id=str(i), source=None, text=t, n_bytes=len(t), raw=b"") for i, t in enumerate(texts)]
    _, encoded, _, _ = tokenize_batch(docs, cfg, None)
    full = scan_many(index, encoded, cfg)
    seen = {"gsm8k": 0, "mbpp": 0}
    for task in ("gsm8k", "mbpp"):
        only = np.zeros(index.n_records, dtype=bool)
        only[task_locals(index, records, [task])] = True
        got = scan_many(index, encoded, cfg, only=only)
        want = [[c for c in cands if only[c.local]] for cands in full]
        assert got == want
        seen[task] = sum(len(c) for c in got)
    assert seen["gsm8k"] >= 40 and seen["mbpp"] >= 40  # both tasks' items were found, side by side too
    with pytest.raises(ValueError):
        scan_many(index, encoded, cfg, extras=object(), only=np.ones(index.n_records, dtype=bool))


def _planted_shard(tmp_path, shared_data, two_tasks):
    """A shard of host documents over 2 MiB with one GSM8K item in the middle, scanned once with the token cache:
    (shard, its lines, the matched line, the first scan's outcome, the cache folder, the stream's key)."""
    cfg, records, index = two_tasks
    g = json.loads(open(shared_data / "gsm8k_test.jsonl").readline())
    filler = [json.dumps({"text": HostText(i).document(1)}) for i in range(30)]
    # the matched line lies between the first and the last MiB, which the shard's fingerprint reads
    pad = filler * (1 + (1 << 20) // sum(len(f) + 1 for f in filler))
    at_line = len(pad) + 7
    lines = pad + filler + pad
    lines[at_line] = json.dumps({"text": f"{HostText(7).paragraph()}\n{g['question']}\n{g['answer']}"})
    shard = tmp_path / "s.jsonl"
    shard.write_text("\n".join(lines) + "\n")
    cache = tmp_path / "cache"
    first = tokenize_and_scan(shard, "s.jsonl", index, Reference(records), cfg, "text", "default", "d", cache)
    assert first.matches.height and set(first.matches["line"].to_list()) == {at_line}
    _, identity = shard_identity(shard)
    return shard, lines, at_line, first, cache, token_cache.cache_key(identity, cfg, "text")


def _rows(frame):
    return frame.drop("record_id").sort("match_id")


def _full_job(shard, cache, key, cfg) -> ShardWork:
    """A full rescan of the shard that finds the cached stream ``key`` (jobs.run_shard_work's plan)."""
    fingerprint, identity = shard_identity(shard)
    return ShardWork(shard.name, str(shard), ShardPlan("full", "test", stream_key=key), cfg, "text", "default", "d",
                    str(cache), fingerprint, identity)


def test_a_cached_stream_is_stale_when_a_matched_line_changes_in_place(two_tasks, shared_data, tmp_path):
    """An edit that keeps the shard's size and mtime (its identity) and the document's token count is caught:
    the matched documents' cached tokens must be what their text encodes to (not only as many), and the shard is
    scanned again from its text: the rows are those of the edited text, as a scan without the cache gives them."""
    cfg, records, index = two_tasks
    ref = Reference(records)
    shard, lines, at_line, first, cache, key = _planted_shard(tmp_path, shared_data, two_tasks)
    again = incremental.scan_stream(token_cache.load(cache, "s.jsonl", key), shard, "s.jsonl", index, ref, cfg, "text",
                                    "default", "d")
    assert _rows(again.matches).equals(_rows(first.matches))
    _, identity = shard_identity(shard)
    # one digit of the matched line for another (the same bytes, the same tokens), the mtime put back
    before = shard.stat()
    text = shard.read_bytes()
    start = text.index(lines[at_line].encode())
    tok = get_tokenizer(cfg.tokenizer)

    def cleaned(raw: bytes) -> str:
        return join_words(clean_words(json.loads(raw)["text"], cfg.clean_options))

    edited, was = None, cleaned(lines[at_line].encode())
    for m in re.finditer(rb"[0-9]", lines[at_line].encode()):  # the first digit whose change keeps the token count
        at = start + m.start()
        candidate = text[:at] + str((int(text[at : at + 1]) + 1) % 10).encode() + text[at + 1 :]
        now = cleaned(candidate.split(b"\n")[at_line])
        if now != was and len(tok.encode(now)) == len(tok.encode(was)):  # a count of tokens would not tell
            edited = candidate
            break
    assert edited is not None and len(edited) == len(text)
    shard.write_bytes(edited)
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert shard_identity(shard)[1] == identity
    stream = token_cache.load(cache, "s.jsonl", key)
    assert stream is not None
    with pytest.raises(incremental.StaleStream, match=f"line {at_line} "):
        incremental.scan_stream(stream, shard, "s.jsonl", index, ref, cfg, "text", "default", "d")
    rescanned = run_shard_work(_full_job(shard, cache, key, cfg), index, ref)
    fresh = tokenize_and_scan(shard, "s.jsonl", index, ref, cfg, "text", "default", "d", None)
    assert rescanned.matches.height == first.matches.height
    assert _rows(rescanned.matches).equals(_rows(fresh.matches))
    assert not _rows(rescanned.matches).equals(_rows(first.matches))  # the edited digit is in the rows' text
    # the stale stream was dropped and the rescan cached the edited text under the same key: the next rescan uses it
    renewed = incremental.scan_stream(token_cache.load(cache, "s.jsonl", key), shard, "s.jsonl", index, ref, cfg,
                                      "text", "default", "d")
    assert _rows(renewed.matches).equals(_rows(fresh.matches))


def test_a_damaged_cached_stream_is_stale_not_an_error(two_tasks, shared_data, tmp_path):
    """A cached id the vocabulary does not hold, in a matched document: not a KeyError out of the shard, a stale
    stream, and the full rescan from the text gives the first scan's rows."""
    cfg, records, index = two_tasks
    ref = Reference(records)
    shard, _, at_line, first, cache, key = _planted_shard(tmp_path, shared_data, two_tasks)
    stream = token_cache.load(cache, "s.jsonl", key)
    doc = int(np.flatnonzero(stream.lines == at_line)[0])
    last = int(stream.offsets[doc + 1]) - 1  # the answer's last token: the question still starts the walk
    bin_path = token_cache.stream_dir(cache, "s.jsonl", key) / "tokens.bin"
    damaged = np.memmap(bin_path, dtype=stream.tokens.dtype, mode="r+")
    damaged[last] = np.iinfo(stream.tokens.dtype).max
    damaged.flush()
    del damaged, stream
    with pytest.raises(incremental.StaleStream, match=f"line {at_line} "):
        incremental.scan_stream(token_cache.load(cache, "s.jsonl", key), shard, "s.jsonl", index, ref, cfg, "text",
                                "default", "d")
    assert _rows(run_shard_work(_full_job(shard, cache, key, cfg), index, ref).matches).equals(_rows(first.matches))


def _host_stream(two_tasks, shared_data, n_docs: int = 160) -> TokenStream:
    """Host documents with GSM8K and MBPP items planted whole, cut at random words and thinned, as a token stream."""
    cfg, _, _ = two_tasks
    items = [json.loads(line) for line in open(shared_data / "mbpp.jsonl")][:60]
    items += [json.loads(line) for line in open(shared_data / "gsm8k_test.jsonl")][:60]
    rng = random.Random(21)
    texts = []
    for i in range(n_docs):
        h = HostText(100 + i)
        it = rng.choice(items)
        words = (it.get("text") or it["question"]).split()
        kind = i % 4
        if kind == 0:
            words = words[rng.randint(0, len(words) // 2):]
        elif kind == 1:
            words = [w for w in words if rng.random() < 0.8]
        elif kind == 2:
            words = []
        texts.append(f"{h.paragraph()}\n{' '.join(words)}\n{h.paragraph()}")
    docs = [Document(line=i, doc_id=str(i), source=None, text=t, n_bytes=len(t), raw=b"") for i, t in enumerate(texts)]
    _, encoded, _, _ = tokenize_batch(docs, cfg, None)
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return TokenStream("k", np.arange(len(encoded), dtype=np.int64), offsets, np.concatenate(encoded).astype(np.uint32))


@pytest.mark.skipif(not key_table.AVAILABLE, reason="numba not installed")
@pytest.mark.parametrize("task", ["mbpp", "gsm8k"])
def test_the_lead_gate_finds_what_hashing_every_position_finds(two_tasks, shared_data, task):
    """One task's start keys carry a lead gate (the first three tokens of each key's n-gram, from its questions
    tokenized again); gated, the documents found are exactly those found hashing every position."""
    cfg, records, index = two_tasks
    incremental._SELECTIONS.clear()
    _, keys = incremental.selection(index, records, [task], cfg)
    assert keys.lead is not None
    stream = _host_stream(two_tasks, shared_data)
    gated = docs_containing(stream, keys, cfg.ngram_size, cfg.min_doc_tokens)
    lead, keys.lead = keys.lead, None
    try:
        every = docs_containing(stream, keys, cfg.ngram_size, cfg.min_doc_tokens)
    finally:
        keys.lead = lead
    assert np.array_equal(gated, every)
    assert 20 < len(every) < stream.n_docs  # planted items were found, and not every document holds a key


def test_no_lead_gate_when_the_questions_do_not_give_every_key(two_tasks):
    """A key that the task's questions, tokenized again, do not give (here: the records changed after the index
    was built) means no gate; a key of a question under n tokens is accounted for (no document n-gram equals it)."""
    import polars as pl

    from contam_assets.detector.index_build import build_index

    cfg, records, _ = two_tasks
    small = records.filter(pl.col("task") == "mbpp").head(30)
    short_id = small["record_id"][3]
    small = small.with_columns(pl.when(pl.col("record_id") == short_id).then(pl.lit("reverse it"))
                               .otherwise(pl.col("question")).alias("question"))
    index = build_index(small, cfg)
    incremental._SELECTIONS.clear()
    _, keys = incremental.selection(index, small, ["mbpp"], cfg)
    assert keys.lead is not None  # "reverse it" is one short n-gram, a key no document position can hash to
    changed = small.with_columns(pl.when(pl.col("record_id") == small["record_id"][5]).then(pl.lit("count the vowels of a given string please"))
                                 .otherwise(pl.col("question")).alias("question"))
    incremental._SELECTIONS.clear()
    _, keys = incremental.selection(index, changed, ["mbpp"], cfg)
    assert keys.lead is None
    _, every = incremental.selection(index, small, None, cfg)
    assert every.lead is None  # all tasks: every position is hashed
    incremental._SELECTIONS.clear()


def test_a_cached_stream_whose_line_or_ids_changed_is_stale(two_tasks, shared_data, tmp_path):
    """Each cached document keeps a check value of its line and its ids.  Another id the vocabulary holds, or a
    line rewritten to the same cleaned text (one letter's case, the shard's size and mtime kept), makes the stream
    stale; the full rescan from the text gives the first scan's rows."""
    cfg, records, index = two_tasks
    ref = Reference(records)
    shard, lines, at_line, first, cache, key = _planted_shard(tmp_path, shared_data, two_tasks)
    stream = token_cache.load(cache, "s.jsonl", key)
    assert stream.checks is not None and len(stream.checks) == stream.n_docs
    doc = int(np.flatnonzero(stream.lines == at_line)[0])
    last = int(stream.offsets[doc + 1]) - 1
    bin_path = token_cache.stream_dir(cache, "s.jsonl", key) / "tokens.bin"
    ids = np.memmap(bin_path, dtype=stream.tokens.dtype, mode="r+")
    was = int(ids[last])
    ids[last] = (was + 1) % 1000  # a token the vocabulary holds
    ids.flush()
    with pytest.raises(incremental.StaleStream, match=f"line {at_line} "):
        incremental.scan_stream(token_cache.load(cache, "s.jsonl", key), shard, "s.jsonl", index, ref, cfg, "text",
                                "default", "d")
    ids[last] = was
    ids.flush()
    del ids, stream
    again = incremental.scan_stream(token_cache.load(cache, "s.jsonl", key), shard, "s.jsonl", index, ref, cfg, "text",
                                    "default", "d")
    assert _rows(again.matches).equals(_rows(first.matches))

    before, text = shard.stat(), shard.read_bytes()
    start = text.index(lines[at_line].encode())
    at = start + re.search(rb"[A-Z]", lines[at_line].encode()).start()
    shard.write_bytes(text[:at] + text[at : at + 1].lower() + text[at + 1 :])
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(incremental.StaleStream, match=f"line {at_line} "):
        incremental.scan_stream(token_cache.load(cache, "s.jsonl", key), shard, "s.jsonl", index, ref, cfg, "text",
                                "default", "d")
    assert _rows(run_shard_work(_full_job(shard, cache, key, cfg), index, ref).matches).equals(_rows(first.matches))

    # a byte of the line before made a newline: the matched line keeps its bytes and where it starts, not its number
    shard.write_bytes(text)
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    run_shard_work(_full_job(shard, cache, key, cfg), index, ref)  # the letter put back: stale again, cached anew
    incremental.scan_stream(token_cache.load(cache, "s.jsonl", key), shard, "s.jsonl", index, ref, cfg, "text",
                            "default", "d")
    at = start - 10
    shard.write_bytes(text[:at] + b"\n" + text[at + 1 :])
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(incremental.StaleStream, match=f"line {at_line} "):
        incremental.scan_stream(token_cache.load(cache, "s.jsonl", key), shard, "s.jsonl", index, ref, cfg, "text",
                                "default", "d")
    moved = run_shard_work(_full_job(shard, cache, key, cfg), index, ref).matches
    assert set(moved["line"].to_list()) == {at_line + 1}




def test_a_rows_window_holds_every_span_its_segments_read(two_tasks, shared_data):
    """rows_for_doc prepares only the tokens its rows' text lies in (matches._window): on real items planted in
    host text every span `segments` reads falls inside, so no span is decoded on its own."""
    from contam_assets.detector import matches

    cfg, records, index = two_tasks
    stream = _host_stream(two_tasks, shared_data, 80)
    docs = [stream.doc(i) for i in range(stream.n_docs)]
    tok = get_tokenizer(cfg.tokenizer)
    checked = 0
    for ids, cands in zip(docs, scan_many(index, docs, cfg)):
        if not cands:
            continue
        lo, hi = matches._window(cands)
        full = tok.span_reader(None, ids)

        def read(a, b):
            nonlocal checked
            assert max(0, lo) <= max(0, a) and min(len(ids), b) <= min(len(ids), hi), (a, b, lo, hi)
            checked += 1
            return full(a, b)

        for c in cands:
            assert matches.segments(tok, None, ids, c, read) == matches.segments(tok, None, ids, c, full)
    assert checked > 50


def test_a_compressed_shard_that_breaks_after_its_matched_line_is_rescanned_from_its_text(two_tasks, shared_data,
                                                                                           tmp_path):
    """A gzip shard cut short 256 KiB after its matched line: the cached rescan reads into the break (it reads the
    shard a block at a time), which makes the stream stale, not a StreamError out of the shard; the job then scans
    the text, which reports the shard incomplete at the break and keeps the matched line's rows."""
    import zlib

    cfg, records, index = two_tasks
    ref = Reference(records)
    plain, lines, at_line, first, _, _ = _planted_shard(tmp_path, shared_data, two_tasks)
    data = plain.read_bytes()
    end_of_match = data.index(lines[at_line].encode()) + len(lines[at_line]) + 1
    body = gzip.compress(data)
    shard, cache = tmp_path / "z.jsonl.gz", tmp_path / "zcache"
    shard.write_bytes(body)
    whole = tokenize_and_scan(shard, "z.jsonl.gz", index, ref, cfg, "text", "default", "d", cache)
    assert set(whole.matches["line"].to_list()) == {at_line}
    key = token_cache.cache_key(shard_identity(shard)[1], cfg, "text")
    # the shortest prefix of the compressed bytes that gives 256 KiB past the matched line
    cut = next(c for c in range(0, len(body), 512)
               if len(zlib.decompressobj(wbits=31).decompress(body[:c])) >= end_of_match + (256 << 10))
    shard.write_bytes(body[:cut])
    with pytest.raises(incremental.StaleStream, match="breaks"):
        incremental.scan_stream(token_cache.load(cache, "z.jsonl.gz", key), shard, "z.jsonl.gz", index, ref, cfg,
                                "text", "default", "d")
    out = run_shard_work(_full_job(shard, cache, key, cfg), index, ref)
    assert out.stats["status"] == "incomplete" and out.stats["error_line"] > at_line  # reported, not raised
    assert _rows(out.matches).equals(_rows(whole.matches))
    # the same accounting as a scan of the broken shard without a cache, and the stale stream is gone
    direct = tokenize_and_scan(shard, "z.jsonl.gz", index, ref, cfg, "text", "default", "d", None)
    skip = {"seconds", "worker", "node", "fingerprint", "shard_fingerprint"}
    assert {k: v for k, v in out.stats.items() if k not in skip} == {k: v for k, v in direct.stats.items() if k not in skip}
    assert out.stats["read"] == out.stats["error_line"] and token_cache.load(cache, "z.jsonl.gz", key) is None


def test_the_opt_in_parts_code_is_part_of_the_scan_config_of_the_shards_it_ran_on(monkeypatch):
    """An upgraded verifier rescans the shards its part ran on, and no others: with the paraphrase or the
    crosslingual part on, the scan config digest changes with the paraphrase package's source; with both off
    it does not."""
    from contam_assets.detector.config import DetectConfig
    from contam_assets.rescan import plan

    off, para, cross = DetectConfig(), DetectConfig(paraphrase=True), DetectConfig(crosslingual=True)
    before = {name: plan.scan_config_digest(cfg, "text") for name, cfg in
              (("off", off), ("paraphrase", para), ("crosslingual", cross))}
    assert len(set(before.values())) == 3
    monkeypatch.setattr(plan, "source_digest", lambda *packages: "0" * 12)  # the same settings, other code
    after = {name: plan.scan_config_digest(cfg, "text") for name, cfg in
             (("off", off), ("paraphrase", para), ("crosslingual", cross))}
    assert after["off"] == before["off"]
    assert after["paraphrase"] != before["paraphrase"] and after["crosslingual"] != before["crosslingual"]
