"""The isolation boundary for generated code: bubblewrap, an unprivileged user, hard limits.

Every process that runs generated code (or the benchmark tests that judge it)
starts as ``bwrap`` with:

- **an unprivileged user**: when the probe runs as root, the sandbox is
  started as ``nobody`` (uid 65534; the sandbox_user setting names another), so
  ``RLIMIT_NPROC`` binds (the kernel never applies it to uid 0) and host files
  are checked against an account that owns nothing; as a normal user, bwrap
  runs as that user;
- **new namespaces** for users, PIDs, network, IPC, UTS and cgroups: no
  network at all (only a loopback device of its own), no view of host
  processes (``/proc`` shows the sandbox's own two or three), no way to
  create further user namespaces (``--disable-userns``), every capability
  dropped, a session of its own;
- **a private filesystem view**: ``/usr`` and the interpreter read-only, a
  fresh ``/proc`` and minimal ``/dev``, size-limited tmpfs for ``/sandbox``
  (the working folder), ``/tmp`` and ``/dev/shm``; ``/`` and ``/dev`` are
  remounted read-only.  Nothing of the host's home, the project, the
  checkpoint or the probe's own files exists inside;
- **an empty environment** apart from ``PATH``, ``HOME`` and ``LANG``;
- **rlimits** set by the child before it reads the program (code_exec).

When the probe (bwrap's parent) dies, or kills bwrap, the kernel kills the
whole PID namespace (``--die-with-parent``): a program that forks, calls
``setsid`` or double-forks cannot outlive its item.

``sandbox_status`` checks all of this from inside once per process and says
why when it does not hold; ``--execute`` refuses to run without it.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from contam_assets import settings
from contam_assets.model import sandbox_child

TOOL = "bwrap"
SANDBOX_UID = 65534  # the uid *inside* the sandbox, whoever runs it
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/sandbox", "LANG": "C.UTF-8"}
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
_TOP_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


class SandboxUnavailable(RuntimeError):
    """Generated code cannot be run safely here; the message says why and what to install."""


@dataclass(frozen=True)
class SandboxStatus:
    ok: bool
    reason: str = ""
    tool: str | None = None
    python: str | None = None  # the interpreter inside the sandbox (standard library only)
    binds: tuple[str, ...] = ()  # read-only folders the interpreter needs besides /usr
    user: tuple[int, int] | None = None  # (uid, gid) bwrap is started as; None = the current user
    inside: dict = field(default_factory=dict)  # the self-check's report

    def require(self) -> "SandboxStatus":
        if not self.ok:
            raise SandboxUnavailable(self.reason)
        return self


def drop_user() -> tuple[int, int] | None:
    """(uid, gid) to start bwrap as when this process is root; None otherwise."""
    if os.geteuid() != 0:
        return None
    name = settings.env_value("sandbox_user")
    try:
        entry = pwd.getpwnam(name)
        uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        uid = gid = SANDBOX_UID
    if uid == 0:
        raise SandboxUnavailable(f"{settings.var('sandbox_user')}={name!r} is root; the sandbox needs an unprivileged account")
    return uid, gid


def spawn_kwargs(status: SandboxStatus) -> dict:
    """Popen arguments shared by every sandboxed process: the user switch, a minimal environment, a new session."""
    kwargs: dict = {"env": dict(ENV), "cwd": "/", "start_new_session": True, "close_fds": True}
    if status.user is not None:
        kwargs.update(user=status.user[0], group=status.user[1], extra_groups=[])
    return kwargs


def bwrap_argv(status: SandboxStatus, tmp_bytes: int = 32 << 20) -> list[str]:
    """The bwrap command line up to and including ``--``; the interpreter and its arguments follow."""
    argv = [
        status.tool or TOOL,
        "--unshare-all", "--unshare-user", "--disable-userns",
        "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "contam-sandbox",
        "--clearenv",
    ]
    for key, value in ENV.items():
        argv += ["--setenv", key, value]
    argv += ["--ro-bind", "/usr", "/usr"]
    for folder in status.binds:
        argv += ["--ro-bind", folder, folder]
    for top in _TOP_DIRS:
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for mount, size in (("/dev/shm", 1 << 20), ("/tmp", tmp_bytes), ("/sandbox", tmp_bytes)):
        argv += ["--size", str(size), "--tmpfs", mount]
    argv += ["--chdir", "/sandbox", "--remount-ro", "/dev", "--remount-ro", "/", "--"]
    return argv


def python_argv(status: SandboxStatus, *args: str) -> list[str]:
    """The sandboxed interpreter running sandbox_child with ``args`` (isolated mode, no site-packages)."""
    source = Path(sandbox_child.__file__).read_text(encoding="utf-8")
    return [status.python or "python3", "-I", "-S", "-B", "-X", "utf8", "-c", source, *args]


def _interpreters() -> list[str]:
    """Candidate interpreters for inside the sandbox; the first that runs there is used."""
    found = []
    for cand in (settings.env_value("sandbox_python"), "/usr/bin/python3", "/usr/local/bin/python3",
                 getattr(sys, "_base_executable", None), sys.executable):
        if cand and os.path.isfile(cand):
            real = os.path.realpath(cand)
            if real not in found:
                found.append(real)
    return found


def _binds_for(python: str) -> tuple[str, ...]:
    prefix = str(Path(python).resolve().parents[1])
    return () if prefix == "/usr" or prefix.startswith("/usr/") else (prefix,)


def _check_inside(report: dict) -> str:
    """Why the self-check report shows a sandbox that does not hold ('' = it holds)."""
    problems = []
    if report.get("pids", 99) > 3:
        problems.append(f"{report['pids']} processes visible (no PID namespace)")
    if set(report.get("interfaces", ["?"])) - {"lo"}:
        problems.append(f"network interfaces {report['interfaces']} (no network namespace)")
    if report.get("root_writable", True):
        problems.append("/ is writable")
    leaked = set(report.get("environ", ["?"])) - set(ENV) - {"PWD"}  # bwrap sets PWD=/sandbox after --chdir
    if leaked:
        problems.append(f"environment variables {sorted(leaked)} leak in")
    if tuple(report.get("version", (0,))) < (3, 8):
        problems.append(f"Python {report.get('version')} inside is older than 3.8")
    return "; ".join(problems)


@functools.lru_cache(maxsize=8)
def _status(tool_path: str | None, user: tuple[int, int] | None, interpreters: tuple[str, ...]) -> SandboxStatus:
    if tool_path is None:
        return SandboxStatus(False, f"bubblewrap is not installed (no `{TOOL}` on PATH): {INSTALL_HINT}, "
                                    "or run without --execute (no pass@1)")
    errors = []
    for python in interpreters:
        trial = SandboxStatus(True, tool=tool_path, python=python, binds=_binds_for(python), user=user)
        try:
            r = subprocess.run(bwrap_argv(trial) + python_argv(trial, "selfcheck"), capture_output=True, text=True,
                               timeout=60, **spawn_kwargs(trial))
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(f"{python}: {exc}")
            continue
        if r.returncode != 0:
            errors.append(f"{python}: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
            continue
        try:
            report = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            errors.append(f"{python}: unreadable self-check output {r.stdout[-200:]!r}")
            continue
        problem = _check_inside(report)
        if problem:
            return SandboxStatus(False, f"bubblewrap runs but the sandbox does not hold: {problem}", tool_path)
        return SandboxStatus(True, tool=tool_path, python=python, binds=trial.binds, user=user, inside=report)
    return SandboxStatus(False, "bubblewrap cannot start a sandbox here (user namespaces disabled or "
                                "restricted?): " + " | ".join(errors), tool_path)


def sandbox_status(tool: str | None = None) -> SandboxStatus:
    """Whether generated code can run isolated here (checked from inside once per process and tool)."""
    tool = tool or settings.env_value("sandbox_tool") or TOOL
    try:
        user = drop_user()
    except SandboxUnavailable as exc:
        return SandboxStatus(False, str(exc))
    return _status(shutil.which(tool), user, tuple(_interpreters()))
