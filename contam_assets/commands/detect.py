"""`contam detect`: run the data-side graph in-process on a pool."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from contam_assets.detector.config import KNOBS
from contam_assets.settings import add_flag
from contam_assets.sources.catalogue import resolve_tasks_dir

# decon's own flag for a knob, where it differs from ours (src/detect/common_args.rs)
DECON_FLAG_ALIASES = {k.field: "--" + k.decon.replace("_", "-") for k in KNOBS
                      if k.decon and "--" + k.decon.replace("_", "-") != k.flag and k.field != "tokenizer"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("detect", help="scan a training pool against the benchmark registry; write tables, report and mix",
                       description="Scan a training pool.  Every detector knob can be set here (decon's flag names "
                                   "work too); with --decon-config a decon YAML config sets them as decon would.")
    add_flag(p, "pool_dir", "--pool", "--training-dir", dest="pool", later=True,
             doc="the pool: a folder, a file, a glob or a URL (s3://, gs://, hf://, az://, file://, memory://) "
                 "of .json/.jsonl (plain, .gz, .zst, .zstd, .bz2, .xz), .parquet or .arrow/.feather files "
                 "(docs/pools.md); with --decon-config its training_dir")
    add_flag(p, "out_dir", "--out", dest="out", later=True, doc="output folder (contam.duckdb, report.html, mix/)",
             shown="with --decon-config a folder beside its report_output_dir; needed otherwise")
    add_flag(p, "benchmarks_dir", "--benchmarks", dest="benchmarks")
    add_flag(p, "evals_dir", "--evals-dir", later=True)
    add_flag(p, "decon_config", "--decon-config", "--config", dest="decon_config",
             doc="a decon YAML config (decon mode: decon's cleaning, reference rules and report files)")
    add_flag(p, "decon_report_dir", "--report-output-dir", dest="report_output_dir", later=True)
    add_flag(p, "decon_cleaned_dir", "--cleaned-output-dir", dest="cleaned_output_dir", later=True)
    add_flag(p, "purify", later=True)
    add_flag(p, "tasks")
    add_flag(p, "lm_eval_tasks", doc="comma-separated lm-evaluation-harness tasks or groups (groups expand to their "
             "leaves), read through lm_eval offline: datasets from the local HF cache or the task's local files")
    add_flag(p, "lm_eval_include", doc="a folder of your own lm-eval task YAMLs (lm_eval's include_path)")
    add_flag(p, "trust_task_code", doc="run the Python that lm-eval task YAMLs name with !function outside the "
             "installed lm_eval (an include folder's utils.py); without it such a task is refused, nothing imported")
    add_flag(p, "tasks_dir")
    add_flag(p, "preset")
    parts = p.add_argument_group("thorough parts", "beyond decon, each on its own (--preset thorough has them all)")
    for name, flag in PART_FLAGS.items():
        parts.add_argument(flag, dest=f"part_{name}", action="store_true", help=PART_HELP[name])
    add_flag(p, "removal", choices=["document", "span"],
             doc="document: remove every matched document; span: cut each matched span with 200 characters either "
                 "side and keep the rest (GPT-3's policy), every cut reported")
    p.add_argument("--no-unescape", action="store_true", help="exact decon parity: do not undo JSON/Python string escapes")
    add_flag(p, "content_key", later=True)
    add_flag(p, "allow_missing",
             doc="run even when a task named or found in --benchmarks has no source file (a warning then)")
    p.add_argument("--dagster-home", help="Dagster instance folder (default: $DAGSTER_HOME, else OUT/.dagster_home)")
    knobs = p.add_argument_group("detector knobs", "override the preset and the decon config; decon's flag names work too")
    for k in KNOBS:
        flags = [k.flag] + ([DECON_FLAG_ALIASES[k.field]] if k.field in DECON_FLAG_ALIASES else [])
        is_bool = isinstance(getattr(_defaults(), k.field), bool)
        knobs.add_argument(*flags, dest=f"knob_{k.field}", metavar="VALUE", nargs="?" if is_bool else None,
                           const="true" if is_bool else None, help=k.help)
    p.set_defaults(func=run)


PART_FLAGS = {"markup": "--markup", "short_questions": "--short-questions", "question_only": "--question-only",
              "answer_suites": "--answer-suites", "dumps": "--dumps", "near_duplicates": "--near-duplicates",
              "reference_overlap": "--reference-overlap", "paraphrase": "--paraphrase",
              "crosslingual": "--crosslingual"}
PART_HELP = {
    "markup": "decode HTML/XML entities and remove tags before cleaning (benchmark and training text alike)",
    "short_questions": "find questions under 14 tokens at any position (decon's sampling can step over them)",
    "question_only": "hold for review a long question found whole without its answer",
    "answer_suites": "derived <task>_answer suites where answers are long (GSM8K solutions), held for review",
    "dumps": "flag a document holding 3 or more instances of one task (a benchmark dump)",
    "near_duplicates": "datasketch MinHash LSH candidates for copies with words cut or inserted, verified exactly; "
                       "copies with other numbers are reported as same_template",
    "reference_overlap": "twins of every instance across the reference set (table reference_overlap)",
    "paraphrase": "beyond thorough: benchmark items reworded, found by meaning (WordLlama) and verified (same numbers, "
                  "signature, names); held for review, reason paraphrase (docs/paraphrase.md)",
    "crosslingual": "items translated into another language, found by a multilingual encoder (USE v3) and what "
                    "survives translation (numbers, names); held for review, reason translation (docs/crosslingual.md)",
}


def _defaults():
    from contam_assets.detector.config import DetectConfig

    return DetectConfig()


def knob_args(args) -> dict:
    """The knobs given on the command line, parsed (CliError naming the flag when a value does not fit)."""
    from contam_assets.cli import CliError
    from contam_assets.detector.config import ConfigError, parse_knob

    out = {}
    for k in KNOBS:
        value = getattr(args, f"knob_{k.field}", None)
        if value is None:
            continue
        try:
            out[k.field] = parse_knob(k.field, value)
        except ConfigError as exc:
            raise CliError(f"{k.flag}: {exc}") from None
    if getattr(args, "no_unescape", False):
        out.setdefault("unescape", False)
    return out


def check_out(out: str | Path | None, flag: str = "--out") -> None:
    """One line (CliError) where an output folder cannot be used, before any work: a file, a folder that cannot be
    created (under a file, under /proc) or one this user cannot write in (read-only).  Leaves nothing behind: the
    folders it had to create for the check are removed again, so a mistake found after it leaves no trace."""
    import tempfile

    from contam_assets.cli import CliError

    if out is None or "://" in str(out):  # not a local folder: its storage says so itself
        return
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CliError(f"{flag} {out}: exists and is not a folder")
    made = [p for p in (out, *out.parents) if not p.exists()]  # deepest first
    try:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CliError(f"{flag} {out}: cannot create the folder ({exc.strerror or exc})") from None
        try:
            fd, probe = tempfile.mkstemp(prefix=".contam-write-check-", dir=out)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise CliError(f"{flag} {out}: cannot write in the folder ({exc.strerror or exc})") from None
    finally:
        for folder in made:
            try:
                folder.rmdir()
            except OSError:
                break


def check_tasks(tasks: str | None, tasks_dir: str | None) -> None:
    """One line (CliError) for a task name the registry does not hold, with the nearest one and the known names."""
    from contam_assets.cli import CliError
    from contam_assets.sources.registry import TaskSpecError, load_registry

    only = [t.strip() for t in (tasks or "").split(",") if t.strip()]
    if not only:
        return
    try:
        load_registry(resolve_tasks_dir(tasks_dir), only)
    except TaskSpecError as exc:
        raise CliError(str(exc)) from None




def check_task_code(args) -> None:
    """One line (CliError) when building the --lm-eval-tasks would import the include folder's Python (a
    ``!function``) and --trust-task-code is off; nothing is imported to find out (sources/lm_eval_code.py)."""
    include, names = getattr(args, "lm_eval_include", ""), getattr(args, "lm_eval_tasks", "")
    if not include or not names or getattr(args, "trust_task_code", False) or not Path(include).is_dir():
        return
    from contam_assets.sources.lm_eval_code import include_code, refusal, task_code

    if not include_code(Path(include)):
        return
    from contam_assets.cli import CliError
    from contam_assets.sources.lm_eval_tasks import offline, task_manager

    offline(False)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    try:
        tm = task_manager(wanted, str(Path(include).resolve()))
    except ImportError:
        return  # the task_registry step says lm_eval is missing
    code = task_code(tm, wanted)
    if code:
        raise CliError(refusal(code))


def precheck(args) -> None:
    """The mistakes that can be found before Dagster is imported: --out, --dagster-home, --tasks, untrusted task
    code."""
    check_out(getattr(args, "out", None))
    home = getattr(args, "dagster_home", None)
    check_out(home or os.environ.get("DAGSTER_HOME") or None, "--dagster-home" if home else "DAGSTER_HOME")
    if getattr(args, "tasks_dir", None) and not resolve_tasks_dir(args.tasks_dir).is_dir():
        return  # settings_from_args says so
    check_tasks(getattr(args, "tasks", None), getattr(args, "tasks_dir", None))
    check_task_code(args)


def settings_from_args(args, pool: Path | str | None = None):
    from contam_assets import settings as S
    from contam_assets.cli import CliError
    from contam_assets.decon.config import load_decon_config
    from contam_assets.detector.config import PRESETS, ConfigError
    from contam_assets.store.location import LocationError, check_bucket, scheme_of, work_folder
    from contam_assets.store.location import resolve as resolve_location

    if args.preset not in PRESETS:
        raise CliError(f"unknown preset {args.preset!r}; choose one of {', '.join(sorted(PRESETS))}")
    if args.tasks_dir and not resolve_tasks_dir(args.tasks_dir).is_dir():
        raise CliError(f"task folder not found: {args.tasks_dir}")
    if args.lm_eval_include and not Path(args.lm_eval_include).is_dir():
        raise CliError(f"lm-eval include folder not found: {args.lm_eval_include}")
    if args.benchmarks and not Path(args.benchmarks).is_dir():
        raise CliError(f"benchmark folder not found: {args.benchmarks}")
    decon = None
    if args.decon_config:
        try:
            decon = load_decon_config(args.decon_config)
        except ConfigError as exc:
            raise CliError(str(exc)) from None
        for line in decon.messages():
            print(f"note: {line}")
    # every setting by the one rule (contam_assets/settings.py): flag > variable > decon config > default
    config = S.decon_values(decon) if decon else {}
    try:
        pool = pool or S.resolve("pool_dir", args.pool, config=config) or None
        report_dir = S.resolve("decon_report_dir", args.report_output_dir, config=config) or None
        out, out_from = S.resolve_with_source("out_dir", args.out, config=config)
        evals = S.resolve("evals_dir", args.evals_dir, config=config)
        purify = S.resolve("purify", args.purify, config=config)
        cleaned = S.resolve("decon_cleaned_dir", args.cleaned_output_dir, config=config)
        content_key = S.resolve("content_key", args.content_key, config=config)
        base = S.resolve("knobs") or {}  # under the knobs' own flags
        # the setting `crosslingual` is read by ContamSettings.from_env, as on the Dagster path
        parts = ",".join(name for name in PART_FLAGS if getattr(args, f"part_{name}", False)) or S.resolve("parts")
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if pool is None:
        raise CliError("no pool: pass --pool (or training_dir in the decon config)")
    try:
        loc = resolve_location(str(pool), "pool")  # a folder, a file, a glob or a URL, checked (one line if not)
    except LocationError as exc:
        raise CliError(str(exc)) from None
    pool_spec = loc.spec if not loc.is_local else (os.path.abspath(os.path.expanduser(loc.spec.split("://", 1)[-1])))
    if out_from == "default":  # `contam detect` names its output folder (or takes one beside the decon report)
        if not report_dir:
            raise CliError("no output folder: pass --out (or a decon config with report_output_dir)")
        r = Path(report_dir).resolve()
        out = str(r.with_name(r.name + "-contam"))
    out_loc = None
    if scheme_of(str(out)):  # a remote --out: the run works in a local folder, its outputs go to the store as made
        try:
            out_loc = resolve_location(str(out), "out", must_exist=False)
            if out_loc.is_local:
                out, out_loc = out_loc.root, None
            else:
                check_bucket(out_loc)
                out = str(work_folder(out_loc))
        except LocationError as exc:
            raise CliError(str(exc)) from None
    args.out_location = out_loc
    check_out(out)
    from contam_assets.defs.resources import ContamSettings, DetectorKnobs
    if evals and evals != config.get("evals_dir") and not Path(evals).exists() and not any(c in evals for c in "*?["):
        raise CliError(f"decon reference folder not found: {evals}")
    try:
        knobs = DetectorKnobs(**base | {k: (str(v) if v is None or k in ("decay_start", "decay_end") else v)
                                        for k, v in knob_args(args).items()})
        settings = ContamSettings.from_env(
            out_dir=out_loc.spec if out_loc is not None else str(Path(out).resolve()), pool_dir=pool_spec,
            benchmarks_dir=str(Path(args.benchmarks).resolve()) if args.benchmarks else "",
            tasks=args.tasks or "", tasks_dir=str(resolve_tasks_dir(args.tasks_dir)) if args.tasks_dir else "",
            preset=args.preset, content_key=content_key,
            evals_dir=str(Path(evals).resolve()) if evals and not any(c in evals for c in "*?[") else (evals or ""),
            decon_config=str(Path(args.decon_config).resolve()) if args.decon_config else "",
            decon_report_dir=str(Path(report_dir).resolve()) if report_dir else "",
            decon_cleaned_dir=str(Path(cleaned).resolve()) if cleaned else "", purify=bool(purify),
            allow_missing=args.allow_missing, knobs=knobs, lm_eval_tasks=args.lm_eval_tasks,
            lm_eval_include=str(Path(args.lm_eval_include).resolve()) if args.lm_eval_include else "", removal=args.removal,
            trust_task_code=bool(getattr(args, "trust_task_code", False)), parts=parts,
        )
        settings.detect_config()  # every knob checked before anything runs
    except (ConfigError, ValueError, json.JSONDecodeError) as exc:
        raise CliError(str(exc)) from None
    return settings


def say(line: str) -> None:
    """Print one line that holds shard names or other pool text (control characters removed: report.inert)."""
    from contam_assets.report.inert import term_text

    print(term_text(line))


def print_summary(s: dict) -> None:
    from contam_assets.detector.skips import summary_lines
    from contam_assets.report.inert import term_text

    if s.get("lm_eval"):
        print("\nlm-eval tasks (per leaf: docs per split, or why it failed)")
        for line in s["lm_eval"]:
            print(term_text(line))
    if s.get("reference"):
        print("\nreference set (per task and split: instances indexed, skipped by reason)")
        for line in summary_lines(s["reference"]):
            print(term_text(line))
    print(f"\nshards {s['shards']}  documents read {s['read']:,}  removed {s['removed']:,}  kept {s['kept']:,}  "
          f"rejected {s['rejected']:,}  pending review {s['pending_review']:,}")
    print(f"matches stored {s['stored_matches']:,} (flagged {s['flagged_matches']:,})")
    if s.get("files"):  # every pool file in exactly one class (store.shards.file_counts)
        from contam_assets.store.shards import file_counts_line

        print(file_counts_line(s["files"]))
    if s.get("cut"):
        print(f"span removal: {s['cut']:,} removed document(s) kept with their matched spans cut out (table cuts, report)")
    for name, reason in s.get("skipped_files", []):
        say(f"skipped {name}: {reason}")
    for shard in s.get("retired", []):
        say(f"retired {shard} (no longer in the pool: its rows and files were removed)")
    for shard, why in s.get("incomplete", {}).items():
        say(f"INCOMPLETE {shard}: {why} — its readable documents were scanned; no mix file until it is replaced "
            f"or accepted (contam review OUT --accept-shard {shard})")
    for shard, why in s.get("failed", {}).items():
        say(f"FAILED {shard}: {why}")
    if s.get("seconds"):
        print("seconds " + "  ".join(f"{k} {v:.2f}" for k, v in s["seconds"].items()))
    print(f"tables  {s['db']} (and as Parquet: {s.get('tables_dir') or s['db'].rsplit('/', 1)[0] + '/tables'}/)\n"
          f"report  {s['report']}\nmix     {s['mix']}/")
    if s.get("decon_reports"):
        print(f"decon   {s['decon_reports']}/ ({s['decon_report_files']} report file(s), "
              f"{s['decon_report_entries']} entries)")
    if s.get("decon_cleaned"):
        print(f"purified {s['decon_cleaned']}/ ({s['decon_cleaned_files']} file(s))")


RESUME_HINT = "rerun the same command to resume (shards scanned whole are kept)"


def run(args) -> int:
    from contam_assets.cli import stop_on_signals

    with stop_on_signals("detect", RESUME_HINT):  # a signal: one line and exit 128 + its number, never a trace
        return _run(args)


def _run(args) -> int:
    precheck(args)  # one line for a mistake, before any work (and before the heavy imports)
    from contam_assets.cli import CliError
    from contam_assets.executor.processes import warm_forkserver
    from contam_assets.store.door import DoorError
    from contam_assets.store.location import LocationError

    warm_forkserver()  # the workers' modules imported on another core while this process imports Dagster
    settings = settings_from_args(args)
    from contam_assets import runner

    try:
        runner.check_environment()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    instance = runner.instance_for(settings.out_path, args.dagster_home)
    try:
        s = runner.run_detect(settings, instance, log=say)
    except (FileNotFoundError, RuntimeError, LocationError, DoorError) as exc:
        raise CliError(str(exc)) from exc
    out_loc = getattr(args, "out_location", None)
    if out_loc is not None:  # the mix went to the store shard by shard, the tables and run.json at the end (store/outbox.py)
        s |= {"tables_dir": out_loc.url("tables"), "report": out_loc.url("report.html"), "mix": out_loc.url("mix")}
    print_summary(s)
    return exit_code(s)


def exit_code(s: dict) -> int:
    """0 when every shard was read whole and written; 1 when a shard failed or is incomplete, or every document read
    was rejected."""
    if s.get("read") and s.get("rejected") == s["read"]:
        print(f"\nevery document read was rejected ({s['read']:,}): nothing was scanned and the mix is empty; "
              f"see OUT/rejected/ and shard_stats.reject_reasons")
        return 1
    failed, incomplete = len(s.get("failed", {})), len(s.get("incomplete", {}))
    bad = failed + incomplete
    if bad:  # the complete ones: store.shards.file_counts, the classes the counts line above adds up
        ok = s["files"]["ok"] if s.get("files") else max(0, s.get("shards", 0) - incomplete - failed)
        print(f"\n{failed} shard(s) failed, {incomplete} incomplete; the other {ok} shard(s) are complete")
    return 1 if bad else 0
