"""Tokenizing ahead (executor/ahead.py): new shards tokenized while the reference set is built.

- ``jobs.cache_stream`` writes exactly the stream a full scan writes (tokens, lines, offsets and
  the read counters), on shards with rejects (bad JSON, a line over the size limit), plain and gzip;
  a truncated gzip shard is not cached; a stop between batches caches nothing and leaves no temporary;
- ``shards_to_tokenize`` picks only shards whose next scan surely reads them in full;
- ``contam detect`` on two processes tokenizes ahead and writes the same tables and mix files as
  with ``CONTAM_TOKENIZE_AHEAD=off``, every planted GSM8K copy removed.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import Counter

import duckdb
import numpy as np
import pytest

from contam_assets.defs.resources import DEFAULT_TASKS_DIR
from contam_assets.demo import HostText
from contam_assets.detector.config import preset
from contam_assets.detector.index_build import build_index
from contam_assets.detector.matches import Reference
from contam_assets.executor.ahead import TokenizeAhead, shards_to_tokenize
from contam_assets.executor.shard_work import cache_stream, tokenize_and_scan
from contam_assets.rescan.plan import ShardState, shard_identity
from contam_assets.rescan.shard import read_batches
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import load_registry
from contam_assets.store import token_cache


@pytest.fixture(scope="module")
def gsm8k_index(shared_data):
    cfg = preset("default")
    records, _ = build_reference_set(load_registry(DEFAULT_TASKS_DIR, ["gsm8k"]), shared_data, cfg)
    return build_index(records, cfg), Reference(records)


def host_docs(n: int, seed: int) -> list[str]:
    host = HostText(seed=seed)
    return [host.paragraph() for _ in range(n)]


def write_shard(path, docs: list[str], bad: bool = True) -> None:
    lines = [json.dumps({"text": t}) for t in docs]
    if bad:
        lines.insert(3, "{not json")
        lines.insert(7, json.dumps({"text": "x" * 5000}))  # over the size limit set below
        lines.insert(9, json.dumps({"other": "no text field"}))
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)


def stream_of(root, shard, path, cfg):
    _, identity = shard_identity(path)
    s = token_cache.load(root, shard, token_cache.cache_key(identity, cfg, "text"))
    assert s is not None
    return s


@pytest.mark.parametrize("name", ["a.jsonl", "b.jsonl.gz"])
def test_cache_stream_writes_the_stream_a_full_scan_writes(tmp_path, name, gsm8k_index):
    index, ref = gsm8k_index
    cfg = preset("default").replace(max_doc_bytes=4000)
    path = tmp_path / name
    write_shard(path, host_docs(300, 5))
    fp, identity = shard_identity(path)
    scan_root, ahead_root = tmp_path / "scan", tmp_path / "ahead"
    tokenize_and_scan(path, name, index, ref, cfg, "text", "default", "d", scan_root, fp, identity)
    assert cache_stream(path, name, cfg, "text", ahead_root, fp, identity) == "cached"
    a, b = stream_of(scan_root, name, path, cfg), stream_of(ahead_root, name, path, cfg)
    assert a.key == b.key and a.meta == b.meta
    assert a.meta["rejected"] == 3 and a.meta["read"] == 303
    assert np.array_equal(a.lines, b.lines) and np.array_equal(a.offsets, b.offsets)
    assert np.array_equal(np.asarray(a.tokens), np.asarray(b.tokens))


def test_a_broken_or_stopped_shard_is_not_cached(tmp_path):
    cfg = preset("default")
    path = tmp_path / "c.jsonl.gz"
    write_shard(path, host_docs(600, 6), bad=False)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated mid-stream
    fp, identity = shard_identity(path)
    root = tmp_path / "cache"
    assert cache_stream(path, "c.jsonl.gz", cfg, "text", root, fp, identity) == "broken"
    assert not token_cache.exists(root, "c.jsonl.gz", token_cache.cache_key(identity, cfg, "text"))

    path = tmp_path / "d.jsonl"
    write_shard(path, host_docs(600, 7), bad=False)
    fp, identity = shard_identity(path)
    batches = []
    assert cache_stream(path, "d.jsonl", cfg, "text", root, fp, identity, stop=lambda: len(batches) > 0
                        or batches.append(1)) == "stopped"
    assert not token_cache.exists(root, "d.jsonl", token_cache.cache_key(identity, cfg, "text"))
    assert [p.name for p in (root / "d.jsonl").iterdir()] == []  # the temporary stream is gone
    assert sum(1 for _ in read_batches(path, "d.jsonl", "text", cfg.max_doc_bytes, Counter(), [])) > 1


def test_only_shards_a_scan_reads_in_full_are_tokenized_ahead(tmp_path):
    cfg = preset("default")
    pool, root = tmp_path / "pool", tmp_path / "cache"
    pool.mkdir()
    for name in ("new.jsonl", "known.jsonl", "changed.jsonl", "cached.jsonl"):
        write_shard(pool / name, host_docs(20, len(name)), bad=False)
    ident = {n: shard_identity(pool / n)[1] for n in ("known.jsonl", "changed.jsonl", "cached.jsonl")}
    states = {"known.jsonl": ShardState(ident["known.jsonl"], "cfg", None, "idx"),
              "changed.jsonl": ShardState("an older identity", "cfg", None, "idx")}
    fp, identity = shard_identity(pool / "cached.jsonl")
    assert cache_stream(pool / "cached.jsonl", "cached.jsonl", cfg, "text", root, fp, identity) == "cached"
    todo = shards_to_tokenize(pool, ["new.jsonl", "known.jsonl", "changed.jsonl", "cached.jsonl", "gone.jsonl"], cfg,
                              "text", root, states)
    assert [t[0] for t in todo] == ["new.jsonl"]  # a known shard, changed or not, is left to its plan
    # stopped at once: every shard not started or stopped, nothing cached, no stop file left
    ahead = TokenizeAhead(todo, cfg, "text", root, 1)
    counts = ahead.stop()
    assert counts["cached"] + counts["not_started"] + counts["stopped"] == 1 and counts["failed"] == 0
    assert not [p for p in root.iterdir() if p.name.startswith(".ahead-stop")]
    # left to run: both cached
    ahead = TokenizeAhead(todo, cfg, "text", root, 2)
    for _, fut in ahead.futures:
        assert fut.result(timeout=120) == "cached"
    assert ahead.stop()["cached"] == 1
    assert shards_to_tokenize(pool, ["new.jsonl", "changed.jsonl"], cfg, "text", root, states) == []


def contam(*args, env):
    r = subprocess.run([sys.executable, "-m", "contam_assets.cli", *map(str, args)], capture_output=True, text=True,
                       env={**os.environ, **env}, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r


def test_detect_with_shards_tokenized_ahead_writes_the_same_tables(tmp_path, gsm8k_bench):
    gsm = [json.loads(line) for line in open(gsm8k_bench / "gsm8k_test.jsonl")][:40]
    pool = tmp_path / "pool"
    pool.mkdir()
    docs = host_docs(1200, 11)
    for k, item in enumerate(gsm):  # planted copies across the shards
        docs[k * 29] = f"{docs[k * 29]}\n{item['question']}\n{item['answer']}"
    for s in range(4):
        name = f"s{s}.jsonl" + (".gz" if s % 2 else "")
        write_shard(pool / name, docs[s * 300:(s + 1) * 300], bad=(s == 2))
    outs = {}
    for ahead in ("on", "off"):
        out = tmp_path / f"out-{ahead}"
        r = contam("detect", "--pool", pool, "--out", out, "--benchmarks", gsm8k_bench, "--tasks", "gsm8k",
                   env={"DAGSTER_HOME": str(tmp_path / f"home-{ahead}"), "CONTAM_SCAN_WORKERS": "2",
                        "CONTAM_TOKENIZE_AHEAD": ahead})
        assert ("tokenized ahead" in r.stdout) == (ahead == "on")
        if ahead == "on":
            assert "tokenizing 4 new shard(s) ahead on 1 process(es)" in r.stdout
        outs[ahead] = out
    queries = ["select * exclude (record_id) from matches order by match_id",
               "select * exclude (seconds) from shard_stats order by shard",
               "select * from removals order by shard, line", "select * exclude (path) from mix_stats order by shard"]
    got = {}
    for ahead, out in outs.items():
        with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
            got[ahead] = [con.execute(q).fetchall() for q in queries]
        got[ahead].append({p.name: p.read_bytes() for p in sorted((out / "mix").iterdir())})
    assert got["on"] == got["off"]
    removed = {(s, line) for s, line, *_ in got["on"][2]}
    assert len(removed) == 40 and got["on"][1][2][4] == 2  # s2: its 2 rejects, counted from its cached stream


def test_a_first_scan_from_a_shared_token_cache_keeps_the_rejects_out_of_the_mix(tmp_path, gsm8k_bench):
    """Streams cached by another output folder (a shared CONTAM_TOKEN_CACHE) carry the shard's rejected lines;
    a stream written before they were kept is not used for a shard this folder never scanned."""
    pool, cache = tmp_path / "pool", tmp_path / "shared-cache"
    pool.mkdir()
    docs = host_docs(400, 12)
    write_shard(pool / "a.jsonl", docs[:200])
    write_shard(pool / "b.jsonl.gz", docs[200:])
    got = []
    for run in range(3):
        out = tmp_path / f"out-{run}"
        contam("detect", "--pool", pool, "--out", out, "--benchmarks", gsm8k_bench, "--tasks", "gsm8k",
               env={"DAGSTER_HOME": str(tmp_path / f"home-{run}"), "CONTAM_SCAN_WORKERS": "2",
                    "CONTAM_TOKEN_CACHE": str(cache), "CONTAM_TOKENIZE_AHEAD": "off"})
        with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
            got.append((con.execute("select shard, written, dropped, rejected from mix_stats order by shard").fetchall(),
                        con.execute("select shard, read, rejected from shard_stats order by shard").fetchall(),
                        sorted(p.name for p in (out / "rejected").iterdir()),
                        {p.name: p.read_bytes() for p in (out / "mix").iterdir()}))
        if run == 1:  # streams as an older version wrote them: no rejects file
            for p in cache.rglob("rejects.jsonl"):
                p.unlink()
    assert got[0][0] == [("a.jsonl", 201, 0, 2), ("b.jsonl.gz", 201, 0, 2)]  # 203 lines: 201 documents, 2 rejects
    assert got[0][2] == ["a.jsonl.jsonl", "b.jsonl.gz.jsonl"]
    assert got[1] == got[0] and got[2] == got[0]
    # the third run tokenized both shards again and handed the old streams their rejects
    assert sorted(str(p.relative_to(cache).parent.parent) for p in cache.rglob("rejects.jsonl")) == ["a.jsonl", "b.jsonl.gz"]
    assert not [p for p in cache.rglob(".tmp-*")]


def test_a_stream_written_before_rejects_were_kept_gets_them_from_the_next_writer(tmp_path):
    from contam_assets.store.pool import Reject

    cfg, key = preset("default"), "k" * 16
    meta = {"read": 3, "rejected": 1, "bytes": 10, "reject_reasons": "{}", "shard_fingerprint": "f"}
    rejects = [Reject(line=2, reason="bad_json", raw=b"{oops\n")]
    for run in range(2):
        w = token_cache.StreamWriter(tmp_path, "s.jsonl", key, cfg.tokenizer)
        w.add(0, np.array([7, 8, 9]), b"{\"text\": \"a\"}")
        w.add(1, np.array([10]), b"{\"text\": \"b\"}")
        w.commit(meta, rejects)
        if run == 0:  # as an older version wrote it
            (token_cache.stream_dir(tmp_path, "s.jsonl", key) / token_cache.REJECTS).unlink()
            assert token_cache.load(tmp_path, "s.jsonl", key).rejects is None
            assert not token_cache.exists(tmp_path, "s.jsonl", key, with_rejects=True)
    s = token_cache.load(tmp_path, "s.jsonl", key)
    assert s.rejects == rejects and s.tokens.tolist() == [7, 8, 9, 10] and s.lines.tolist() == [0, 1]
    assert token_cache.exists(tmp_path, "s.jsonl", key, with_rejects=True)
    assert sorted(p.name for p in (tmp_path / "s.jsonl").iterdir()) == [key]


def test_a_stream_folder_left_half_removed_or_with_another_count_of_rejects(tmp_path):
    """A key's folder holding only a stray rejects file (a prune's rmtree beside a writer) is replaced by the next
    whole stream; an old stream whose own count of rejects differs from the writer's is not handed them."""
    from contam_assets.store.pool import Reject

    cfg, key = preset("default"), "k" * 16
    one = [Reject(line=2, reason="bad_json", raw=b"{oops\n")]
    two = one + [Reject(line=5, reason="bad_json", raw=b"{again\n")]

    def write(root, rejects):
        w = token_cache.StreamWriter(root, "s.jsonl", key, cfg.tokenizer)
        w.add(0, np.array([7, 8]), b"{\"text\": \"a\"}")
        w.commit({"read": 1 + len(rejects), "rejected": len(rejects), "bytes": 10, "reject_reasons": "{}",
                  "shard_fingerprint": "f"}, rejects)

    stray = token_cache.stream_dir(tmp_path / "a", "s.jsonl", key)
    stray.mkdir(parents=True)
    (stray / token_cache.REJECTS).write_text("")
    write(tmp_path / "a", one)
    s = token_cache.load(tmp_path / "a", "s.jsonl", key)
    assert s is not None and s.rejects == one and s.tokens.tolist() == [7, 8]

    write(tmp_path / "b", one)
    (token_cache.stream_dir(tmp_path / "b", "s.jsonl", key) / token_cache.REJECTS).unlink()
    write(tmp_path / "b", two)  # not the stream these belong with
    s = token_cache.load(tmp_path / "b", "s.jsonl", key)
    assert s is not None and s.rejects is None and s.meta["rejected"] == 1


