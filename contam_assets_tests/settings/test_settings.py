"""contam_assets/settings.py: every setting once, one rule (flag > variable > config file > default) for all of them,
wherever they are read (the command line, the Dagster resources, the daemon's decon config), docs/settings.md
generated from it, and no variable name spelled anywhere else in the package."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from contam_assets import settings as S
from contam_assets.cli import build_parser
from contam_assets_tests.support.doc_commands import ROOT


@pytest.fixture
def clean_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith(S.PREFIX) and k != S.var("shared_data"):
            monkeypatch.delenv(k)
    return monkeypatch


@pytest.fixture
def pool(tmp_path):
    p = tmp_path / "pool"
    p.mkdir()
    (p / "part-0.jsonl").write_text('{"text": "hello", "body": "hi", "raw": "hey"}\n')
    return p


# --- the table ---------------------------------------------------------------------------------------------------

def test_the_table_names_each_setting_and_variable_once_and_imports_no_dagster():
    names = [s.name for s in S.SETTINGS]
    variables = [s.var for s in S.SETTINGS] + [v for s in S.SETTINGS for v in s.old_vars]
    assert len(names) == len(set(names)) and len(variables) == len(set(variables))
    assert all(v.startswith(S.PREFIX) for v in variables)
    assert all(s.room in S.ROOMS and s.doc for s in S.SETTINGS)
    r = subprocess.run([sys.executable, "-c", "import sys, contam_assets.settings as s; "
                        "print(sorted(m for m in sys.modules if m.startswith(('dagster', 'contam_assets'))))"],
                       capture_output=True, text=True, cwd=ROOT, check=True)
    assert r.stdout.strip() == "['contam_assets', 'contam_assets.settings']"


def test_the_preset_choices_are_the_detectors_presets():
    from contam_assets.detector.config import PRESETS

    assert set(S.get("preset").choices) == set(PRESETS)


def test_every_field_of_the_data_resource_is_a_setting():
    from contam_assets.defs.resources import SETTING_FIELDS, ContamSettings

    assert set(SETTING_FIELDS) == set(ContamSettings.model_fields)
    for name in SETTING_FIELDS:
        default = ContamSettings.model_fields[name].default
        if name != "knobs":
            assert default == S.get(name).default, name


# --- one rule ----------------------------------------------------------------------------------------------------

def _values(s: S.Setting) -> tuple:
    """Three different valid values (flag, variable, config) of a setting, as text."""
    if s.kind in ("bool", "optbool"):
        return None, None, None  # two values only: tested apart
    if s.kind == "int":
        return "7", "8", "9"
    if s.kind == "float":
        return "0.5", "0.25", "0.125"
    if s.kind == "json":
        return '{"threshold": 0.7}', '{"threshold": 0.8}', '{"threshold": 0.9}'
    if s.choices:
        c = list(dict.fromkeys(x for x in s.choices if x != s.default))
        return c[0], c[1 % len(c)], c[-1]
    return "from-flag", "from-variable", "from-config"


@pytest.mark.parametrize("name", [s.name for s in S.SETTINGS])
def test_flag_over_variable_over_config_over_default(name):
    s = S.get(name)
    flag, var, conf = _values(s)
    if flag is None:  # a switch: each source shown to win over the ones below it with the opposite value
        assert S.resolve(name, flag=True, env={s.var: "0"}, config={name: False}) is True
        assert S.resolve(name, env={s.var: "1"}, config={name: False}) is True
        assert S.resolve(name, env={s.var: "0"}, config={name: True}) is False
        assert S.resolve(name, env={}, config={name: True}) is True
        assert S.resolve(name, env={s.var: ""}) == s.default  # set but empty counts as unset
        return
    env = {s.var: var}
    config = {name: conf}
    assert S.resolve_with_source(name, flag=flag, env=env, config=config) == (S.parse(name, flag), "flag")
    assert S.resolve_with_source(name, env=env, config=config) == (S.parse(name, var), "variable")
    assert S.resolve_with_source(name, env={s.var: ""}, config=config) == (S.parse(name, conf), "config")
    assert S.resolve_with_source(name, env={}) == (s.default, "default")


@pytest.mark.parametrize("name", [s.name for s in S.SETTINGS if s.kind != "str" or s.choices])
def test_a_bad_value_is_one_line_naming_the_variable_and_the_values(name):
    s = S.get(name)
    with pytest.raises(ValueError) as exc:
        S.resolve(name, env={s.var: "not a value{"})
    msg = str(exc.value)
    assert msg.startswith(s.var + " must be ") and "\n" not in msg and "'not a value{'" in msg, msg
    if s.choices:
        assert all(c in msg for c in s.choices), msg


def test_a_bad_variable_stops_a_command_with_one_line(clean_env):
    clean_env.setenv(S.var("removal"), "shred")
    r = subprocess.run([sys.executable, "-m", "contam_assets.cli", "detect", "--pool", "x", "--out", "y"],
                       capture_output=True, text=True, cwd=ROOT, env={**os.environ})
    assert r.returncode == 2
    assert r.stderr.strip() == "contam detect: error: CONTAM_REMOVAL must be document or span, got 'shred'", r.stderr


def _required(sub) -> list[str]:
    """Dummy values for the required arguments of a subcommand's parser (positional and --flag)."""
    out = []
    for action in sub._actions:
        if action.required and action.option_strings:
            out += [action.option_strings[0], "0.5"]
        elif not action.option_strings and action.dest != "help" and action.nargs not in ("*", "?"):
            out.append("x")
    return out


