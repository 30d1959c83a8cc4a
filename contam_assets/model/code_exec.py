"""Run generated code with its tests in a separate, resource-limited process (never in-process).

The child gets a fresh temporary working folder, an empty environment apart
from PATH, Python's isolated mode (-I), hard limits on address space (memory),
CPU seconds, file size and process count, and its own session; a wall-clock
timeout kills the whole process group.  This contains accidents (endless
loops, memory bombs, runaway forks as a non-root user); it is not a security
boundary against hostile code.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MEMORY_MB = 1024
_MAX_OUTPUT = 2000


@dataclass(frozen=True)
class ExecResult:
    status: str  # passed | failed | timeout
    detail: str  # the tail of stderr, or why it was stopped

    @property
    def passed(self) -> bool:
        return self.status == "passed"


# Runs in the child: set hard limits (soft = hard, so the program cannot raise them), then the program.
# Done in the child's own interpreter rather than with preexec_fn, which is unsafe in a threaded parent.
_BOOT = """\
import resource, runpy, sys
for name, value in {limits!r}:
    try:
        resource.setrlimit(getattr(resource, name), (value, value))
    except (ValueError, OSError):
        pass  # a limit this platform does not allow lowering; the others still hold
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _boot(timeout_s: float, memory_mb: int) -> str:
    limits = [
        ("RLIMIT_AS", memory_mb * 1024 * 1024),
        ("RLIMIT_CPU", int(timeout_s) + 1),
        ("RLIMIT_FSIZE", 16 * 1024 * 1024),
        ("RLIMIT_NPROC", 64),
        ("RLIMIT_CORE", 0),
    ]
    return _BOOT.format(limits=limits)


def run_program(code: str, timeout_s: float = DEFAULT_TIMEOUT_S, memory_mb: int = DEFAULT_MEMORY_MB) -> ExecResult:
    """Run ``code`` as a script; passed = it ran to its end (exit status 0 and a closing marker printed).

    The marker catches code that leaves early with status 0 (``sys.exit()``) before the tests ran.
    Output goes to files in the temporary folder (capped by the file-size limit), not into memory.
    """
    marker = f"contam-done-{secrets.token_hex(8)}"
    with tempfile.TemporaryDirectory(prefix="contam_exec_") as tmp:
        script, out_path, err_path = (Path(tmp) / n for n in ("program.py", "stdout.txt", "stderr.txt"))
        script.write_text(f"{code}\n\nprint({marker!r})\n", encoding="utf-8")
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-B", "-c", _boot(timeout_s, memory_mb), str(script)],
                cwd=tmp,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0"},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                proc.wait()
                return ExecResult("timeout", f"killed after {timeout_s:g}s wall clock")
            finally:
                _kill_group(proc.pid)  # leftovers of a program that forked
        stdout_tail = _tail(out_path, len(marker) + 64)
        stderr_tail = _tail(err_path, _MAX_OUTPUT).decode("utf-8", "replace")
    if proc.returncode == 0:
        if marker.encode() in stdout_tail:
            return ExecResult("passed", "")
        return ExecResult("failed", "exited before the end of the program (the tests did not all run)")
    if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return ExecResult("timeout", f"stopped by the CPU limit ({timeout_s:g}s)")
    return ExecResult("failed", stderr_tail or f"exit status {proc.returncode}")


def _tail(path: Path, n: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - n))
        return fh.read()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
