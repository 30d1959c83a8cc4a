"""The summary of a run that the CLI prints (`contam detect`, `contam apply`): counts read from the run's tables,
every shard that failed, is incomplete or was retired, and the wall seconds of its stages."""

from __future__ import annotations

import time
from pathlib import Path

from contam_assets import store
from contam_assets.store import shards as shards_db
from contam_assets.store.pool import list_pool
from contam_assets.store.translated_matches import DIRECT


class Clock:
    """Wall seconds of each stage of a run (the summary's `seconds`)."""

    def __init__(self):
        self.t, self.laps = time.perf_counter(), {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self.t, 3)
        self.t = now


def lm_eval_reports(settings) -> list[str]:
    """The lines of the lm-eval tasks' manifest in the output folder (none when the run names no lm-eval task)."""
    if not settings.lm_eval_list:
        return []
    from contam_assets.sources.lm_eval_tasks import load_manifest, report_lines

    include = str(Path(settings.lm_eval_include).resolve()) if settings.lm_eval_include else None
    kept = load_manifest(settings.out_path / "lm_eval", settings.lm_eval_list, include)
    return report_lines(kept[1]) if kept else []


def summary(settings, extra: dict | None = None, retired: list[dict] = (),
            failed: dict[str, str] | None = None) -> dict:
    """Counts of the run for the CLI, with every shard that failed, is incomplete or was retired.  ``settings``: the
    run's settings (defs' ContamSettings: db_path, out_path, pool_path, follow_links, pool_pattern, lm-eval names)."""
    failed = dict(failed or {})
    with store.connect(settings.db_path, read_only=True) as con:
        row = con.execute("""select count(*), coalesce(sum(read),0), coalesce(sum(removed),0), coalesce(sum(kept),0),
                             coalesce(sum(rejected),0), coalesce(sum(pending_review),0) from shard_stats""").fetchone()
        flagged = con.execute(f"select count(*) from matches where flagged and {DIRECT}").fetchone()[0]
        stored = con.execute(f"select count(*) from matches where {DIRECT}").fetchone()[0]
        incomplete = {}
        for e in shards_db.errors(con):
            failed.setdefault(e["shard"], f"{e['step']}: {e['message']}")
        for s, st, why in con.execute("""select shard, status, status_reason from shard_stats
                                         where coalesce(status, 'ok') <> 'ok' order by shard""").fetchall():
            if st == "failed":
                failed.setdefault(s, f"nothing readable: {why}")
            elif s not in failed:
                incomplete[s] = f"{why}"
        files = shards_db.file_counts(con)
        cut = con.execute("select coalesce(sum(cut), 0) from mix_stats").fetchone()[0]
        lm_eval = lm_eval_reports(settings)
        reference = store.query_df(con, "select * from reference_summary order by task, split").to_dicts() \
            if store.table_exists(con, "reference_summary") else []
    return dict(reference=reference, lm_eval=lm_eval, files=files, shards=row[0], read=row[1], removed=row[2], kept=row[3], rejected=row[4], pending_review=row[5],
                flagged_matches=flagged, stored_matches=stored, cut=int(cut), db=str(settings.db_path),
                report=str(settings.out_path / "report.html"), mix=str(settings.out_path / "mix"),
                skipped_files=[(f.path, f.reason) for f in list_pool(settings.pool_path, settings.follow_links, settings.pool_pattern).skipped],
                incomplete=incomplete, failed=failed, retired=[r["shard"] for r in retired], **(extra or {}))