def _flagged():
    """(command, flag, setting name) of every flag the command line fills from the settings."""
    parser = build_parser()
    subs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    rows = []
    for command, sub in subs.items():
        fill = sub._defaults.get("_contam_fill", {})
        for action in sub._actions:
            if action.dest in fill:
                rows.append((command, action.option_strings[0], fill[action.dest]))
    return rows


FLAGGED = _flagged()


def test_the_command_line_fills_flags_from_the_settings():
    commands = {c for c, _, _ in FLAGGED}
    assert {"detect", "demo", "estimate", "probe", "tasks", "review", "api", "evaluate"} <= commands, commands
    assert ("estimate", "--preset", "preset") in FLAGGED  # `contam estimate --preset` honours CONTAM_PRESET


@pytest.mark.parametrize("command,flag,name", FLAGGED, ids=[f"{c} {f}" for c, f, _ in FLAGGED])
def test_every_flag_wins_over_its_variable_which_wins_over_the_default(command, flag, name, clean_env):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices[command]
    action = next(a for a in sub._actions if flag in a.option_strings)
    s = S.get(name)
    base = [command, *_required(sub)]
    if s.kind in ("bool", "optbool"):
        clean_env.setenv(s.var, "1")
        assert getattr(parser.parse_args(base), action.dest) is True
        clean_env.setenv(s.var, "0")
        assert getattr(parser.parse_args(base), action.dest) is False
        assert getattr(parser.parse_args(base + [flag]), action.dest) is True
        return
    flag_value, var_value, _ = _values(s)
    if action.choices:
        flag_value, var_value = list(action.choices)[:2]
    clean_env.setenv(s.var, var_value)
    assert getattr(parser.parse_args(base), action.dest) == S.parse(name, var_value)
    given = getattr(parser.parse_args(base + [flag, flag_value]), action.dest)
    assert str(given) == str(S.parse(name, flag_value)) or given == S.parse(name, flag_value)
    clean_env.delenv(s.var)
    assert getattr(parser.parse_args(base), action.dest) == s.default


# --- the settings that a config file can hold: the same rule through `contam detect` and through the daemon -----

CONFIG_FIELDS = [s.name for s in S.SETTINGS if s.config and s.name != "knobs"]


