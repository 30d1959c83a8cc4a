"""`contam review`: a terminal review of the matches, and review decisions for derived suites."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from contam_assets.report.inert import term_text
from contam_assets.settings import add_flag


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("review", help="review matches in the terminal; accept or reject matches of derived suites")
    p.add_argument("out", help="output folder of `contam detect`")
    p.add_argument("--stats", action="store_true", help="counts per task, split, source and shard")
    p.add_argument("--top", type=int, default=10, help="show the N best matches (default 10)")
    p.add_argument("--task", help="only matches of this task")
    p.add_argument("--pending", action="store_true", help="only matches waiting for a review decision")
    p.add_argument("--near-misses", action="store_true", help="only stored candidates that were not flagged")
    p.add_argument("--reason", help="only matches made by this rule (question+answer, dump, question_only, answer_only, "
                                    "solution_only, near_duplicate, same_template)")
    p.add_argument("--accept", nargs="+", metavar="MATCH_ID", help="accept matches (their documents are removed)")
    p.add_argument("--reject", nargs="+", metavar="MATCH_ID", help="reject matches (their documents are kept)")
    p.add_argument("--accept-instance", nargs="+", metavar="SUITE/SPLIT/INDEX",
                   help="accept every match of an instance, e.g. humaneval_solution/test/17")
    p.add_argument("--reject-instance", nargs="+", metavar="SUITE/SPLIT/INDEX")
    p.add_argument("--accept-shard", nargs="+", metavar="SHARD",
                   help="accept an incomplete shard (its stream broke) as it is now: the next apply mixes its readable lines")
    p.add_argument("--reject-shard", nargs="+", metavar="SHARD", help="keep an incomplete shard quarantined (the default)")
    p.add_argument("--reviewer", default=os.environ.get("USER", "reviewer"))
    p.add_argument("--note", default="")
    p.add_argument("--serve", action="store_true",
                   help="serve the review page: filter, read raw text beside the eval item, accept/reject, apply")
    p.add_argument("--host", default="127.0.0.1", help="with --serve: address to bind (default 127.0.0.1, loopback only)")
    add_flag(p, "review_port", "--port", dest="port", doc="with --serve: port")
    p.add_argument("--dagster-home", help="with --serve: DAGSTER_HOME of the apply runs (default as `contam apply`)")
    p.set_defaults(func=run)


def db_path(out: Path) -> Path:
    from contam_assets.cli import CliError

    p = Path(out) / "contam.duckdb"
    if not Path(out).is_dir():
        raise CliError(f"output folder not found: {out}")
    if not p.exists():
        raise CliError(f"{p} not found: run `contam detect --out {out}` first")
    return p


def _color(enabled: bool):
    def c(code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if enabled else text
    return c


def _segments(seg_json: str, c) -> str:
    parts = []
    for s in json.loads(seg_json or "[]"):
        t = term_text(s["text"])
        if s["kind"] == "question":
            parts.append(c("1;33", f"[Q: {t}]"))
        elif s["kind"] == "answer":
            parts.append(c("1;32", f"[A: {t}]"))
        elif s["kind"] == "passage":
            parts.append(c("1;34", f"[P: {t}]"))
        else:
            parts.append(c("2", t))
    return " ".join(parts)


def _twins(twins_json: str) -> str:
    return term_text(", ".join(f"{t['instance']} ({t['relation']})" for t in json.loads(twins_json)))


def _record_decisions(con, args) -> int:
    """The decisions named on the command line, written by store.reviews (as the review page writes them)."""
    from contam_assets.cli import CliError
    from contam_assets.store import reviews

    try:
        decisions = [*reviews.for_matches(con, args.accept or [], "accept"), *reviews.for_matches(con, args.reject or [], "reject"),
                     *reviews.for_instances(args.accept_instance or [], "accept"),
                     *reviews.for_instances(args.reject_instance or [], "reject")]
        reviews.check_instances(con, decisions)
    except reviews.DecisionError as exc:
        raise CliError(str(exc)) from exc
    return reviews.record(con, decisions, args.reviewer, args.note)


def _print_stats(con) -> None:
    from contam_assets.store.translated_matches import DIRECT

    def table(sql, title):
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description]
        rows = cur.fetchall()
        print(f"\n{title}")
        widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) if rows else len(str(c)) for i, c in enumerate(cols)]
        print("  " + "  ".join(str(c).ljust(w) for c, w in zip(cols, widths)))
        for r in rows:
            print("  " + "  ".join(term_text(v).ljust(w) for v, w in zip(r, widths)))
    # every count names its unit: documents (lines of the pool) or matches (rows of the matches table; a document
    # can hold several, of several instances)
    table("""select count(*) shards, sum(read) read, sum(removed) removed, sum(kept) kept, sum(rejected) rejected,
             sum(pending_review) pending_review from shard_stats""",
          "totals, in documents (pending_review: documents with a match held for a review decision)")
    table(f"""select task, split, count(*) filter (where flagged) flagged_matches,
             count(*) filter (where not flagged) near_miss_matches,
             count(distinct case when flagged then shard||':'||line end) flagged_documents from matches
             where {DIRECT} group by 1,2 order by 3 desc""", "per task and split")
    table(f"""select coalesce(reason, 'question+answer') reason, count(*) matches, count(*) filter (where flagged) flagged_matches,
             count(*) filter (where flagged and needs_review) held_matches from matches where {DIRECT}
             group by 1 order by 2 desc""",
          "per reason, in matches")
    table("select coalesce(source,'(none)') source, count(*) removed_documents from removals group by 1 order by 2 desc",
          "removed per source")
    from contam_assets.store.translated_matches import exposure_lines

    lines = exposure_lines(con)
    if lines:
        print("\ntranslated tasks, in items exposed through their sources (they remove nothing of their own)")
        for line in lines:
            print("  " + term_text(line))
    table("select shard, read, removed, kept, rejected, pending_review, seconds from shard_stats order by shard",
          "per shard, in documents")
    from contam_assets.store import table_exists

    if table_exists(con, "detect_settings"):
        table("select name, value, coalesce(decon_name, '') decon_name, origin from detect_settings order by name",
              "detector settings that produced these tables")


def run(args) -> int:
    from contam_assets import store
    from contam_assets.cli import CliError
    from contam_assets.store import tables

    out = Path(args.out).resolve()
    path = db_path(out)
    if args.serve:
        if args.accept or args.reject or args.accept_instance or args.reject_instance:
            raise CliError("--serve takes no --accept/--reject: decide in the page")
        from contam_assets.commands.review_serve import serve

        return serve(out, args.host, args.port, args.reviewer, args.dagster_home)
    if args.accept_shard or args.reject_shard:
        from contam_assets.store import shards as shards_db

        with store.connect(path) as con:
            tables.ensure_schema(con)
            for decision, names in (("accept", args.accept_shard or []), ("reject", args.reject_shard or [])):
                for shard in names:
                    try:
                        shards_db.decide(con, shard, decision, args.reviewer, args.note)
                    except KeyError:
                        raise CliError(f"no scanned shard {term_text(repr(shard))}") from None
        print(f"recorded {len(args.accept_shard or []) + len(args.reject_shard or [])} shard decision(s). "
              f"Apply them with: contam apply {args.out}")
        return 0
    if args.accept or args.reject or args.accept_instance or args.reject_instance:
        with store.connect(path) as con:
            tables.ensure_schema(con)
            n = _record_decisions(con, args)
        print(f"recorded {n} decision(s). Apply them with: contam apply {args.out}")
        return 0
    c = _color(sys.stdout.isatty())
    with store.connect(path, read_only=True) as con:
        if args.stats:
            _print_stats(con)
            return 0
        where, params = ["true"], []
        if args.task:
            known = {r[0] for r in con.execute("select distinct task from matches").fetchall()}
            if args.task not in known:
                raise CliError(f"no matches for task {args.task!r}; tasks with matches: {', '.join(sorted(known)) or 'none'}")
            where.append("task = ?")
            params.append(args.task)
        else:  # a translated task's rows repeat a direct match: shown when that task is asked for
            where.append("coalesce(via_task, '') = ''")
        if args.pending:
            where.append("flagged and needs_review and coalesce(via_task, '') = '' "  # a translation's rows wait for nothing
                         "and match_id not in (select match_id from review_decisions where match_id is not null)")
        if args.near_misses:
            where.append("not flagged")
        if args.reason:
            where.append("coalesce(reason, 'question+answer') = ?")
            params.append(args.reason)
        rows = store.query_df(con, f"""select * from matches where {' and '.join(where)}
                               order by flagged desc, score desc, shard, line limit ?""", params + [args.top]).to_dicts()
        total, docs = con.execute(f"select count(*), count(distinct shard || ':' || line) from matches "
                                  f"where {' and '.join(where)}", params).fetchone()
    what = " pending review" if args.pending else ""
    print(f"{total} match(es){what} in {docs} document(s); showing {len(rows)} match(es)\n")
    for i, m in enumerate(rows, 1):
        status = c("1;31", "FLAGGED") if m["flagged"] else c("2", "near miss")
        if m["needs_review"]:
            status += " " + c("1;35", "NEEDS REVIEW")
        subj = f" [{m['subject']}]" if m["subject"] else ""
        print(c("1", term_text(f"#{i} {m['suite']} / {m['split']} / {m['instance_index']}{subj}")) +
              f"  score {m['score']:.3f} (needs {m['required_score']:.3f})  {status}")
        fmt = lambda v: "-" if v is None else f"{v:.3f}"
        print(f"   overlaps: question {fmt(m['question_overlap'])}  answer {fmt(m['answer_overlap'])}  passage {fmt(m['passage_overlap'])}"
              f"   match {m['match_id']}")
        print(f"   why: {m.get('reason') or 'question+answer'}" + (f"   twins: {_twins(m['twins'])}" if m.get("twins") else ""))
        if m.get("via_task"):
            print(term_text(f"   via: {m['via_task']} (a match of the item this one translates; it removes nothing itself)"))
        print(c("36", "   EVAL QUESTION: ") + term_text((m["eval_question"] or "")[:600]))
        if m["eval_answer"]:
            print(c("36", "   EVAL ANSWER:   ") + term_text(m["eval_answer"][:300]))
        print(c("36", term_text(f"   TRAINING {m['shard']}:{m['line']} ({m['doc_id']}): ")) + _segments(m["training_segments"], c))
        print()
    return 0
