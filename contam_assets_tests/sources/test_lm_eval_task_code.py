"""Task code runs only when asked: an lm-eval YAML's `!function` imports the include folder's Python, which
`contam tasks` never does and `contam detect` does only with --trust-task-code (or CONTAM_TRUST_TASK_CODE=1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contam_assets_tests.e2e.test_cli_data import contam

LM_EVAL_TASKS = Path(__import__("lm_eval.tasks", fromlist=["x"]).__file__).parent


@pytest.fixture
def planted(tmp_path, shared_data):
    """An include folder whose task's process_docs is a `!function` of its own utils.py, which writes a marker file
    when imported; a group over it; a pool holding one planted GSM8K item."""
    inc = tmp_path / "include"
    inc.mkdir()
    (inc / "utils.py").write_text("from pathlib import Path\nPath(__file__).with_name('MARKER').write_text('imported')\n\n\n"
                                  "def process_docs(dataset):\n    return dataset\n")
    rows = [json.loads(x) for x in (shared_data / "gsm8k_test.jsonl").read_text().splitlines()[:20]]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (inc / "planted.yaml").write_text(
        f"task: planted\ninclude: {LM_EVAL_TASKS / 'gsm8k' / 'gsm8k.yaml'}\ndataset_path: json\ndataset_name: null\n"
        f"training_split: null\nfewshot_split: null\nprocess_docs: !function utils.process_docs\n"
        f"dataset_kwargs:\n  data_files:\n    test: {tmp_path / 'test.jsonl'}\n")
    (inc / "planted_group.yaml").write_text("group: planted_group\ntask:\n  - planted\n")
    pool = tmp_path / "pool"
    pool.mkdir()
    host = "Notes from the weekend market and a long walk along the river bank. "
    (pool / "a.jsonl").write_text(json.dumps({"text": host + rows[4]["question"] + "\n" + rows[4]["answer"]}) + "\n")
    return inc, pool, inc / "MARKER"


def test_contam_tasks_lists_without_importing_task_code(planted, tmp_path):
    inc, _, marker = planted
    r = contam("tasks", "--tasks", "gsm8k", "--lm-eval-tasks", "planted_group", "--lm-eval-include", inc)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not marker.exists()
    assert "lm-eval tasks planted_group: 0 of 1 leaf task(s) with docs" in r.stdout
    assert (f"  lm-eval planted_group: not read: building it runs task code ({inc / 'utils.py'}), which listing never "
            "does; contam detect runs it with --trust-task-code") in r.stdout.splitlines()


@pytest.mark.slow  # one detect run that builds the trusted task (about 30 s)
def test_detect_refuses_task_code_unless_trusted(planted, tmp_path):
    inc, pool, marker = planted
    args = ("detect", "--pool", pool, "--lm-eval-tasks", "planted_group", "--lm-eval-include", inc)
    r = contam(*args, "--out", tmp_path / "o1", env_extra={"DAGSTER_HOME": str(tmp_path / "h1")})
    assert r.returncode == 2 and not marker.exists(), r.stderr[-2000:]
    assert r.stderr == (f"contam detect: error: lm-eval task code would run: {inc / 'utils.py'} (a !function of "
                        f"{inc / 'planted.yaml'}); pass --trust-task-code (CONTAM_TRUST_TASK_CODE=1) to run it\n")
    assert not (tmp_path / "o1" / "contam.duckdb").exists()
    # the graph's own door (a daemon run reads tasks through the task_registry asset): refused, nothing imported
    from contam_assets.sources.lm_eval_tasks import TaskCodeRefused, materialize

    with pytest.raises(TaskCodeRefused, match=r"lm-eval task code would run: .*utils\.py"):
        materialize(["planted"], tmp_path / "m", str(inc))
    assert not marker.exists()
    r = contam(*args, "--out", tmp_path / "o2", "--trust-task-code", env_extra={"DAGSTER_HOME": str(tmp_path / "h2")})
    assert r.returncode == 0, r.stderr[-2000:]
    assert marker.exists() and "  lm-eval planted: test 20" in r.stdout and "removed 1" in r.stdout
    # the environment variable trusts it as the flag does: the run goes past the check (to the next mistake)
    r = contam("detect", "--pool", tmp_path / "nowhere", "--lm-eval-tasks", "planted_group", "--lm-eval-include", inc,
               "--out", tmp_path / "o3", env_extra={"DAGSTER_HOME": str(tmp_path / "h3"), "CONTAM_TRUST_TASK_CODE": "1"})
    assert r.returncode == 2 and "pool not found" in r.stderr and "task code" not in r.stderr, r.stderr


def test_installed_task_code_is_installed_code(tmp_path, shared_data):
    """An include folder's YAML over an installed task whose own `!function` lives in lm_eval runs without the flag."""
    from contam_assets.sources.lm_eval_code import include_code, yaml_code

    inc = tmp_path / "include"
    inc.mkdir()
    (inc / "hs.yaml").write_text(f"task: hs\ninclude: {LM_EVAL_TASKS / 'hellaswag' / 'hellaswag.yaml'}\n")
    assert [c.module for c in yaml_code(inc / "hs.yaml")] == [(LM_EVAL_TASKS / "hellaswag" / "utils.py").resolve()]
    assert include_code(inc) == []
    (inc / "own.py").write_text("X = 1\n")
    (inc / "mine.yaml").write_text("task: mine\nclass: !function own.MyTask\n")
    assert [(c.module.name, c.yaml.name) for c in include_code(inc)] == [("own.py", "mine.yaml")]


