"""A step's progress on the terminal (executor/progress.for_step): a bar rewritten in place when stderr is a terminal
(a pty here; also while the step's descriptor 2 is captured to a file, as Dagster does), plain lines at the steady
rate on stdout when it is a pipe; Dagster's log gets the plain lines in both."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

CHILD = r"""
import os, sys, tempfile, time
from contam_assets.executor.progress import for_step
# what Dagster's step log capture does while a step runs: descriptor 2 pointed at a file
captured = tempfile.TemporaryFile()
os.dup2(captured.fileno(), 2)
logged = []
p = for_step("scan", {f"s{i}": 50_000_000 for i in range(4)}, logged.append, every=0.5)
for i in range(4):
    time.sleep(0.35)
    p.shard_done(f"s{i}")
p.close()
sys.stdout.write("LOG:" + "|".join(logged) + "\n")
sys.stdout.flush()
"""


def _run(tty: bool) -> tuple[str, str]:
    env = {**os.environ, "COLUMNS": "160"}
    if not tty:
        r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout, r.stderr
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=slave, env=env, text=True)
    os.close(slave)
    got = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the pty
                break
            if not chunk:
                break
            got += chunk
        elif proc.poll() is not None:
            break
    out = proc.stdout.read()
    assert proc.wait(timeout=60) == 0
    os.close(master)
    return out, got.decode()


def test_a_terminal_gets_a_bar_and_the_log_gets_plain_lines():
    out, term = _run(tty=True)
    frames = [f for f in term.split("\r") if f.strip()]
    assert len(frames) >= 4, term  # redrawn as shards finish (and every second)
    assert frames[0].startswith("scan [") and "/4 shards | " in frames[0], frames
    last = frames[-1].replace("\x1b[K", "").strip()
    assert last.startswith("scan [########################] 4/4 shards | 200.0 MB read of 200.0 MB | "), last
    assert last.endswith("| done"), last
    assert "MB/s" in last and term.endswith("\n")
    assert not [x for x in out.splitlines() if x.startswith("scan: ")]  # no plain lines on the terminal's stdout
    log = out.split("LOG:", 1)[1].strip().split("|")
    assert log[-1].startswith("scan: 4/4 shards, 200.0 MB read of 200.0 MB") and log[-1].endswith("done"), log
    assert 2 <= len(log) <= 4, log  # every 0.5 s at most, and the closing line


def test_a_pipe_gets_plain_lines_at_the_steady_rate_and_no_bar():
    out, err = _run(tty=False)
    assert "\r" not in err and "[#" not in err
    plain = [x for x in out.splitlines() if x.startswith("scan: ")]
    assert 2 <= len(plain) <= 4, out
    assert plain[-1].startswith("scan: 4/4 shards, 200.0 MB read of 200.0 MB") and plain[-1].endswith("done")
    log = out.split("LOG:", 1)[1].strip().split("|")
    assert log == plain  # the same lines in the run's log
