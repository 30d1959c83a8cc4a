"""The user tables' Parquet export (store/export.py): the part holds the table's rows in the table's order, an
unchanged table's part is left as it was, a changed, reordered, missing or truncated one is written again, and
DuckDB's settings are as they were after the call."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import pytest

from contam_assets.store import export, tables
from contam_assets.store.export import export_tables

SCHEMA = {"instances": tables.SCHEMA["instances"], "pool_skips": tables.SCHEMA["pool_skips"]}


def _rows(n: int, start: int = 0) -> list[tuple]:
    # record ids out of sorted order, so the part's order is the table's and not a sort's
    return [((i * 37) % 1009, f"task_{i % 5}", "suite", "test", i, None if i % 3 else f"subj_{i % 4}", i % 4,
             i % 4 == 0, "mc", "en", False, f"question {i} " * (1 + i % 3), f"answer {i}", None,
             f"fp{i:05d}", True, None, f"data/task_{i % 5}.jsonl", i, f"task_{i % 5}/{i}", i, None)
            for i in range(start, start + n)]


def _insert(con, rows: list[tuple]) -> None:
    cols = [c for c, _ in tables.columns_of(SCHEMA["instances"])]
    frame = pl.DataFrame(rows, schema=cols, orient="row", infer_schema_length=None)  # noqa: F841 (read by DuckDB)
    con.execute("insert into instances select * from frame")


@pytest.fixture
def db(tmp_path) -> Path:
    path = tmp_path / "contam.duckdb"
    with duckdb.connect(str(path)) as con:
        tables.ensure_schema(con, SCHEMA)
        _insert(con, _rows(300))
    return path


def _part(out: Path, table: str = "instances") -> Path:
    return out / "tables" / table / "part-0.parquet"


def _same_rows(con, out: Path, table: str = "instances") -> bool:
    """The part's rows, in the part's order, are the table's rows in the table's scan order."""
    return (con.execute(f"select * from read_parquet('{_part(out, table)}')").fetchall()
            == con.execute(f"select * from {table}").fetchall())


def _stat(p: Path) -> tuple[int, int]:
    s = p.stat()
    return s.st_ino, s.st_mtime_ns


def test_the_part_holds_the_tables_rows_in_order_and_an_unchanged_table_is_not_written_again(db, tmp_path):
    out = tmp_path / "out"
    with duckdb.connect(str(db), read_only=True) as con:  # pool_tables exports from a read-only connection
        first = export_tables(con, out)
        assert first == {"instances": 300, "pool_skips": 0}
        assert _same_rows(con, out) and _same_rows(con, out, "pool_skips")
        assert [r[0] for r in con.execute(f"select record_id from read_parquet('{_part(out)}')").fetchall()][:3] == [0, 37, 74]
        before = {t: _stat(_part(out, t)) for t in first}
    with duckdb.connect(str(db), read_only=True) as con:
        assert export_tables(con, out) == first
    assert {t: _stat(_part(out, t)) for t in first} == before
    assert sorted(p.name for p in (out / "tables").iterdir()) == ["instances", "pool_skips"]  # no temporaries left


@pytest.mark.parametrize("change", [
    "update instances set answer = 'changed' where instance_index = 150",  # one row updated
    "insert into instances select * from instances where instance_index = 7",  # one row added
    "update instances set is_correct = not is_correct where instance_index = 299",  # in place, same row count
    "update instances set subject = 'x' where instance_index = 1",  # a NULL becomes a value
    "alter table instances add column note VARCHAR",  # a column added, no value in it
    "reorder",  # the same rows in another order
])
def test_a_changed_table_is_written_again(db, tmp_path, change):
    out = tmp_path / "out"
    with duckdb.connect(str(db)) as con:
        export_tables(con, out, ("instances",))
        before = _stat(_part(out))
        if change == "reorder":
            con.execute("create temp table saved as select * from instances")
            con.execute("delete from instances")
            con.execute("insert into instances select * from saved order by instance_index desc")
        else:
            con.execute(change)
        rows = con.execute("select count(*) from instances").fetchone()[0]
        assert export_tables(con, out, ("instances",)) == {"instances": rows}
        assert _stat(_part(out)) != before
        assert _same_rows(con, out)


@pytest.mark.parametrize("damage", ["missing", "truncated", "emptied"])
def test_a_missing_or_truncated_part_is_written_again(db, tmp_path, damage):
    out = tmp_path / "out"
    with duckdb.connect(str(db), read_only=True) as con:
        export_tables(con, out, ("instances",))
        part = _part(out)
        size = part.stat().st_size
        if damage == "missing":
            part.unlink()
        else:
            with open(part, "r+b") as fh:
                fh.truncate(size // 2 if damage == "truncated" else 0)
        assert export_tables(con, out, ("instances",)) == {"instances": 300}
        assert part.stat().st_size == size
        assert _same_rows(con, out)


def test_a_part_written_without_a_key_is_written_again(db, tmp_path):
    out = tmp_path / "out"
    with duckdb.connect(str(db), read_only=True) as con:
        _part(out).parent.mkdir(parents=True)
        con.execute(f"copy (select * from instances) to '{_part(out)}' (format parquet, compression zstd)")
        before = _stat(_part(out))
        export_tables(con, out, ("instances",))
        assert _stat(_part(out)) != before
        assert _same_rows(con, out)


def test_duckdbs_memory_is_bounded_during_the_copy_and_its_settings_restored_after(db, tmp_path, monkeypatch):
    seen = []
    real = export._export

    def watched(con, root, t):
        seen.append(con.execute("select current_setting('memory_limit'), "
                                "current_setting('preserve_insertion_order')").fetchone())
        if t == "pool_skips":
            raise RuntimeError("copy failed")
        return real(con, root, t)

    monkeypatch.setattr(export, "_export", watched)
    with duckdb.connect(str(db), read_only=True) as con:
        con.execute("set memory_limit = '3GB'")
        con.execute("set preserve_insertion_order = false")
        want = con.execute("select current_setting('memory_limit'), current_setting('preserve_insertion_order')").fetchone()
        for _ in range(3):  # the same limit after every call, not one a little lower each time
            assert export_tables(con, tmp_path / "out", ("instances",)) == {"instances": 300}
            assert con.execute("select current_setting('memory_limit'), "
                               "current_setting('preserve_insertion_order')").fetchone() == want
        with pytest.raises(RuntimeError, match="copy failed"):  # restored when the copy fails too
            export_tables(con, tmp_path / "out", ("pool_skips",))
        assert con.execute("select current_setting('memory_limit'), "
                           "current_setting('preserve_insertion_order')").fetchone() == want
    with duckdb.connect() as probe:
        probe.execute(f"set memory_limit = '{tables.EXPORT_MEMORY}'")
        bounded = probe.execute("select current_setting('memory_limit')").fetchone()[0]
    assert want[0] != bounded and seen == [(bounded, True)] * 4
    with duckdb.connect(str(db), read_only=True) as con:  # the default limit is the default again
        default = con.execute("select current_setting('memory_limit')").fetchone()[0]
        export_tables(con, tmp_path / "out", ("instances",))
        assert con.execute("select current_setting('memory_limit')").fetchone()[0] == default
