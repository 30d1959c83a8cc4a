"""`contam compare A B`: two detection runs side by side (ours or decon's report folders)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare two runs (contam output folders or decon report folders), like decon's compare")
    p.add_argument("first", help="a `contam detect` output folder, or a folder of decon report files")
    p.add_argument("second", help="the same, for the other run")
    p.add_argument("--eval", help="only entries of this eval_key")
    p.add_argument("--min-score", type=float, help="only entries with contamination_score at least this")
    p.add_argument("--only-in-first", action="store_true", help="list the entries only the first run has")
    p.add_argument("--only-in-second", action="store_true", help="list the entries only the second run has")
    p.add_argument("--common", action="store_true", help="list the entries both runs have")
    p.add_argument("--json", help="write the whole comparison to this file")
    p.add_argument("--fail-on-difference", action="store_true", help="exit 1 when the runs differ")
    p.set_defaults(func=run)


def _key(k) -> str:
    return f"{k[0]}:{k[1]}  {k[2]} line {k[3]}"


def run(args) -> int:
    from contam_assets.cli import CliError
    from contam_assets.decon.compare import compare

    try:
        c = compare(args.first, args.second, eval_key=args.eval, min_score=args.min_score)
    except (FileNotFoundError, ValueError) as exc:
        raise CliError(str(exc)) from None
    s = c.summary()
    print("=== contamination comparison ===")
    print(f"first   {args.first}: {s['entries_first']} entries in {s['documents_first']} documents")
    print(f"second  {args.second}: {s['entries_second']} entries in {s['documents_second']} documents")
    print(f"in both {s['entries_both']}   only first {s['entries_only_first']}   only second {s['entries_only_second']}")
    print(f"documents flagged only by the first: {len(s['documents_only_first'])}, only by the second: "
          f"{len(s['documents_only_second'])}")
    print(f"instances flagged only by the first: {len(s['instances_only_first'])}, only by the second: "
          f"{len(s['instances_only_second'])}")
    print(f"score changes (|difference| > 1e-4) among common entries: {len(s['score_changes'])}")
    print("\neval_key                 first  second    both")
    for r in s["per_eval_key"]:
        print(f"{r['eval_key'][:24]:24s} {r['first']:6d} {r['second']:7d} {r['both']:7d}")
    for flag, keys, title in ((args.only_in_first, c.only_a, "only in the first"),
                              (args.only_in_second, c.only_b, "only in the second"), (args.common, c.both, "in both")):
        if flag:
            print(f"\n{title}:")
            for k in keys:
                print("  " + _key(k))
    print("\nthe runs agree entry for entry" if c.identical else "\nthe runs differ")
    if args.json:
        Path(args.json).write_text(json.dumps(s, indent=1, default=list))
    return 1 if (args.fail_on_difference and not c.identical) else 0