def _decon(tmp_path, pool) -> tuple[Path, dict]:
    """A decon config that sets every setting a decon config can hold, and the value each takes from it."""
    evals = tmp_path / "evals-config"
    evals.mkdir()
    report = tmp_path / "report-config"
    cfg = tmp_path / "decon.yaml"
    cfg.write_text(f"training_dir: {pool}\nreport_output_dir: {report}\ncleaned_output_dir: {tmp_path / 'clean-config'}\n"
                   f"evals_dir: {evals}\ncontent_key: body\npurify: true\n")
    return cfg, {"pool_dir": str(pool), "out_dir": str(tmp_path / "report-config-contam"), "evals_dir": str(evals),
                 "decon_report_dir": str(report), "decon_cleaned_dir": str(tmp_path / "clean-config"),
                 "content_key": "body", "purify": True}


def _detect(*argv):
    from contam_assets.commands.detect import settings_from_args

    return settings_from_args(build_parser().parse_args(["detect", *map(str, argv)]))


def test_the_daemon_applies_every_field_of_the_decon_config_that_the_command_line_applies(clean_env, tmp_path, pool):
    from contam_assets.defs.resources import ContamSettings

    cfg, expected = _decon(tmp_path, pool)
    assert set(expected) == set(CONFIG_FIELDS)
    clean_env.setenv(S.var("decon_config"), str(cfg))
    cli, daemon = _detect(), ContamSettings.from_env()
    for name, value in expected.items():
        assert getattr(cli, name) == value, name
        assert getattr(daemon, name) == value, name
    assert cli.decon_config == daemon.decon_config == str(cfg)


@pytest.mark.parametrize("name", CONFIG_FIELDS)
def test_a_variable_wins_over_the_decon_config_and_a_flag_over_both(name, clean_env, tmp_path, pool):
    from contam_assets.defs.resources import ContamSettings

    cfg, from_config = _decon(tmp_path, pool)
    other_pool = tmp_path / "pool-var"
    other_pool.mkdir()
    (other_pool / "a.jsonl").write_text('{"text": "x"}\n')
    third_pool = tmp_path / "pool-flag"
    third_pool.mkdir()
    (third_pool / "a.jsonl").write_text('{"text": "x"}\n')
    for d in ("evals-var", "evals-flag"):
        (tmp_path / d).mkdir()
    variable, flag = {
        "pool_dir": (str(other_pool), str(third_pool)),
        "out_dir": (str(tmp_path / "out-var"), str(tmp_path / "out-flag")),
        "evals_dir": (str(tmp_path / "evals-var"), str(tmp_path / "evals-flag")),
        "decon_report_dir": (str(tmp_path / "report-var"), str(tmp_path / "report-flag")),
        "decon_cleaned_dir": (str(tmp_path / "clean-var"), str(tmp_path / "clean-flag")),
        "content_key": ("raw", "text"),
        "purify": ("0", None),  # the flag only switches it on: shown with the variable off, the config on
    }[name]
    parsed = S.parse(name, variable)
    clean_env.setenv(S.var("decon_config"), str(cfg))
    clean_env.setenv(S.var(name), variable)
    assert getattr(_detect(), name) == parsed
    assert getattr(ContamSettings.from_env(), name) == parsed
    if flag is not None:
        dest = {"pool_dir": "--pool", "out_dir": "--out"}.get(name, S.get(name).flag)
        assert getattr(_detect(dest, flag), name) == flag
        assert getattr(ContamSettings.from_env(flags={name: flag}), name) == flag
    else:
        assert getattr(_detect("--purify"), name) is True
    clean_env.delenv(S.var(name))
    assert getattr(_detect(), name) == from_config[name]
    assert getattr(ContamSettings.from_env(), name) == from_config[name]


def test_the_content_key_follows_the_one_rule(clean_env, tmp_path, pool):
    """flag > variable > decon config > default: the variable used to lose to the decon config."""
    cfg = tmp_path / "decon.yaml"
    cfg.write_text(f"training_dir: {pool}\nreport_output_dir: {tmp_path / 'r'}\ncontent_key: body\n")
    assert _detect("--pool", pool, "--out", tmp_path / "o").content_key == "text"
    assert _detect("--decon-config", cfg).content_key == "body"
    clean_env.setenv(S.var("content_key"), "raw")
    assert _detect("--decon-config", cfg).content_key == "raw"
    assert _detect("--decon-config", cfg, "--content-key", "text").content_key == "text"


