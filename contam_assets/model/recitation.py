"""Recitation of reference solutions (seed 003): HumanEval and MBPP.

The model continues each prompt greedily; the generated code is compared with
the benchmark's reference solution after normalisation (code_text).  A
problem is *recited* exactly when the normalised bodies are equal, and
*similar* when their token similarity is at least 0.9.  With execution
enabled, the generated code runs in a bubblewrap sandbox and the benchmark's
tests judge it from a second sandbox (code_exec); pass@1 is the share that
passes.  A completion that hangs, forks, deletes or attacks the sandbox costs
only its own item.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Sequence

from contam_assets.model.batching import LogFn
from contam_assets.model.code_exec import ExecCase, Limits, run_jobs
from contam_assets.model.code_text import HUMANEVAL_STOP, code_tokens, function_body, normalize_code, similarity
from contam_assets.model.generation import generate_greedy
from contam_assets.model.loader import LoadedModel

SIMILAR_AT = 0.9
MBPP_STOP = ("[DONE]", "\nYou are an expert Python programmer")
MBPP_SHOT_IDS = (2, 3, 4)  # the MBPP paper's few-shot prompt problems (outside the test range 11-510)


@dataclass(frozen=True)
class CodeProblem:
    benchmark: str  # humaneval | mbpp
    task_id: str
    prompt: str
    reference: str  # the reference solution as the benchmark ships it
    entry_point: str | None  # HumanEval: compare this function's body and check() it; MBPP: the whole program
    tests: str  # the benchmark's test code (HumanEval: defines check; MBPP: its assert lines)
    setup: str = ""  # MBPP's test_setup_code

    def job(self, completion: str) -> ExecCase:
        """What the sandbox runs: the generated program, judged by the benchmark's tests."""
        if self.entry_point:  # HumanEval: prompt + completion; the judge has the prompt's helpers itself
            return ExecCase(f"{self.prompt}{completion}\n", self.tests, setup=self.prompt, entry=self.entry_point)
        # MBPP: the setup code builds its data from the generated classes, so it runs with the program;
        # what it builds reaches the judge as plain values or handles.
        return ExecCase(f"{completion}\n\n{self.setup}\n", self.tests)


@dataclass(frozen=True)
class RecitationItem:
    benchmark: str
    task_id: str
    completion: str
    exact: bool
    similarity: float
    status: str | None = None  # passed | failed | timeout | error (sandbox failed) | None (not executed)
    detail: str = ""  # why it did not pass

    @property
    def similar(self) -> bool:
        return self.similarity >= SIMILAR_AT


def humaneval_problems(rows: Sequence[dict]) -> list[CodeProblem]:
    return [
        CodeProblem("humaneval", r["task_id"], r["prompt"], r["canonical_solution"], r["entry_point"], r["test"])
        for r in rows
    ]


def _mbpp_text(row: dict, with_code: bool) -> str:
    tests = "\n".join(row["test_list"])
    text = f"You are an expert Python programmer, and here is your task: {row['text']} Your code should pass these tests:\n\n{tests}\n[BEGIN]\n"
    return text + f"{unix_newlines(row['code'])}\n[DONE]\n\n" if with_code else text


def unix_newlines(code: str) -> str:
    return code.replace("\r\n", "\n").replace("\r", "\n")


def mbpp_problems(rows: Sequence[dict], shot_rows: Sequence[dict] = ()) -> list[CodeProblem]:
    """MBPP problems with the paper's prompt; ``shot_rows`` are the worked examples put first."""
    shots = "".join(_mbpp_text(r, with_code=True) for r in shot_rows)

    return [
        CodeProblem("mbpp", str(r["task_id"]), shots + _mbpp_text(r, False), unix_newlines(r["code"]), None,
                    "\n".join(r["test_list"]) + "\n", r.get("test_setup_code") or "")
        for r in rows
    ]


def compare(problem: CodeProblem, completion: str) -> tuple[bool, float]:
    """(exact after normalisation, token similarity) of a completion against the reference."""
    if problem.entry_point:
        ref = function_body(problem.prompt + problem.reference, problem.entry_point)
        gen = function_body(problem.prompt + completion, problem.entry_point)
        if ref is None:  # the reference itself does not parse with this prompt: compare bare bodies
            ref = normalize_code(problem.reference)
        if gen is None:
            gen = " ".join(code_tokens(textwrap.dedent(completion)))
            return False, similarity(gen, ref)
        return gen == ref, similarity(gen, ref)
    ref, gen = normalize_code(problem.reference), normalize_code(completion)
    return gen == ref, similarity(gen, ref)


def run_recitation(
    lm: LoadedModel,
    problems: Sequence[CodeProblem],
    max_new_tokens: int = 384,
    execute: bool = False,
    limits: Limits = Limits(),
    workers: int = 2,
    log: LogFn | None = None,
) -> list[RecitationItem]:
    """Generate for every problem, compare with the reference, and (``execute``) judge it in the sandbox."""
    completions: list[str] = []
    for bench in sorted({p.benchmark for p in problems}):
        group = [p for p in problems if p.benchmark == bench]
        stop = HUMANEVAL_STOP if bench == "humaneval" else MBPP_STOP
        gens = generate_greedy(lm, [p.prompt for p in group], max_new_tokens, stop, log=log, what=f"generating {bench}")
        completions += [g.text for g in gens]
    ordered = sorted(problems, key=lambda p: p.benchmark)
    return judge_completions(ordered, completions, execute, limits, workers, log)


def judge_completions(
    problems: Sequence[CodeProblem],
    completions: Sequence[str],
    execute: bool = False,
    limits: Limits = Limits(),
    workers: int = 2,
    log: LogFn | None = None,
) -> list[RecitationItem]:
    """RecitationItems for given completions (the part of run_recitation after generation)."""
    results = run_jobs([p.job(c) for p, c in zip(problems, completions)], limits, workers, log) if execute else []
    items = []
    for i, (p, completion) in enumerate(zip(problems, completions)):
        exact, sim = compare(p, completion)
        status, detail = (results[i].status, results[i].detail) if execute else (None, "")
        items.append(RecitationItem(p.benchmark, p.task_id, completion, exact, sim, status, detail))
    if log:
        for bench in sorted({i.benchmark for i in items}):
            group = [i for i in items if i.benchmark == bench]
            log(f"{bench}: {sum(i.exact for i in group)}/{len(group)} recited exactly")
    return items


def recitation_metrics(items: Sequence[RecitationItem]) -> dict[str, float | None]:
    """``recitation/<bench>/{n,exact,similar,similarity-mean,pass@1}``."""
    metrics: dict[str, float | None] = {}
    for bench in sorted({i.benchmark for i in items}):
        group = [i for i in items if i.benchmark == bench]
        n = len(group)
        metrics[f"recitation/{bench}/n"] = float(n)
        metrics[f"recitation/{bench}/exact"] = sum(i.exact for i in group) / n
        metrics[f"recitation/{bench}/similar"] = sum(i.similar for i in group) / n
        metrics[f"recitation/{bench}/similarity-mean"] = sum(i.similarity for i in group) / n
        executed = [i for i in group if i.status is not None]
        metrics[f"recitation/{bench}/pass@1"] = sum(i.status == "passed" for i in executed) / len(executed) if executed else None
        if executed:
            for status in ("timeout", "error"):
                metrics[f"recitation/{bench}/{status}s"] = float(sum(i.status == status for i in executed))
    return metrics
