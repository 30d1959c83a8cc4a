"""A small detected output folder for the review page's tests: primary and derived-suite HumanEval matches.

One plain shard of code documents (`code.jsonl`): a HumanEval prompt with its solution
(primary suite, removed at once), canonical solutions quoted in JSON strings
(`humaneval_solution`, a derived suite: held for a reviewer) and clean documents.
`contam detect` builds the folder as a user would (subprocess, real CLI).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from contam_assets.demo import HostText

PRIMARY = {2: 32}  # document line -> HumanEval item quoted with its prompt (primary suite)
DERIVED = {5: 11, 9: 12, 13: 43}  # document line -> HumanEval item whose canonical solution alone is quoted


def humaneval(shared: Path) -> list[dict]:
    with gzip.open(shared / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def write_pool(pool: Path, shared: Path, n: int = 16) -> None:
    he = humaneval(shared)
    host = HostText(7)
    lines = []
    for i in range(n):
        text = host.code_document()
        if i in PRIMARY:
            text += "\n\n" + he[PRIMARY[i]]["prompt"] + he[PRIMARY[i]]["canonical_solution"]
        if i in DERIVED:
            text += "\nsnippet = " + json.dumps({"completion": he[DERIVED[i]]["canonical_solution"]})
        lines.append(json.dumps({"id": f"doc-{i}", "source": "code", "text": text}))
    pool.mkdir(parents=True, exist_ok=True)
    (pool / "code.jsonl").write_text("\n".join(lines) + "\n")


def detect(root: Path, shared: Path) -> Path:
    """<root>/contam_out from `contam detect` over <root>/pool; DAGSTER_HOME <root>/contam_out/.dagster_home."""
    pool, out = root / "pool", root / "contam_out"
    write_pool(pool, shared)
    env = {**os.environ, "DAGSTER_HOME": str(out / ".dagster_home")}
    r = subprocess.run([sys.executable, "-m", "contam_assets.cli", "detect", "--pool", str(pool), "--out", str(out),
                        "--benchmarks", str(shared), "--tasks", "humaneval"], capture_output=True, text=True, env=env,
                       timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_review(proc: subprocess.Popen, log: Path, timeout_s: float = 120) -> str:
    """The URL (with its token) that a starting `contam review --serve` printed to ``log``, once /healthz answers."""
    deadline = time.time() + timeout_s
    while True:
        found = re.search(r"review page: (http://\S+)", log.read_text() if log.exists() else "")
        if found:
            base = found.group(1).split("/?")[0]
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=5) as r:
                    assert json.loads(r.read())["exists"]
                return found.group(1)
            except OSError:
                pass
        assert proc.poll() is None and time.time() < deadline, (log.read_text() if log.exists() else "")[-3000:]
        time.sleep(0.3)


def stop(proc: subprocess.Popen) -> None:
    """SIGINT to the server's process group (it was started in a session of its own), as Ctrl-C."""
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=30)
