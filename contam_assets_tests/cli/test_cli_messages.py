"""The lines a user reads when something is off: one error style for every command (argparse's mistakes too), a
wait for a database another process holds, an lm-eval include folder with a file lm_eval cannot read, a run
stopped by a signal.  Each asserts the exact line against real processes, files and signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from contam_assets.cli import Parser, build_parser, main
from contam_assets.testing import bad_pool
from contam_assets_tests.e2e.test_cli_data import contam

HINT = "rerun the same command to resume (shards scanned whole are kept)"


# --- one style: contam <command>: error: <message>, one line ------------------------------------------------------

@pytest.mark.parametrize("argv, line", [
    (["detect", "--removal", "bad"],
     "contam detect: error: argument --removal: invalid choice: 'bad' (choose from 'document', 'span') "
     "(see contam detect --help)"),
    (["detect", "--bogus", "x"], "contam detect: error: unrecognized arguments: --bogus x (see contam detect --help)"),
    (["review"], "contam review: error: the following arguments are required: out (see contam review --help)"),
    (["estimate", "--pool"],
     "contam estimate: error: argument --pool: expected one argument (see contam estimate --help)"),
    (["nosuch"], "contam: error: argument COMMAND: invalid choice: 'nosuch' (choose from 'api', 'apply', 'arms', "
                 "'compare', 'demo', 'detect', 'estimate', 'evaluate', 'probe', 'quality', 'review', 'tasks') "
                 "(see contam --help)"),
    (["detect", "--bogus", "\x1b[31mred"],
     "contam detect: error: unrecognized arguments: --bogus [31mred (see contam detect --help)"),
])
def test_argument_mistakes_are_one_line_in_the_commands_style(argv, line, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == line + "\n"


def test_a_command_error_and_an_argument_error_share_the_style(tmp_path, capsys):
    assert main(["review", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"contam review: error: output folder not found: {tmp_path / 'nope'}\n"
    subs = build_parser()._subparsers._group_actions[0].choices
    assert subs and all(isinstance(p, Parser) for p in subs.values())  # every command's parser answers so


# --- a database another process holds ------------------------------------------------------------------------------

DUCKDB_HOLDER = "import duckdb, time; c = duckdb.connect('contam.duckdb'); print('ready', flush=True); time.sleep(120)"
FLOCK_HOLDER = ("import fcntl, sys, time; f = open('contam.duckdb.lock', 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
                "print('ready', flush=True); time.sleep(float(sys.argv[1]))")


def _holder(code: str, folder: Path, *args: str) -> tuple[subprocess.Popen, str]:
    """A second process that takes a lock in ``folder``, says 'ready' and holds it; and how the line names it."""
    (folder / "hold.py").write_text(code)
    p = subprocess.Popen([sys.executable, "hold.py", *args], stdout=subprocess.PIPE, text=True, cwd=folder)
    assert p.stdout.readline().strip() == "ready"
    return p, f"process {p.pid} ({' '.join([sys.executable, 'hold.py', *args])})"


def test_a_wait_for_duckdbs_lock_is_said_at_once_and_ends_in_one_line(tmp_path, capfd, monkeypatch):
    from contam_assets.store.db import connect

    duckdb.connect(str(tmp_path / "contam.duckdb")).close()
    holder, who = _holder(DUCKDB_HOLDER, tmp_path)
    try:
        start = time.monotonic()
        with pytest.raises(TimeoutError) as exc:
            with connect(tmp_path / "contam.duckdb", timeout_s=2):
                pass
        assert 2 <= time.monotonic() - start < 10
    finally:
        holder.kill()
        holder.wait()
    db = tmp_path / "contam.duckdb"
    assert capfd.readouterr().err == f"waiting for {db}: held by {who} (waiting up to 2 s, CONTAM_DB_WAIT_S)\n"
    assert str(exc.value) == f"gave up after 2 s waiting for {db}: held by {who}; set CONTAM_DB_WAIT_S to wait longer"
    with connect(db, read_only=True) as con:  # the holder gone, the file opens at once
        assert con.execute("select 1").fetchone() == (1,)


def test_a_wait_for_another_runs_lock_names_it_then_goes_on(tmp_path, capfd):
    from contam_assets.store.db import WAIT_NOTICE_S, connect

    p, who = _holder(FLOCK_HOLDER, tmp_path, "3")
    start = time.monotonic()
    with connect(tmp_path / "contam.duckdb", timeout_s=60) as con:
        waited = time.monotonic() - start
        con.execute("create table t as select 1 as a")
    p.wait()
    assert WAIT_NOTICE_S < waited < 30
    err = capfd.readouterr().err
    assert err == f"waiting for {tmp_path / 'contam.duckdb'}: held by {who} (waiting up to 60 s, CONTAM_DB_WAIT_S)\n"


def test_contam_detect_on_a_held_database_says_so_and_fails_in_one_line(tmp_path):
    pool, out = tmp_path / "pool", tmp_path / "out"
    pool.mkdir()
    out.mkdir()
    (pool / "a.jsonl").write_bytes(bad_pool.jsonl(bad_pool.clean(3), "a"))
    duckdb.connect(str(out / "contam.duckdb")).close()
    holder, who = _holder(DUCKDB_HOLDER, out)
    try:
        r = contam("detect", "--pool", pool, "--out", out,
                   env_extra={"DAGSTER_HOME": str(tmp_path / "home"), "CONTAM_DB_WAIT_S": "2"})
    finally:
        holder.kill()
        holder.wait()
    db = out / "contam.duckdb"
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.splitlines() == [
        f"waiting for {db}: held by {who} (waiting up to 2 s, CONTAM_DB_WAIT_S)",
        f"contam detect: error: gave up after 2 s waiting for {db}: held by {who}; set CONTAM_DB_WAIT_S to wait longer",
    ], r.stderr[-3000:]


# --- an include folder with a file lm_eval cannot read --------------------------------------------------------------

@pytest.fixture
def include(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text('{"q": "What is the name of the river that flows through the city of Paris?", "a": "Seine"}\n')
    inc = tmp_path / "include"
    (inc / "sub").mkdir(parents=True)
    (inc / "mytask.yaml").write_text(textwrap.dedent(f"""\
        task: mytask
        dataset_path: json
        dataset_kwargs:
          data_files:
            test: {data}
        test_split: test
        output_type: generate_until
        doc_to_text: "{{{{q}}}}"
        doc_to_target: "{{{{a}}}}"
    """))
    (inc / "_template.yaml").write_text("output_type: generate_until\n")  # a template: read, defines no task
    return inc


@pytest.mark.parametrize("name, body, reason, cli", [
    ("sub/broken.yaml", "task: other\n  dataset_path: [unclosed\n",
     'mapping values are not allowed in this context in "{path}", line 2, column 15', True),
    ("sub/inc.yaml", "task: other\ninclude: nowhere.yaml\n",
     "[Errno 2] No such file or directory: '{folder}/sub/nowhere.yaml'", False),
])
def test_an_include_folder_file_lm_eval_cannot_read_is_named(include, name, body, reason, cli):
    from contam_assets.sources.lm_eval_tasks import LmEvalError, materialize

    if cli:  # the folder as it was: its task reads
        ok, _ = materialize(["mytask"], include.parent / "ok", str(include))
        assert [s.name for s in ok] == ["mytask"]
    (include / name).write_text(body)
    line = (f"lm-eval include folder {include}: {name} cannot be read: "
            + reason.format(path=include / name, folder=include))
    # the task asked for is defined elsewhere: the run goes on (lm_eval skips the file too)
    ok, _ = materialize(["mytask"], include.parent / "out", str(include))
    assert [s.name for s in ok] == ["mytask"]
    line = f"unknown lm-eval task(s) ['other'] (include folder {include}); {line}"
    with pytest.raises(LmEvalError) as exc:  # asked for the task only the broken file defines: the file is named
        materialize(["other"], include.parent / "out2", str(include))
    assert str(exc.value) == line
    if cli:
        r = contam("tasks", "--tasks", "humaneval", "--lm-eval-tasks", "other", "--lm-eval-include", include)
        assert r.returncode == 2 and r.stderr == f"contam tasks: error: {line}\n", r.stderr[-2000:]


# --- a run stopped by a signal ------------------------------------------------------------------------------------

STOPPABLE = textwrap.dedent("""\
    import signal, sys, time
    from contam_assets.cli import stop_on_signals

    with stop_on_signals("detect", sys.argv[1]):
        def dagster_like(signum, frame):  # a job's own handler, as Dagster installs one while steps run
            raise KeyboardInterrupt
        signal.signal(signal.SIGTERM, dagster_like)
        signal.signal(signal.SIGINT, dagster_like)
        print("ready", flush=True)
        time.sleep(60)
    print("not reached", flush=True)
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_is_one_line_and_128_plus_its_number(sig):
    p = subprocess.Popen([sys.executable, "-c", STOPPABLE, HINT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 128 + sig, (p.returncode, err)
    assert err == f"contam detect: stopped by {sig.name}; {HINT}\n" and out == ""


def test_contam_detect_stopped_mid_scan_says_so_and_a_rerun_resumes(tmp_path):
    pool, out, marker = tmp_path / "pool", tmp_path / "out", tmp_path / "held"
    pool.mkdir()
    (pool / "a.jsonl").write_bytes(bad_pool.jsonl(bad_pool.clean(20) + bad_pool.humaneval_copies(2), "a"))
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home")}
    p = subprocess.Popen([sys.executable, "-m", "contam_assets.cli", "detect", "--pool", str(pool), "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env | {"CONTAM_FAULT": "scan", "CONTAM_FAULT_HOLD": str(marker)})
    deadline = time.monotonic() + 300
    while not marker.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), p.communicate()[1][-2000:]  # the run is mid-scan, held there
    p.send_signal(signal.SIGTERM)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, (p.returncode, stdout[-2000:], stderr[-2000:])
    assert stderr == f"contam detect: stopped by SIGTERM; {HINT}\n", stderr[-3000:]
    assert "failed" not in stdout and "Interrupted" not in stdout, stdout
    r = contam("detect", "--pool", pool, "--out", out, env_extra={"DAGSTER_HOME": str(tmp_path / "home")})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "documents read 22  removed 2  kept 20" in r.stdout
    with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
        assert con.execute("select shard, status from shard_stats").fetchall() == [("a.jsonl", "ok")]


# --- a disk that refuses the run's writes: one line, exit 2 --------------------------------------------------------

def _write_to_dev_full(args):
    with open("/dev/full", "w") as fh:  # the kernel's always-full device: ENOSPC on the flush
        fh.write("x" * 10_000)


def _sqlite_full(args, tmp=None):
    import sqlite3

    import sqlalchemy

    path = Path(args.out) / "runs.db"
    engine = sqlalchemy.create_engine(f"sqlite:///{path}")
    with engine.begin() as con:  # Dagster's run storage is SQLite through SQLAlchemy: the error arrives wrapped
        con.exec_driver_sql("create table t (x text)")
        con.exec_driver_sql("pragma max_page_count = 3")  # SQLite's own limit: the next pages are refused as a full disk
        try:
            con.exec_driver_sql("insert into t values (?)", ("y" * 100_000,))
        except sqlalchemy.exc.OperationalError as exc:
            assert isinstance(exc.orig, sqlite3.OperationalError)
            raise


@pytest.mark.parametrize("func, want", [
    (_write_to_dev_full, "contam review: error: no space left on the disk; free space where the run writes"),
    (_sqlite_full, "contam review: error: the disk refused a database write (database or disk is full): it is full or "
                   "failing; free space where the run writes"),
])
def test_a_full_disk_is_one_line_not_a_traceback(tmp_path, capsys, monkeypatch, func, want):
    import contam_assets.cli as cli

    real = cli.build_parser

    def parser():
        p = real()
        p.set_defaults(func=func)  # the review command's arguments, then the write that fails
        for action in p._subparsers._group_actions[0].choices.values():
            action.set_defaults(func=func)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    assert main(["review", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(want), err
    assert err[0].endswith("(its --out folder, DAGSTER_HOME, the temporary folder) and run it again")


def test_other_errors_still_raise(monkeypatch):
    import contam_assets.cli as cli

    def boom(args):
        raise ValueError("not a disk")

    real = cli.build_parser

    def parser():
        p = real()
        for action in p._subparsers._group_actions[0].choices.values():
            action.set_defaults(func=boom)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    with pytest.raises(ValueError, match="not a disk"):
        main(["review", "x"])
