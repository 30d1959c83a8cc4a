"""Run generated code against its benchmark's tests; the verdict comes from outside the code's reach.

One item = two processes, each in its own bubblewrap sandbox (sandbox.py):

- the **candidate** runs the program (HumanEval: prompt + completion; MBPP:
  the completion) and then only answers calls of the functions it defined;
- the **judge** runs the benchmark's test code (HumanEval ``check``, MBPP's
  ``assert`` lines) with each of those functions replaced by a stand-in that
  asks the candidate over a pipe and gets a plain value back
  (sandbox_child.wire: no objects, no code, nothing that can override
  ``__eq__``).

The judge writes its verdict to a file descriptor that only it holds; the
probe reads that file, outside both sandboxes.  So printing a marker, exiting
0 before the tests, killing itself, deleting its files, patching builtins or
returning an always-equal object cannot make a test pass: the tests do not
run where the generated code runs.  The price: a test can only pass plain
values to the generated function and compare plain values it returns (other
objects travel as opaque handles) — every HumanEval and MBPP reference
solution passes this way (docs/probes.md).

Limits (soft = hard unless noted), set in each process before it reads its
input: address space, CPU seconds (hard = soft + 1 s, SIGXCPU first), file
size, processes (per sandbox: each has its own user namespace), open files,
no core dumps; a wall-clock deadline per item kills both sandboxes.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from contam_assets.model.batching import LogFn, Progress
from contam_assets.model.sandbox import SandboxStatus, bwrap_argv, python_argv, sandbox_status, spawn_kwargs

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MEMORY_MB = 1024
_MAX_TAIL = 2000
_CPU_KILLED = (128 + signal.SIGXCPU, 128 + signal.SIGKILL, -signal.SIGXCPU, -signal.SIGKILL)


@dataclass(frozen=True)
class Limits:
    timeout_s: float = DEFAULT_TIMEOUT_S  # wall clock for the whole item (both sandboxes)
    cpu_s: float | None = None  # CPU seconds per process (default: timeout_s)
    memory_mb: int = DEFAULT_MEMORY_MB  # address space per candidate process
    processes: int = 32  # processes and threads in the candidate's sandbox
    file_mb: int = 16  # largest file a process may write
    open_files: int = 64
    tmp_mb: int = 32  # size of each writable tmpfs (/sandbox, /tmp)

    def rlimits(self, memory_mb: int, processes: int) -> list:
        cpu = max(1, math.ceil(self.cpu_s if self.cpu_s is not None else self.timeout_s))
        return [
            ["RLIMIT_AS", memory_mb << 20, memory_mb << 20],
            ["RLIMIT_CPU", cpu, cpu + 1],
            ["RLIMIT_FSIZE", self.file_mb << 20, self.file_mb << 20],
            ["RLIMIT_NPROC", processes, processes],
            ["RLIMIT_NOFILE", self.open_files, self.open_files],
            ["RLIMIT_CORE", 0, 0],
        ]


@dataclass(frozen=True)
class ExecCase:
    """One item: what the candidate runs and what the judge checks it with."""

    program: str  # the generated program as the candidate runs it
    tests: str  # the benchmark's test code, run by the judge
    setup: str = ""  # benchmark code the judge runs before the tests (HumanEval: the prompt, for its helpers)
    entry: str | None = None  # HumanEval: the judge finishes with check(<entry>)


@dataclass(frozen=True)
class ExecResult:
    status: str  # passed | failed | timeout | error (the sandbox itself failed to start)
    detail: str  # why it did not pass (from the judge, or what stopped it)
    output: str = ""  # the tail of what the generated code printed

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def run_job(job: ExecCase, limits: Limits = Limits(), status: SandboxStatus | None = None) -> ExecResult:
    """Judge one item in two fresh sandboxes; raises SandboxUnavailable when isolation is not possible."""
    status = (status or sandbox_status()).require()
    with tempfile.TemporaryDirectory(prefix="contam_exec_") as tmp:
        return _run(job, limits, status, Path(tmp))


def _run(job: ExecCase, limits: Limits, status: SandboxStatus, tmp: Path) -> ExecResult:
    (tmp / "program.py").write_text(job.program, encoding="utf-8")
    spec = {"setup": job.setup, "tests": job.tests, "entry": job.entry}
    (tmp / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    procs: list[subprocess.Popen] = []
    started = time.monotonic()
    try:
        with open(tmp / "program.py", "rb") as program, open(tmp / "output.txt", "wb") as output, \
                open(tmp / "spec.json", "rb") as spec_in, open(tmp / "judge.txt", "wb") as judge_log, \
                open(tmp / "verdict.json", "wb") as verdict:
            base, kwargs = bwrap_argv(status, limits.tmp_mb << 20), spawn_kwargs(status)
            candidate_limits = json.dumps(limits.rlimits(limits.memory_mb, limits.processes))
            judge_limits = json.dumps(limits.rlimits(max(limits.memory_mb, 1024), 8))
            procs.append(subprocess.Popen(
                base + python_argv(status, "candidate", str(req_r), str(rep_w), candidate_limits),
                stdin=program, stdout=output, stderr=subprocess.STDOUT, pass_fds=(req_r, rep_w), **kwargs))
            procs.append(subprocess.Popen(
                base + python_argv(status, "judge", str(req_w), str(rep_r), str(verdict.fileno()), judge_limits),
                stdin=spec_in, stdout=judge_log, stderr=subprocess.STDOUT, pass_fds=(req_w, rep_r, verdict.fileno()),
                **kwargs))
    except OSError as exc:
        return ExecResult("error", f"the sandbox did not start: {exc}")
    finally:
        for fd in (req_r, req_w, rep_r, rep_w):
            os.close(fd)
        timed_out = _wait(procs, started + limits.timeout_s)
    candidate_rc = procs[0].returncode if procs else None
    output = _tail(tmp / "output.txt")
    if timed_out:
        return ExecResult("timeout", f"killed after {limits.timeout_s:g}s wall clock", output)
    verdict = _read_verdict(tmp / "verdict.json")
    if verdict is None:
        return ExecResult("error", f"the judge gave no verdict (exit {procs[1].returncode}): {_tail(tmp / 'judge.txt')}",
                          output)
    if verdict["status"] != "passed" and candidate_rc in _CPU_KILLED:
        cpu = limits.cpu_s if limits.cpu_s is not None else limits.timeout_s
        return ExecResult("timeout", f"the generated code was killed (CPU limit {cpu:g}s, or the kernel): "
                                     f"{verdict.get('detail', '')}", output)
    return ExecResult(verdict["status"], str(verdict.get("detail", "")), output)


def _wait(procs: Sequence[subprocess.Popen], deadline: float) -> bool:
    """Wait for the judge, give the candidate a moment to leave, then kill both sandboxes; True = deadline hit."""
    timed_out = False
    try:
        if len(procs) == 2:
            try:
                procs[1].wait(timeout=max(0.0, deadline - time.monotonic()))
                procs[0].wait(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                timed_out = procs[1].poll() is None
    finally:
        for p in procs:
            _kill(p)
    return timed_out


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL bwrap's process group; --die-with-parent then takes the sandbox's PID namespace down with it."""
    if proc.poll() is None:
        for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
            try:
                kill()
            except (ProcessLookupError, PermissionError):
                pass
    proc.wait()


def _read_verdict(path: Path) -> dict | None:
    try:
        verdict = json.loads(path.read_bytes()[:65536].decode("utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(verdict, dict) and verdict.get("status") in ("passed", "failed", "error")
    return verdict if ok else None


def _tail(path: Path, n: int = _MAX_TAIL) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - n))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def run_jobs(
    jobs: Sequence[ExecCase], limits: Limits = Limits(), workers: int = 2, log: LogFn | None = None, what: str = "executing"
) -> list[ExecResult]:
    """Every job, ``workers`` at a time, in input order; one item's failure or hang costs only that item."""
    if not jobs:
        return []
    status = sandbox_status().require()
    progress = Progress(what, len(jobs), log)
    results: list[ExecResult | None] = [None] * len(jobs)

    def one(i: int) -> None:
        results[i] = run_job(jobs[i], limits, status)
        progress.advance(1)

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(one, range(len(jobs))))
    return results  # type: ignore[return-value]
