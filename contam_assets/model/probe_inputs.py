"""What each probe reads: the texts to score, the code problems, the GSM sets.

Shared by the CLI (probe_run) and the Dagster assets.  Every set that cannot
be found becomes an entry in ``skipped`` (name -> reason) instead of an error;
malformed rows are listed in ``bad``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from contam_assets.model import benchmarks as bm
from contam_assets.model.code_exec import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, Limits
from contam_assets.model.fresh_gap import drop_gsm8k_questions
from contam_assets.model.membership import DEFAULT_K
from contam_assets.model.recitation import MBPP_SHOT_IDS, CodeProblem, humaneval_problems, mbpp_problems, unix_newlines
from contam_assets.model.scoring import SKYWORK_MAX_TOKENS


@dataclass(frozen=True)
class ProbeOptions:
    benchmarks_dir: Path | None = None  # None = embedded default (HumanEval only)
    tasks_dir: Path | None = None  # None = the project's data/tasks
    limit: int | None = None  # first N items of every set (None = full sets)
    ref_file: str | None = None  # GSM8K reference set (default: looked up in the benchmark folder)
    fresh_file: str | None = None  # fresh GSM-style set for the gap (GSM-Hard works)
    baseline_checkpoint: str | None = None  # a model that never saw the data: calibrated membership and Δ
    k: float = DEFAULT_K
    skywork_batch_size: int = 1  # Δ as defined; eval_loss.py's batching (EOS term for shorter texts) at > 1
    skywork_max_tokens: int = SKYWORK_MAX_TOKENS  # Skywork's --max-tokens (texts cut to // 3 characters)
    n_shot: int = 5
    shot_seed: int = 1234  # lm-evaluation-harness's default fewshot seed; shots drawn per question
    gsm_max_new_tokens: int = 256
    code_max_new_tokens: int = 384
    mbpp_shots: bool = True  # the MBPP paper's three worked examples before each problem
    execute: bool = False  # run generated code for pass@1 (bubblewrap sandbox; refused without it)
    exec_timeout_s: float = DEFAULT_TIMEOUT_S  # wall clock per item
    exec_memory_mb: int = DEFAULT_MEMORY_MB  # address space per sandboxed process
    exec_workers: int = 2  # items judged at a time

    def exec_limits(self) -> Limits:
        return Limits(timeout_s=self.exec_timeout_s, memory_mb=self.exec_memory_mb)


@dataclass
class Inputs:
    values: dict = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    bad: dict[str, list[str]] = field(default_factory=dict)
    counts: dict[str, float] = field(default_factory=dict)  # reported alongside the metrics (e.g. items dropped)

    def add(self, name: str, value, rows: bm.Rows | None = None) -> None:
        self.values[name] = value
        if rows is not None and rows.bad:
            self.bad[name] = rows.bad


def scoring_sets(opts: ProbeOptions) -> Inputs:
    """Texts per set: gsm8k-train/test (``{question} {answer}``), gsm8k-ref, humaneval, mbpp, fresh."""
    out = Inputs()
    lim = opts.limit
    for split in ("train", "test"):
        _try(out, f"gsm8k-{split}", lambda s=split: bm.gsm8k_texts(s, opts.benchmarks_dir, opts.tasks_dir), lim)
    _try(out, "gsm8k-ref", lambda: bm.reference_texts(bm.find_reference(opts.benchmarks_dir, opts.ref_file)), lim)
    _try(out, "humaneval", lambda: _texts(_rows("humaneval", "test", opts), lambda r: r["prompt"] + r["canonical_solution"]), lim)
    _try(out, "mbpp", lambda: _texts(_rows("mbpp", "test", opts), lambda r: f"{r['text']}\n{unix_newlines(r['code'])}"), lim)
    if opts.fresh_file:
        _try(out, "fresh", lambda: _fresh_texts(opts), lim)
    else:
        out.skipped["fresh"] = "no fresh set given"
    return out


def code_problems(opts: ProbeOptions) -> Inputs:
    """values: humaneval / mbpp -> list[CodeProblem]."""
    out = Inputs()
    try:
        rows = _rows("humaneval", "test", opts).head(opts.limit)
        out.add("humaneval", humaneval_problems(rows.rows), rows)
    except bm.DataMissing as exc:
        out.skipped["humaneval"] = str(exc)
    try:
        rows = _rows("mbpp", "test", opts).head(opts.limit)
        shots = []
        if opts.mbpp_shots:
            shots = [r for r in _rows("mbpp", "prompt", opts).rows if r.get("task_id") in MBPP_SHOT_IDS]
        out.add("mbpp", mbpp_problems(rows.rows, shots), rows)
    except bm.DataMissing as exc:
        out.skipped["mbpp"] = str(exc)
    return out


def all_problems(inputs: Inputs) -> list[CodeProblem]:
    return [p for name in ("humaneval", "mbpp") for p in inputs.values.get(name, [])]


def gsm_sets(opts: ProbeOptions) -> Inputs:
    """values: gsm8k-test rows, fresh rows, gsm8k-train rows (the few-shot pool)."""
    out = Inputs()
    if not opts.fresh_file:
        out.skipped["fresh"] = "no fresh set given (a GSM-style JSONL file, e.g. GSM-Hard)"
        return out
    try:
        test = bm.task_rows("gsm8k", "test", opts.benchmarks_dir, opts.tasks_dir).head(opts.limit)
        train = bm.task_rows("gsm8k", "train", opts.benchmarks_dir, opts.tasks_dir)
        fresh = bm.fresh_rows(opts.fresh_file).head(opts.limit)
    except bm.DataMissing as exc:
        out.skipped["fresh"] = str(exc)
        return out
    kept, dropped = drop_gsm8k_questions(fresh.rows, test.rows, train.rows)
    out.add("gsm8k-test", test.rows, test)
    out.add("gsm8k-train", train.rows, train)
    out.add("fresh", kept, fresh)
    out.counts["fresh/dropped-gsm8k-questions"] = float(len(dropped))
    if not kept:
        del out.values["fresh"]
        out.skipped["fresh"] = f"all {len(dropped)} fresh items are GSM8K questions"
    return out


def _fresh_texts(opts: ProbeOptions) -> tuple[list[str], bm.Rows]:
    """The fresh set's texts without the items whose question is a GSM8K question (when GSM8K is available)."""
    rows = bm.fresh_rows(opts.fresh_file)
    gsm8k = []
    for split in ("test", "train"):
        try:
            gsm8k.append(_rows("gsm8k", split, opts).rows)
        except bm.DataMissing:
            pass
    kept, _ = drop_gsm8k_questions(rows.rows, *gsm8k)
    return [f"{r['question']} {r['answer']}" for r in kept], bm.Rows(kept, rows.source, rows.bad)


def _rows(task: str, split: str, opts: ProbeOptions) -> bm.Rows:
    return bm.task_rows(task, split, opts.benchmarks_dir, opts.tasks_dir)


def _texts(rows: bm.Rows, fmt) -> tuple[list[str], bm.Rows]:
    return [fmt(r) for r in rows.rows], rows


def _try(out: Inputs, name: str, load, limit: int | None) -> None:
    try:
        texts, rows = load()
    except bm.DataMissing as exc:
        out.skipped[name] = str(exc)
        return
    out.add(name, texts[:limit] if limit else texts, rows)
