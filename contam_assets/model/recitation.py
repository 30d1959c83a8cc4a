"""Recitation of reference solutions (seed 003): HumanEval and MBPP.

The model continues each prompt greedily; the generated code is compared with
the benchmark's reference solution after normalisation (code_text).  A
problem is *recited* exactly when the normalised bodies are equal, and
*similar* when their token similarity is at least 0.9.  With execution
enabled, the generated code runs with the benchmark's tests in a limited
subprocess (code_exec) and pass@1 is the share that passes.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Callable, Sequence

from contam_assets.model.batching import LogFn
from contam_assets.model.code_exec import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, run_program
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
    entry_point: str | None  # HumanEval: compare this function's body; MBPP: the whole program
    program: Callable[[str], str]  # completion -> program that runs the tests


@dataclass(frozen=True)
class RecitationItem:
    benchmark: str
    task_id: str
    completion: str
    exact: bool
    similarity: float
    status: str | None = None  # passed | failed | timeout | None (not executed)

    @property
    def similar(self) -> bool:
        return self.similarity >= SIMILAR_AT


def humaneval_problems(rows: Sequence[dict]) -> list[CodeProblem]:
    def make(row: dict) -> CodeProblem:
        def program(completion: str, row=row) -> str:
            return f"{row['prompt']}{completion}\n\n{row['test']}\n\ncheck({row['entry_point']})\n"

        return CodeProblem("humaneval", row["task_id"], row["prompt"], row["canonical_solution"], row["entry_point"], program)

    return [make(r) for r in rows]


def _mbpp_text(row: dict, with_code: bool) -> str:
    tests = "\n".join(row["test_list"])
    text = f"You are an expert Python programmer, and here is your task: {row['text']} Your code should pass these tests:\n\n{tests}\n[BEGIN]\n"
    return text + f"{unix_newlines(row['code'])}\n[DONE]\n\n" if with_code else text


def unix_newlines(code: str) -> str:
    return code.replace("\r\n", "\n").replace("\r", "\n")


def mbpp_problems(rows: Sequence[dict], shot_rows: Sequence[dict] = ()) -> list[CodeProblem]:
    """MBPP problems with the paper's prompt; ``shot_rows`` are the worked examples put first."""
    shots = "".join(_mbpp_text(r, with_code=True) for r in shot_rows)

    def make(row: dict) -> CodeProblem:
        def program(completion: str, row=row) -> str:
            setup = row.get("test_setup_code") or ""
            return f"{completion}\n\n{setup}\n" + "\n".join(row["test_list"]) + "\n"

        return CodeProblem("mbpp", str(row["task_id"]), shots + _mbpp_text(row, False), unix_newlines(row["code"]), None, program)

    return [make(r) for r in rows]


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
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    log: LogFn | None = None,
) -> list[RecitationItem]:
    items: list[RecitationItem] = []
    for bench in sorted({p.benchmark for p in problems}):
        group = [p for p in problems if p.benchmark == bench]
        stop = HUMANEVAL_STOP if bench == "humaneval" else MBPP_STOP
        gens = generate_greedy(lm, [p.prompt for p in group], max_new_tokens, stop, log=log, what=f"generating {bench}")
        for p, g in zip(group, gens):
            exact, sim = compare(p, g.text)
            status = run_program(p.program(g.text), timeout_s, memory_mb).status if execute else None
            items.append(RecitationItem(bench, p.task_id, g.text, exact, sim, status))
        if log:
            log(f"{bench}: {sum(i.exact for i in items if i.benchmark == bench)}/{len(group)} recited exactly")
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
    return metrics