def test_include_templates_render_sandboxed_unless_trusted(tmp_path, shared_data):
    """A template reaching Python through Jinja (no `!function`) runs nothing without the flag: its leaf fails with
    one line saying why; trusted, lm_eval renders it as it always does.  lm_eval's own environment is put back."""
    import lm_eval.utils as lm_utils

    from contam_assets.sources.lm_eval_tasks import materialize, report_lines

    marker = tmp_path / "MARKER"
    rows = [json.loads(x) for x in (shared_data / "gsm8k_test.jsonl").read_text().splitlines()[:3]]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    inc = tmp_path / "include"
    inc.mkdir()
    (inc / "jinja.yaml").write_text(
        f"task: jinja_planted\ninclude: {LM_EVAL_TASKS / 'gsm8k' / 'gsm8k.yaml'}\ndataset_path: json\n"
        f"dataset_name: null\ntraining_split: null\nfewshot_split: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {tmp_path / 'test.jsonl'}\n"
        f"doc_to_text: \"{{{{ cycler.__init__.__globals__.os.system('touch {marker}') }}}}Question: {{{{question}}}}\"\n")
    env = lm_utils.env
    specs, reports = materialize(["jinja_planted"], tmp_path / "m1", str(inc))
    assert specs == [] and not marker.exists() and lm_utils.env is env
    line, = report_lines(reports)
    assert line.startswith("  lm-eval jinja_planted: FAILED SecurityError: ") and line.endswith(
        "(a task template reached for Python internals; templates render sandboxed without --trust-task-code)")
    r = contam("tasks", "--tasks", "gsm8k", "--lm-eval-tasks", "jinja_planted", "--lm-eval-include", inc)
    assert r.returncode == 0 and not marker.exists(), r.stderr[-2000:]
    assert line in r.stdout.splitlines()
    specs, reports = materialize(["jinja_planted"], tmp_path / "m2", str(inc), trust_code=True)
    assert marker.exists() and [s.name for s in specs] == ["jinja_planted"] and reports[0].splits == {"test": 3}
    assert lm_utils.env is env


def test_namespace_package_function_is_outside_code(tmp_path, monkeypatch):
    """A `!function` whose module is a namespace package (a folder, no __init__.py) is imported by lm_eval too."""
    from contam_assets.sources.lm_eval_code import include_code

    (tmp_path / "nspkg_planted").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    inc = tmp_path / "include"
    inc.mkdir()
    (inc / "ns.yaml").write_text("task: ns\nprocess_docs: !function nspkg_planted.mod.fn\n")
    assert [(c.module, c.yaml.name) for c in include_code(inc)] == [((tmp_path / "nspkg_planted").resolve(), "ns.yaml")]
