"""Recitation: normalisation, a tiny model that recites, and judging in the sandbox (test_model_sandbox has the attacks)."""

import pytest

from contam_assets.model.code_exec import Limits, run_job
from contam_assets.model.code_text import function_body, normalize_code, similarity
from contam_assets.model.loader import LoadOptions, load_checkpoint
from contam_assets.model.recitation import (
    compare,
    humaneval_problems,
    mbpp_problems,
    recitation_metrics,
    run_recitation,
)
from contam_assets.testing import model_tiny as mt


@pytest.fixture(scope="module")
def humaneval(shared_data):
    return mt.humaneval()


def test_normalisation_ignores_comments_docstrings_and_layout(humaneval):
    (p,) = humaneval_problems([humaneval["HumanEval/55"]])
    reformatted = (
        "    # base cases\n"
        "    if n==0 :   return 0\n"
        "    if (n == 1):\n        return 1   # one\n\n\n"
        "    return fib(n-1)+fib(n-2)\n"
    )
    exact, sim = compare(p, reformatted)
    assert exact and sim == 1.0
    assert function_body('def f(x):\n    """doc"""\n    return x\n', "f") == "return x"
    assert normalize_code("x = 'a'  # c\n\n\ny = [1,\n 2]\n") == normalize_code('x = "a"\ny = [1, 2]')


def test_a_different_correct_body_is_not_recited(humaneval):
    (p,) = humaneval_problems([humaneval["HumanEval/23"]])
    exact, sim = compare(p, mt.ALTERNATIVE["HumanEval/23"])
    assert not exact and sim < 0.9
    near = "    return len(string) + 0\n"  # a small edit of the reference
    exact, sim = compare(p, near)
    assert not exact and sim >= 0.6
    exact, sim = compare(p, "    return len(str")  # cut short, does not parse: token fallback, no crash
    assert not exact and 0 < sim < 1


def test_mbpp_compares_whole_programs(shared_data, sandbox):
    rows = {r["task_id"]: r for r in mt.jsonl("mbpp.jsonl")}
    shots = [rows[i] for i in (2, 3, 4)]
    (p,) = mbpp_problems([rows[11]], shots)
    assert p.prompt.count("[BEGIN]") == 4 and p.prompt.endswith("[BEGIN]\n")
    assert compare(p, rows[11]["code"].replace("\r\n", "\n\n"))[0]
    assert run_job(p.job(rows[11]["code"].replace("\r\n", "\n"))).passed
    assert not run_job(p.job("def remove_Occ(s, ch):\n    return s\n")).passed


def test_tiny_model_recites_what_it_memorised(humaneval, tmp_path_factory, sandbox):
    lm = load_checkpoint(mt.trained_checkpoint(tmp_path_factory.getbasetemp() / "model_tiny"), LoadOptions(token_budget=2048))
    ids = list(mt.RECITED) + list(mt.ALTERNATIVE) + ["HumanEval/0"]
    problems = humaneval_problems([humaneval[t] for t in ids])
    items = {i.task_id: i for i in run_recitation(lm, problems, max_new_tokens=96, execute=True, limits=Limits(timeout_s=10))}
    for tid in mt.RECITED:
        assert items[tid].exact and items[tid].similar, items[tid].completion
        assert items[tid].status == "passed"
    alt = items["HumanEval/23"]
    assert not alt.exact and not alt.similar  # its own, different body: not a recitation ...
    assert alt.status == "passed"  # ... though it is correct
    assert not items["HumanEval/0"].exact and items["HumanEval/0"].status != "passed"
    m = recitation_metrics(list(items.values()))
    assert m["recitation/humaneval/exact"] == pytest.approx(3 / 5)
    assert m["recitation/humaneval/similar"] == pytest.approx(3 / 5)
    assert m["recitation/humaneval/pass@1"] == pytest.approx(4 / 5)


def test_similarity_bounds():
    assert similarity("return x", "return x") == 1.0
    assert similarity("", "") == 1.0
    assert similarity("return x", "for i in y: pass") < 0.5