def test_a_reject_holding_line_separators_survives_the_stream(tmp_path):
    """A rejected line with U+2028, U+0085 and invalid UTF-8 comes back from the stream byte for byte, and the
    stream's count of rejects matches (else the stream is not used)."""
    from contam_assets.store.pool import Reject

    cfg = preset("default")
    rejects = [Reject(line=1, reason="bad_json x", raw="{\u2028not\u0085json\n".encode()),
               Reject(line=4, reason="bad_json y", raw=b"\xff\xfe{\n")]
    w = token_cache.StreamWriter(tmp_path, "s.jsonl", "k" * 16, cfg.tokenizer)
    w.add(0, np.array([1, 2, 3]), b"{\"text\": \"a\"}")
    w.commit({"read": 3, "rejected": 2, "bytes": 10, "reject_reasons": "{}", "shard_fingerprint": "f"}, rejects)
    s = token_cache.load(tmp_path, "s.jsonl", "k" * 16)
    assert s is not None and s.rejects == rejects


def test_auto_tokenizes_ahead_only_beside_a_long_reference_build(tmp_path, shared_data, monkeypatch):
    """CONTAM_TOKENIZE_AHEAD=auto (the default): on where the reference set will be built from at least
    AHEAD_MIN_SOURCE_BYTES of benchmark files, off where it is small or kept (its inputs unchanged)."""
    from contam_assets.defs.meta import DETECTOR_VERSION
    from contam_assets.defs.resources import ContamSettings, load_task_specs
    from contam_assets.runner import AHEAD_MIN_SOURCE_BYTES, ahead_mode, build_ahead_pays, tokenize_ahead
    from contam_assets.sources.registry import inputs_digest, source_bytes

    assert [ahead_mode(e) for e in ({}, {"CONTAM_TOKENIZE_AHEAD": ""}, {"CONTAM_TOKENIZE_AHEAD": " On "},
                                     {"CONTAM_TOKENIZE_AHEAD": "0"})] == ["auto", "auto", "on", "off"]
    with pytest.raises(ValueError, match="auto, on or off"):
        ahead_mode({"CONTAM_TOKENIZE_AHEAD": "sometimes"})
    pool = tmp_path / "pool"
    pool.mkdir()
    for s in range(3):
        write_shard(pool / f"s{s}.jsonl", host_docs(30, s), bad=False)
    for cmd in (["detect", "--pool", str(pool)], ["demo"]):  # refused before anything ran
        r = subprocess.run([sys.executable, "-m", "contam_assets.cli", *cmd, "--out", str(tmp_path / "bad")], text=True,
                           capture_output=True, env={**os.environ, "CONTAM_TOKENIZE_AHEAD": "sometimes"}, timeout=300)
        assert r.returncode == 2 and "CONTAM_TOKENIZE_AHEAD must be auto, on or off, got 'sometimes'" in r.stderr, r.stderr
        assert not (tmp_path / "bad").exists()
    every = ContamSettings(out_dir=str(tmp_path / "out"), pool_dir=str(pool), benchmarks_dir=str(shared_data))
    gsm8k = ContamSettings(out_dir=str(tmp_path / "out"), pool_dir=str(pool), benchmarks_dir=str(shared_data), tasks="gsm8k")
    specs = load_task_specs(every)
    assert source_bytes(specs, every.benchmarks_path) >= AHEAD_MIN_SOURCE_BYTES > source_bytes(load_task_specs(gsm8k), shared_data)
    assert build_ahead_pays(every, None) and not build_ahead_pays(gsm8k, None)  # no database yet: a build is due
    digest = inputs_digest(specs, every.benchmarks_path, every.detect_config()[0].reference_key(), DETECTOR_VERSION)
    every.db_path.parent.mkdir(parents=True)
    every.db_path.write_bytes(b"")  # not a database: tokenizing ahead is left out, the run goes on
    monkeypatch.setenv("CONTAM_SCAN_WORKERS", "2")  # the scan engine's processes: one builds, one tokenizes
    shards, said = sorted(p.name for p in pool.iterdir()), []
    assert tokenize_ahead(every, shards, said.append, env={}) is None
    assert said and said[0].startswith("  not tokenizing ahead: IOException")
    every.db_path.unlink()
    con = duckdb.connect(str(every.db_path))
    con.execute("create table instances (record_id bigint)")
    con.execute("""create table reference_state (inputs varchar, records bigint, bad_rows bigint, bad_row_examples varchar,
                   same_answer_suites varchar, seconds double, built_at timestamp)""")
    con.execute("insert into reference_state values (?, 0, 0, '[]', '', 12.5, now())", [digest])
    assert not build_ahead_pays(every, con)  # kept: reference_set's own rule
    con.close()
    env = {}
    assert tokenize_ahead(every, shards, print, env=env) is None  # auto, read from the output folder's database
    with duckdb.connect(str(every.db_path)) as con:
        con.execute("update reference_state set inputs = 'built from other files'")
        assert build_ahead_pays(every, con)
    every.db_path.unlink()
    ahead = tokenize_ahead(every, shards, print, env=env)  # auto, a fresh output folder: on
    assert ahead is not None and len(ahead.futures) == 3
    ahead.stop()
    assert tokenize_ahead(gsm8k, shards, print, env=env) is None
    ahead = tokenize_ahead(gsm8k, shards, print, env=env | {"CONTAM_TOKENIZE_AHEAD": "on"})
    assert ahead is not None
    ahead.stop()
    assert tokenize_ahead(every, shards, print, env=env | {"CONTAM_TOKENIZE_AHEAD": "off"}) is None
