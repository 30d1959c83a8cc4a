"""The step's table writes as the tables grow: seconds per shard merged, at 0 to N shards already stored.

A run's scan outcomes are merged by the step, the one DuckDB writer (rescan/state.py
``write_outcomes``, batches of ``outcomes.FLUSH_SHARDS``).  With 26,000 shards in an
8-billion-document pool, what matters is whether a shard's merge costs the same when the
tables already hold thousands of shards.  This benchmark fills a DuckDB file with
``--stored`` shards of ``--rows`` match rows each (synthetic rows of the real schema,
~600 bytes of text per row, a few review decisions; filled once, then copied), then times merging ``--shards`` new
shards, each a full-scan outcome whose rows are in a Parquet part (as the worker pool
writes them), in batches of ``--batch``: in bulk on one copy and, on a second copy, shard by shard
(``write_outcomes(bulk=False)``, the merge before the bulk one).  It checks that the tables hold exactly the rows written (matches,
shard_stats, removals; no duplicates; three of the new shards replace stored ones), that
the two copies' tables are equal, and reports seconds per shard of each.

    python benchmarks/table_writes.py --stored 0,1000,4000 --json table_writes.json
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contam_assets import store  # noqa: E402
from contam_assets.detector.matches import MATCH_SCHEMA  # noqa: E402
from contam_assets.rescan import state  # noqa: E402
from contam_assets.rescan.shard import ShardOutcome  # noqa: E402
from contam_assets.store import tables  # noqa: E402

WORDS = "the of and to in a is that for it as was with be by on not he this are or his from at which but have".split()


def match_rows(shard: str, n: int, rng: random.Random) -> pl.DataFrame:
    rows = []
    for i in range(n):
        flagged = rng.random() < 0.3
        text = " ".join(rng.choices(WORDS, k=100))
        rows.append(dict(
            match_id=f"{shard}:{i}", shard=shard, line=i * 7, doc_id=f"d{i}", source="gen", task="gsm8k", suite="gsm8k",
            split="test", instance_index=rng.randrange(1319), subject=None, choice_index=None, is_correct=None,
            record_id=rng.randrange(80000), score=rng.random(), required_score=0.8, flagged=flagged,
            needs_review=flagged and rng.random() < 0.1, question_overlap=rng.random(), answer_overlap=rng.random(),
            passage_overlap=None, question_start=0, question_end=40, answer_start=40, answer_end=60, passage_start=None,
            passage_end=None, n_matched_ngrams=30, doc_tokens=500, doc_chars=2400, training_text=text,
            training_segments="[]", eval_question=text[:300], eval_answer=text[:100], eval_passage=None, preset="default",
            contamination_score=rng.random(), answer_spans="[]", cluster_end=60, reason=None, twins=None))
    return pl.DataFrame(rows, schema=MATCH_SCHEMA)


def stats_row(shard: str, frame: pl.DataFrame) -> dict:
    flagged = frame.filter(pl.col("flagged"))["line"].n_unique()
    return dict(shard=shard, read=6000, scanned=5900, too_short=100, rejected=0, flagged=flagged, pending_review=0,
                removed=flagged, kept=6000 - flagged, bytes=16_000_000, tokens=3_300_000, candidates=frame.height,
                seconds=3.0, shard_fingerprint=f"fp-{shard}", reject_reasons="", preset="default", index_digest="d",
                status="ok", status_reason=None, error_offset=None, error_line=None, prefiltered=0)


def outcome(shard: str, frame: pl.DataFrame, parts: Path) -> ShardOutcome:
    path = parts / f"{shard}.parquet"
    frame.write_parquet(path)
    return ShardOutcome(shard=shard, mode="full", matches=None, matches_path=str(path), n_matches=frame.height,
                        stats=stats_row(shard, frame), rejects=[], stream_key=f"k-{shard}", tasks=["gsm8k"], drop=[])


def fill(con, n_shards: int, rows: int, rng: random.Random) -> None:
    """``n_shards`` stored shards, inserted in bulk (not through the merge being timed)."""
    state.ensure_schema(con)
    for start in range(0, n_shards, 200):
        names = [f"old-{i:06d}" for i in range(start, min(n_shards, start + 200))]
        frames = [match_rows(s, rows, rng) for s in names]
        con.register("_m", pl.concat(frames).to_arrow())
        con.execute("insert into matches select * from _m")
        con.register("_s", pl.DataFrame([stats_row(s, f) for s, f in zip(names, frames)]).to_arrow())
        con.execute("insert into shard_stats select * from _s")
        con.unregister("_m")
        con.unregister("_s")
    con.execute("""insert into shard_scans select shard, 'fp', 1, 1, 'cfg', 'k', 'd', 'full', now()::timestamp
                   from shard_stats""")
    con.execute("""insert into review_decisions values ('r1', null, 'gsm8k', 'test', 5, null, 'reject', 'me', '', now()::timestamp),
                   ('r2', 'old-000001:3', null, null, null, null, 'accept', 'me', '', now()::timestamp)""")
    tables.recompute_removals(con)


def filled(stored: int, rows: int, work: Path) -> tuple[Path, tuple, float]:
    """A DuckDB file with ``stored`` shards, filled once for both merges (each merges into a copy of it); the
    generator's state after the fill (the new shards' rows follow from it) and the fill's seconds."""
    rng = random.Random(17 + stored)
    db = work / f"filled-{stored}.duckdb"
    con = duckdb.connect(str(db))
    t0 = time.perf_counter()
    fill(con, stored, rows, rng)
    fill_s = time.perf_counter() - t0
    con.close()  # a checkpoint: the file holds everything, no WAL beside it
    return db, rng.getstate(), fill_s