def test_a_variable_over_the_decon_config_says_so_once_on_stderr(monkeypatch, capsys):
    monkeypatch.setattr(S, "_noted", set())
    var = S.var("content_key")
    assert S.resolve("content_key", env={var: "raw"}, config={"content_key": "raw"}) == "raw"
    assert capsys.readouterr().err == ""  # the same value: nothing overridden
    assert S.resolve("content_key", env={var: "raw"}, config={"content_key": "body"}) == "raw"
    assert S.resolve("content_key", env={var: "raw"}, config={"content_key": "body"}) == "raw"
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"note: {var}='raw' overrides content_key: 'body'"), err
    assert S.resolve("content_key", env={var: "raw"}) == "raw" and capsys.readouterr().err == ""


@pytest.mark.parametrize("text,want", [("TRUE", True), ("On", True), ("yes", True), ("1", True),
                                       ("FALSE", False), ("off", False), ("No", False), ("0", False)])
def test_a_switch_variable_reads_its_words_in_any_case(text, want):
    assert S.resolve("nightly_idf_rescan", env={S.var("nightly_idf_rescan"): text}) is want


@pytest.mark.parametrize("text", ["2", "enabled", "t", "y"])
def test_a_switch_variable_refuses_any_other_word(text):
    with pytest.raises(ValueError, match="must be 1, true, yes, on, 0, false, no or off"):
        S.resolve("nightly_idf_rescan", env={S.var("nightly_idf_rescan"): text})


def test_contam_estimate_preset_honours_the_variable(clean_env, tmp_path, pool):
    from contam_assets.commands.detect import settings_from_args
    from contam_assets.commands.estimate import detect_args

    clean_env.setenv(S.var("preset"), "olmo-web")
    argv = ["estimate", "--pool", str(pool), "--out", str(tmp_path / "o"), "--fraction", "0.5"]
    args = build_parser().parse_args(argv)
    assert args.preset == "olmo-web"
    assert settings_from_args(detect_args(args)).preset == "olmo-web"
    assert build_parser().parse_args(argv + ["--preset", "thorough"]).preset == "thorough"


def test_knobs_flag_over_variable_over_decon_config_over_preset(clean_env, tmp_path, pool):
    cfg = tmp_path / "decon.yaml"
    cfg.write_text(f"training_dir: {pool}\nreport_output_dir: {tmp_path / 'r'}\ncontamination_score_threshold: 0.6\n")
    assert _detect("--decon-config", cfg).detect_config()[0].threshold == 0.6
    clean_env.setenv(S.var("knobs"), '{"threshold": 0.7}')
    assert _detect("--decon-config", cfg).detect_config()[0].threshold == 0.7
    assert _detect("--decon-config", cfg, "--threshold", "0.8").detect_config()[0].threshold == 0.8


# --- docs/settings.md and the variables' names -------------------------------------------------------------------

def test_docs_settings_md_is_generated_from_the_module(tmp_path):
    """The command the page names, run as written (in a copy of the layout), prints the page as it is."""
    (tmp_path / "docs").mkdir()
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    subprocess.run(["bash", "-c", S.DOC_COMMAND], cwd=tmp_path, check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    fresh = (tmp_path / "docs" / "settings.md").read_text(encoding="utf-8")
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert page == fresh, f"docs/settings.md is stale: run {S.DOC_COMMAND}"
    assert S.DOC_COMMAND in page
    for s in S.SETTINGS:
        assert f"`{s.var}`" in page, s.var


def test_no_variable_name_is_spelled_outside_the_settings_module():
    package = ROOT / "contam_assets"
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel == "settings.py":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"CONTAM_[A-Z0-9_]*", line):
                found.append(f"contam_assets/{rel}:{n}: {line.strip()[:100]}")
    assert not found, "read settings through contam_assets/settings.py (settings.var(name) for a message):\n" + \
        "\n".join(found)
