"""`contam tasks`: the tasks the registry offers and what a benchmark folder provides for them."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from contam_assets.settings import add_flag


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tasks", help="list the benchmark tasks, their splits and instance counts in a benchmark folder",
                       description="Every task spec with each split's source (benchmark folder, embedded, missing), "
                                   "its files and its instances (rows read; unreadable rows counted apart); then the "
                                   "data files of the folder that no spec reads.")
    p.add_argument("--benchmarks", help="benchmark folder (default: embedded HumanEval only)")
    add_flag(p, "tasks_dir")
    p.add_argument("--tasks", help="comma-separated task names (default: every spec)")
    p.add_argument("--lm-eval-tasks", help="also list these lm-evaluation-harness tasks or groups: every leaf with its "
                                           "docs per split, or why it failed (read offline through lm_eval)")
    p.add_argument("--lm-eval-include", help="a folder of your own lm-eval task YAMLs")
    p.set_defaults(func=run)


def split_rows(spec, split, avail) -> tuple[int, int]:
    """(readable rows, unreadable rows) of one split."""
    from contam_assets.sources.registry import iter_split

    ok = bad = 0
    for src, _ in iter_split(spec, split, avail):
        if src is None:
            bad += 1
        else:
            ok += 1
    return ok, bad


def unused_files(folder: Path, used: set[str]) -> list[str]:
    from contam_assets.sources.hf_files import expand_folder

    return [os.path.relpath(f, folder) for f in expand_folder(folder) if os.path.realpath(f) not in used]


def list_lm_eval(args) -> None:
    import tempfile

    from contam_assets.cli import CliError
    from contam_assets.report.inert import term_text
    from contam_assets.sources.lm_eval_tasks import LmEvalError, materialize, report_lines

    names = [t.strip() for t in args.lm_eval_tasks.split(",") if t.strip()]
    with tempfile.TemporaryDirectory(prefix="contam-tasks-") as tmp:
        try:
            _, reports = materialize(names, Path(tmp), args.lm_eval_include or None, refuse_code=False)
        except LmEvalError as exc:
            raise CliError(str(exc)) from None
    print(f"\nlm-eval tasks {', '.join(names)}: {sum(r.ok for r in reports)} of {len(reports)} leaf task(s) with docs")
    for line in report_lines(reports):
        print(term_text(line))


def run(args) -> int:
    from contam_assets.cli import CliError
    from contam_assets.report.inert import term_text as inert
    from contam_assets.sources.catalogue import resolve_tasks_dir
    from contam_assets.sources.registry import TaskSpecError, load_registry, locate

    bench = Path(args.benchmarks) if args.benchmarks else None
    if bench is not None and not bench.is_dir():
        raise CliError(f"benchmark folder not found: {args.benchmarks}")
    tasks_dir = resolve_tasks_dir(args.tasks_dir)
    only = [t.strip() for t in (args.tasks or "").split(",") if t.strip()] or None
    try:
        specs = load_registry(tasks_dir, only)
    except TaskSpecError as exc:
        raise CliError(str(exc)) from None
    print(f"tasks in {tasks_dir}; benchmark folder {bench.resolve() if bench else '(none: embedded default)'}")
    print(f"{'task':<22} {'kind':<16} {'split':<12} {'source':<10} {'files':>5} {'instances':>10}  unreadable")
    used: set[str] = set()
    with_data = 0
    for spec in specs:
        found = False
        for split in spec.splits:
            avail = locate(spec, split, bench.resolve() if bench else None)
            used.update(os.path.realpath(f) for f in avail.files)
            ok, bad = split_rows(spec, split, avail) if avail.files else (0, 0)
            found |= ok > 0
            print(f"{inert(spec.name):<22} {spec.kind:<16} {inert(split.name):<12} {avail.origin:<10} {len(avail.files):>5} "
                  f"{ok:>10,}  {bad:,}" if avail.files else
                  f"{inert(spec.name):<22} {spec.kind:<16} {inert(split.name):<12} {'missing':<10} {0:>5} {'-':>10}  "
                  f"(looks for {inert(split.file)})")
        with_data += found
    print(f"\n{with_data} of {len(specs)} task(s) have instances")
    if args.lm_eval_tasks:
        list_lm_eval(args)
    if bench is not None:
        extra = unused_files(bench.resolve(), used)
        if extra:
            print(f"{len(extra)} data file(s) in {bench} that no task spec reads (write a spec for them, "
                  "docs/benchmarks.md):")
            for f in extra[:50]:
                print(f"  {inert(f)}")
            if len(extra) > 50:
                print(f"  ... and {len(extra) - 50} more")
    return 0