def merge(stored: int, shards: int, rows: int, batch: int, work: Path, bulk: bool,
          base: tuple[Path, tuple, float]) -> tuple[dict, duckdb.DuckDBPyConnection]:
    """A copy of the DuckDB file ``base`` with ``stored`` shards, then ``shards`` new ones merged ``batch`` at a
    time, in bulk or shard by shard (same generator state: same rows)."""
    filled_db, rng_state, fill_s = base
    rng = random.Random()
    rng.setstate(rng_state)
    db, parts = work / f"bench-{stored}-{bulk}.duckdb", work / f"parts-{stored}-{bulk}"
    parts.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(filled_db, db)
    con = duckdb.connect(str(db))
    # three of the new shards are rescans of stored ones: their old rows must go
    new = [f"old-{i:06d}" for i in range(min(3, stored))] + [f"new-{i:06d}" for i in range(shards - min(3, stored))]
    outs = [outcome(s, match_rows(s, rows, rng), parts) for s in new]
    seconds = []
    for i in range(0, shards, batch):
        t0 = time.perf_counter()
        state.write_outcomes(con, [(o, 16_000_000, 1) for o in outs[i : i + batch]], tasks_now={"gsm8k": "h"}, digest="d",
                             scan_config="cfg", clear_errors=("scan", "write"), bulk=bulk)
        seconds.append(time.perf_counter() - t0)
    n, distinct = con.execute("select count(*), count(distinct match_id) from matches").fetchone()
    kept = stored + shards - min(3, stored)  # shards in the tables after the merge
    assert n == distinct == kept * rows, (n, distinct)
    assert con.execute("select count(*) from shard_stats").fetchone()[0] == kept
    removed = con.execute("select count(*) from removals").fetchone()[0]
    expect = con.execute(f"select count(distinct (shard, line)) from ({tables.REMOVABLE_SQL}) r where {tables.REMOVES}").fetchone()[0]
    assert removed == expect > 0, (removed, expect)
    return dict(s_per_shard=round(sum(seconds) / shards, 4), first_batch_s=round(seconds[0], 3),
                last_batch_s=round(seconds[-1], 3), fill_s=round(fill_s, 1)), con


COMPARE = [("matches", "select * from matches order by rowid"),
           ("shard_stats", "select * from shard_stats order by rowid"),
           ("shard_scans", "select * exclude (scanned_at) from shard_scans order by rowid"),
           ("shard_task_scans", "select * exclude (scanned_at) from shard_task_scans order by rowid"),
           ("removals", "select * from removals order by shard, line")]


def run(stored: int, shards: int, rows: int, batch: int, work: Path) -> dict:
    """The merge in batches of ``batch``, in bulk and shard by shard, timed; their tables must be equal."""
    base = filled(stored, rows, work)
    batched, con_b = merge(stored, shards, rows, batch, work, bulk=True, base=base)
    single, con_1 = merge(stored, shards, rows, batch, work, bulk=False, base=base)
    base[0].unlink()
    for name, sql in COMPARE:
        a, b = store.query_df(con_b, sql), store.query_df(con_1, sql)
        assert a.equals(b), f"{name}: the bulk and the shard-by-shard merge differ"
    con_b.close()
    con_1.close()
    batched["db_mb"] = round((work / f"bench-{stored}-True.duckdb").stat().st_size / 1e6, 1)
    return dict(stored=stored, stored_rows=stored * rows, shards=shards, batch=batch, bulk=batched, shard_by_shard=single,
                speedup=round(single["s_per_shard"] / max(batched["s_per_shard"], 1e-9), 1), tables_equal=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stored", default="0,1000,4000", help="comma-separated counts of shards already stored")
    ap.add_argument("--shards", type=int, default=128, help="shards merged and timed")
    ap.add_argument("--rows", type=int, default=100, help="match rows per shard")
    ap.add_argument("--batch", type=int, default=32, help="shards per write (outcomes.FLUSH_SHARDS)")
    ap.add_argument("--work", type=Path, default=None, help="folder for the DuckDB files (default: a temporary one)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        results = [run(int(s), args.shards, args.rows, args.batch, Path(tmp)) for s in args.stored.split(",")]
    print("| shards stored | rows stored | s per shard, bulk | s per shard, shard by shard | ratio | DuckDB MB |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in results:
        b, o = r["bulk"], r["shard_by_shard"]
        print(f"| {r['stored']} | {r['stored_rows']} | {b['s_per_shard']} | {o['s_per_shard']} | {r['speedup']} × | {b['db_mb']} |")
    if args.json:
        args.json.write_text(json.dumps({"runs": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
