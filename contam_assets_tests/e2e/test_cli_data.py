"""`contam detect | review | demo` as a user runs them (subprocesses, real exit codes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap


def contam(*args, cwd=None, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "contam_assets.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=900)


def test_bad_arguments_give_clear_errors(tmp_path, shared_data):
    r = contam("detect", "--pool", tmp_path / "nope", "--out", tmp_path / "out")
    assert r.returncode == 2 and "pool not found" in r.stderr
    (tmp_path / "empty").mkdir()
    r = contam("detect", "--pool", tmp_path / "empty", "--out", tmp_path / "out")
    assert r.returncode == 2 and "no pool files" in r.stderr
    r = contam("detect", "--pool", tmp_path / "empty", "--out", tmp_path / "out", "--preset", "nonsense")
    assert r.returncode == 2 and "unknown preset" in r.stderr
    r = contam("detect", "--pool", tmp_path / "empty", "--out", tmp_path / "out", "--benchmarks", tmp_path / "missing")
    assert r.returncode == 2 and "benchmark folder not found" in r.stderr
    r = contam("review", tmp_path / "nothing-here")
    assert r.returncode == 2 and "not found" in r.stderr
    r = contam("detect", "--pool", tmp_path / "empty")
    assert r.returncode == 2  # argparse: --out is required


def test_unknown_task_is_reported(tmp_path, shared_data):
    pool = tmp_path / "pool"
    pool.mkdir()
    (pool / "s.jsonl").write_text(json.dumps({"text": "hello world " * 20}) + "\n")
    r = contam("detect", "--pool", pool, "--out", tmp_path / "out", "--benchmarks", shared_data, "--tasks", "gsm8k,nosuchtask",
               env_extra={"DAGSTER_HOME": ""})
    assert r.returncode == 2 and "unknown task" in r.stderr


def test_detect_then_review(tmp_path, gsm8k_bench):
    gsm = [json.loads(l) for l in open(gsm8k_bench / "gsm8k_test.jsonl")]
    pool = tmp_path / "pool"
    pool.mkdir()
    docs = [{"id": f"d{i}", "text": f"Notes from class.\n{g['question']}\n{g['answer']}\nEnd of notes."} for i, g in enumerate(gsm[:5])]
    docs += [{"id": f"c{i}", "text": "A clean document about gardening and the weather, nothing more. " * 3} for i in range(5)]
    (pool / "shard.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    out = tmp_path / "out"
    r = contam("detect", "--pool", pool, "--out", out, "--benchmarks", gsm8k_bench, "--tasks", "gsm8k",
               env_extra={"DAGSTER_HOME": str(tmp_path / "home")})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "removed 5" in r.stdout and (out / "report.html").exists() and (out / "mix" / "shard.jsonl").exists()
    kept = [json.loads(l)["id"] for l in (out / "mix" / "shard.jsonl").read_text().splitlines()]
    assert kept == [f"c{i}" for i in range(5)]
    r = contam("review", out, "--top", "2", "--task", "gsm8k")
    assert r.returncode == 0 and "FLAGGED" in r.stdout and "EVAL QUESTION" in r.stdout and "[Q:" in r.stdout
    r = contam("review", out, "--stats")
    assert r.returncode == 0 and "per task and split" in r.stdout and "gsm8k" in r.stdout
    assert "detector settings that produced these tables" in r.stdout and "sample_every" in r.stdout
    r = contam("review", out, "--task", "mmlu")
    assert r.returncode == 2 and "no matches for task" in r.stderr


def test_demo_runs_on_the_embedded_default(tmp_path):
    out = tmp_path / "demo"
    r = contam("demo", "--out", out, "--docs", "300", env_extra={"DAGSTER_HOME": str(tmp_path / "home")})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "report" in r.stdout and "dagster dev" in r.stdout
    truth = [json.loads(l) for l in (out / "demo_truth.jsonl").read_text().splitlines()]
    assert truth and {t["task"] for t in truth} == {"humaneval"}
    assert (out / "report.html").stat().st_size > 5000


def test_custom_task_folder(tmp_path, shared_data):
    """A user's own registry: a GSM8K spec with the test split only."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "gsm8k_test_only.toml").write_text(
        'name = "gsm8k_test_only"\nkind = "qa"\n[fields]\nquestion = "question"\nanswer = "answer"\n'
        '[[splits]]\nname = "test"\nfile = "gsm8k_test.jsonl"\n')
    train = [json.loads(l) for l in open(shared_data / "gsm8k_train.jsonl")][:3]
    test = [json.loads(l) for l in open(shared_data / "gsm8k_test.jsonl")][:3]
    pool = tmp_path / "pool"
    pool.mkdir()
    (pool / "s.jsonl").write_text("".join(json.dumps({"text": f"{g['question']}\n{g['answer']}"}) + "\n" for g in train + test))
    out = tmp_path / "out"
    r = contam("detect", "--pool", pool, "--out", out, "--benchmarks", shared_data, "--tasks-dir", tasks,
               env_extra={"DAGSTER_HOME": str(tmp_path / "home")})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "removed 3" in r.stdout  # the train items are not in this registry
    r = contam("detect", "--pool", pool, "--out", out, "--tasks-dir", tmp_path / "nope")
    assert r.returncode == 2 and "task folder not found" in r.stderr


def test_the_command_exits_with_its_code_its_output_and_its_exit_handlers(tmp_path):
    """`contam` leaves without the interpreter's heap teardown (cli.entry), and loses nothing for it: the exit code,
    every byte written to a piped stdout and stderr, the exit handlers; with another thread running it exits as
    usual, after that thread, tearing the heap down."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent('''
        import atexit, sys, threading, time
        from pathlib import Path
        import contam_assets.cli as cli
        marks = Path(sys.argv[1])
        def main():
            atexit.register(lambda: marks.write_text(marks.read_text() + "handler\\n"))
            for _ in range(2001):  # small writes: the last of them still sit in the buffer
                sys.stdout.write("x" * 100)
            sys.stderr.write("to stderr")
            if sys.argv[2] == "thread":
                threading.Thread(target=lambda: (time.sleep(0.5), marks.write_text(marks.read_text() + "thread\\n"))).start()
            return 3
        class Heap:  # freed by the interpreter's teardown, which the fast exit skips
            def __del__(self):
                marks.write_text(marks.read_text() + "teardown\\n")
        heap = Heap()
        cli.main = main
        marks.write_text("")
        cli.entry()
        marks.write_text(marks.read_text() + "not reached\\n")
    '''))
    for mode, want in (("alone", "handler\n"), ("thread", "thread\nhandler\nteardown\n")):
        marks = tmp_path / f"marks-{mode}"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # buffered, as a user's shell has it
        r = subprocess.run([sys.executable, str(script), str(marks), mode], capture_output=True, text=True, timeout=120,
                           env=env)
        assert (r.returncode, len(r.stdout), r.stderr) == (3, 200_100, "to stderr")
        assert marks.read_text() == want
