"""Every environment variable the README documents is honoured by every command that takes the matching flag
(a test per variable; the flag, when given, wins)."""

from __future__ import annotations

import json

import pytest

from contam_assets.cli import build_parser
from contam_assets.commands.detect import settings_from_args


@pytest.fixture
def pool(tmp_path):
    p = tmp_path / "pool"
    p.mkdir()
    (p / "part-0.jsonl").write_text(json.dumps({"text": "hello"}) + "\n")
    return p


@pytest.fixture
def clean_env(monkeypatch):
    import os

    for k in list(os.environ):
        if k.startswith("CONTAM_") and k not in ("CONTAM_SHARED_DATA",):
            monkeypatch.delenv(k)
    return monkeypatch


def detect_settings(*argv):
    return settings_from_args(build_parser().parse_args(["detect", *map(str, argv)]))


def test_contam_pool(clean_env, pool, tmp_path):
    clean_env.setenv("CONTAM_POOL", str(pool))
    assert detect_settings("--out", tmp_path / "out").pool_dir == str(pool)
    assert detect_settings("--out", tmp_path / "out", "--pool", pool / "part-0.jsonl").pool_dir == str(pool / "part-0.jsonl")


def test_contam_out(clean_env, pool, tmp_path):
    clean_env.setenv("CONTAM_OUT", str(tmp_path / "envout"))
    assert detect_settings("--pool", pool).out_dir == str(tmp_path / "envout")
    assert build_parser().parse_args(["demo"]).out == str(tmp_path / "envout")


def test_contam_content_key(clean_env, pool, tmp_path):
    clean_env.setenv("CONTAM_CONTENT_KEY", "raw_content")
    assert detect_settings("--pool", pool, "--out", tmp_path / "o").content_key == "raw_content"
    assert detect_settings("--pool", pool, "--out", tmp_path / "o", "--content-key", "body").content_key == "body"


def test_contam_benchmarks(clean_env, pool, tmp_path, shared_data):
    clean_env.setenv("CONTAM_BENCHMARKS", str(shared_data))
    assert detect_settings("--pool", pool, "--out", tmp_path / "o").benchmarks_dir == str(shared_data)
    assert build_parser().parse_args(["demo"]).benchmarks == str(shared_data)


def test_contam_tasks(clean_env, pool, tmp_path):
    clean_env.setenv("CONTAM_TASKS", "gsm8k,mbpp")
    assert detect_settings("--pool", pool, "--out", tmp_path / "o").tasks == "gsm8k,mbpp"


def test_contam_preset(clean_env, pool, tmp_path):
    clean_env.setenv("CONTAM_PRESET", "olmo-web")
    assert detect_settings("--pool", pool, "--out", tmp_path / "o").preset == "olmo-web"
    assert build_parser().parse_args(["demo"]).preset == "olmo-web"
    assert detect_settings("--pool", pool, "--out", tmp_path / "o", "--preset", "default").preset == "default"


def test_contam_parts(clean_env, pool, tmp_path):
    clean_env.setenv("CONTAM_PARTS", "markup,dumps")
    assert detect_settings("--pool", pool, "--out", tmp_path / "o").part_list == ["markup", "dumps"]
    assert detect_settings("--pool", pool, "--out", tmp_path / "o", "--dumps").part_list == ["dumps"]


def test_contam_removal(clean_env, pool, tmp_path):
    clean_env.setenv("CONTAM_REMOVAL", "span")
    assert detect_settings("--pool", pool, "--out", tmp_path / "o").removal == "span"


def test_contam_evals_dir(clean_env, pool, tmp_path):
    evals = tmp_path / "evals"
    evals.mkdir()
    clean_env.setenv("CONTAM_EVALS_DIR", str(evals))
    assert detect_settings("--pool", pool, "--out", tmp_path / "o").evals_dir == str(evals)


def test_contam_decon_config(clean_env, pool, tmp_path):
    cfg = tmp_path / "decon.yaml"
    cfg.write_text(f"training_dir: {pool}\nreport_output_dir: {tmp_path / 'report'}\ncontent_key: body\n")
    clean_env.setenv("CONTAM_DECON_CONFIG", str(cfg))
    s = detect_settings()
    assert s.decon_config == str(cfg) and s.pool_dir == str(pool) and s.content_key == "body"


def test_contam_allow_missing(clean_env, pool, tmp_path):
    clean_env.setenv("CONTAM_ALLOW_MISSING", "1")
    assert detect_settings("--pool", pool, "--out", tmp_path / "o").allow_missing is True


def test_contam_knobs(clean_env, pool, tmp_path):
    clean_env.setenv("CONTAM_KNOBS", '{"threshold": 0.9}')
    s = detect_settings("--pool", pool, "--out", tmp_path / "o")
    assert s.detect_config()[0].threshold == 0.9
    assert detect_settings("--pool", pool, "--out", tmp_path / "o", "--threshold", "0.7").detect_config()[0].threshold == 0.7


def test_contam_experiments(clean_env, tmp_path):
    clean_env.setenv("CONTAM_EXPERIMENTS", str(tmp_path / "exp"))
    from contam_assets.defs.resources import ContamSettings

    assert ContamSettings.from_env().experiments_path == tmp_path / "exp"


def test_contam_tasks_dir(clean_env, pool, tmp_path):
    clean_env.setenv("CONTAM_TASKS_DIR", "catalogue")
    assert detect_settings("--pool", pool, "--out", tmp_path / "o").tasks_dir.endswith("catalogue")
    assert build_parser().parse_args(["tasks"]).tasks_dir == "catalogue"


def test_contam_lm_eval_tasks(clean_env, pool, tmp_path):
    clean_env.setenv("CONTAM_LM_EVAL_TASKS", "gsm8k,arc_easy")
    assert detect_settings("--pool", pool, "--out", tmp_path / "o").lm_eval_tasks == "gsm8k,arc_easy"
    assert detect_settings("--pool", pool, "--out", tmp_path / "o", "--lm-eval-tasks", "mmlu").lm_eval_tasks == "mmlu"


def test_contam_lm_eval_include(clean_env, pool, tmp_path):
    clean_env.setenv("CONTAM_LM_EVAL_INCLUDE", str(tmp_path))
    assert detect_settings("--pool", pool, "--out", tmp_path / "o").lm_eval_include == str(tmp_path)


def test_contam_trust_task_code(clean_env, pool, tmp_path):
    from contam_assets.defs.resources import ContamSettings

    assert detect_settings("--pool", pool, "--out", tmp_path / "o").trust_task_code is False
    assert detect_settings("--pool", pool, "--out", tmp_path / "o", "--trust-task-code").trust_task_code is True
    clean_env.setenv("CONTAM_TRUST_TASK_CODE", "1")
    assert detect_settings("--pool", pool, "--out", tmp_path / "o").trust_task_code is True
    assert ContamSettings.from_env().trust_task_code is True


def test_every_variable_of_the_configuration_table_has_its_test_here():
    """docs/usage.md's table of variables, read as written: each row names a variable a test above sets."""
    import re

    from contam_assets_tests.support.doc_commands import ROOT

    text = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8").split("## Configuration", 1)[1]
    names = re.findall(r"^\| `(CONTAM_[A-Z_]+)` \|", text, re.M)
    assert len(names) >= 16, names
    tests = {n for n in globals() if n.startswith("test_contam_")}
    missing = [n for n in names if f"test_{n.lower()}" not in tests]
    assert not missing, f"docs/usage.md documents {missing}: add a test here that sets each and reads it back"
