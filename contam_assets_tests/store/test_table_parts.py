"""A remote output's per-shard tables as Parquet parts (store/table_parts.py), on memory://: each shard's rows in
its own part, a part uploaded again only when its rows changed, the part of a shard with no rows any more deleted,
and the parts read back as a dataset equal the tables."""

from __future__ import annotations

from contextlib import contextmanager

import duckdb
import pyarrow.parquet as pq

from contam_assets.store import location, table_parts, tables


@contextmanager
def _connect(path):
    con = duckdb.connect(str(path))
    try:
        yield con
    finally:
        con.close()


def _parts(loc, table):
    fs = loc.filesystem()
    base = loc.url(f"tables/{table}/shards").rstrip("/")
    try:
        found = sorted(fs.find(base))
    except FileNotFoundError:
        return {}
    out = {}
    for f in found:
        with fs.open(f, "rb") as fh:
            out[f.split("/shards/", 1)[1]] = pq.read_table(fh)
    return out


def _rows(con, table):
    return sorted(con.execute(f"select * from {table}").fetchall(), key=repr)


def test_parts_follow_the_tables_shard_by_shard(tmp_path, monkeypatch):
    db = tmp_path / "contam.duckdb"
    connect = lambda read_only=False: _connect(db)  # noqa: E731
    loc = location.resolve("memory://parts-out/run", "out", must_exist=False)
    with connect() as con:
        tables.ensure_schema(con)
        con.execute("insert into removals values ('a.jsonl', 1, 'd1', 's', 10, 'flagged'), "
                    "('a.jsonl', 4, 'd4', 's', 12, 'flagged'), ('web/b.parquet', 0, 'b0', 's', 9, 'flagged')")
        con.execute("insert into shard_stats (shard, read, removed) values ('a.jsonl', 5, 2), ('web/b.parquet', 3, 1), "
                    "('c.jsonl', 7, 0)")
    uploads = []
    real = table_parts.outbox.upload
    monkeypatch.setattr(table_parts.outbox, "upload", lambda loc_, local, rel, remove=False: (
        uploads.append(rel), real(loc_, local, rel, remove=remove))[1])

    first = table_parts.sync(connect, loc, tmp_path / "work", ["a.jsonl"])  # the mix's flush: its own shards only
    assert sorted(uploads) == ["tables/removals/shards/a.jsonl.parquet", "tables/shard_stats/shards/a.jsonl.parquet"]
    assert first.kept == set(uploads)
    uploads.clear()
    whole = table_parts.sync(connect, loc, tmp_path / "work")  # the commit: every shard, a.jsonl's parts current
    assert sorted(uploads) == ["tables/removals/shards/web/b.parquet.parquet",
                               "tables/shard_stats/shards/c.jsonl.parquet",
                               "tables/shard_stats/shards/web/b.parquet.parquet"]
    assert whole.kept == set(uploads) | first.kept
    with connect() as con:
        for table in ("removals", "shard_stats"):
            got = sorted((tuple(r.values()) for t in _parts(loc, table).values() for r in t.to_pylist()), key=repr)
            assert got == _rows(con, table), table
        assert len(_parts(loc, "removals")["a.jsonl.parquet"]) == 2

    # a changed row (a review decision, a rescan) re-uploads that shard's part only; a shard with no rows loses its part
    uploads.clear()
    with connect() as con:
        con.execute("update removals set reason = 'reviewed' where shard = 'a.jsonl' and line = 4")
        con.execute("delete from removals where shard = 'web/b.parquet'")
    table_parts.sync(connect, loc, tmp_path / "work")
    assert uploads == ["tables/removals/shards/a.jsonl.parquet"]
    parts = _parts(loc, "removals")
    assert sorted(parts) == ["a.jsonl.parquet"]
    assert sorted(parts["a.jsonl.parquet"].column("reason").to_pylist()) == ["flagged", "reviewed"]
    uploads.clear()
    table_parts.sync(connect, loc, tmp_path / "work")
    assert uploads == []  # nothing changed: nothing uploaded
    # the staged parts are gone once uploaded; the lock that keeps two syncs apart stays
    assert [p.name for p in (tmp_path / "work").iterdir()] == [table_parts.LOCK]


def test_the_commit_keeps_a_part_a_concurrent_mix_uploaded_after_the_sync(tmp_path):
    """The commit's sweep of stale objects leaves the parts to table_parts: a mix run's part that lands between
    the publish's sync and its commit is not deleted (else table_parts records it as uploaded and no sync puts
    it back)."""
    db = tmp_path / "contam.duckdb"
    connect = lambda read_only=False: _connect(db)  # noqa: E731
    loc = location.resolve("memory://parts-out/concurrent", "out", must_exist=False)
    work = tmp_path / "work"
    with connect() as con:
        tables.ensure_schema(con)
        con.execute("insert into removals values ('a.jsonl', 1, 'd1', 's', 10, 'flagged')")
    synced = table_parts.sync(connect, loc, work)  # the publish's sync
    with connect() as con:  # a concurrent mix records shard z and uploads its part
        con.execute("insert into removals values ('z.jsonl', 2, 'd2', 's', 11, 'flagged')")
    table_parts.sync(connect, loc, work, ["z.jsonl"])
    (work / "run.json").write_text("{}")
    table_parts.outbox.commit(loc, work, set(synced.kept), [], log=lambda line: None,
                              keep_under=table_parts.PART_FOLDERS)
    assert sorted(_parts(loc, "removals")) == ["a.jsonl.parquet", "z.jsonl.parquet"]
    table_parts.outbox.commit(loc, work, set(synced.kept), [], log=lambda line: None)  # without: the part is lost
    assert sorted(_parts(loc, "removals")) == ["a.jsonl.parquet"]
