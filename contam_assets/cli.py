"""``contam``: the command line.  Subcommands live in ``contam_assets/commands/``.

Each module there defines ``register(subparsers)`` which adds its subcommand(s)
and sets ``func`` (a callable taking the parsed args and returning an exit code).
Heavy imports (torch, dagster) happen inside the handlers, so ``contam --help``
stays fast.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import os
import pkgutil
import signal
import sys
import threading

from contam_assets import commands as _commands_pkg
from contam_assets.report.inert import term_text


class CliError(Exception):
    """A user error: printed as one clear line, exit code 2."""


def error_line(prog: str, message: object) -> str:
    """The one style of every error a command prints: ``contam <command>: error: <message>``, one line, its text
    made inert for the terminal (``prog`` is ``contam`` or ``contam <command>``)."""
    return f"{prog}: error: {term_text(message)}"


class Parser(argparse.ArgumentParser):
    """argparse, with its errors (unknown flag, bad choice, missing argument) as one line in the commands' style
    instead of a usage block; the subcommands' parsers are of this class too."""

    def error(self, message: str, prog: str | None = None):
        prog = prog or self.prog
        self.exit(2, error_line(prog, f"{message} (see {prog} --help)") + "\n")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but an argument no parser knows is named under the command it was given to."""
        ns, extra = self.parse_known_args(args, namespace)
        if extra:
            command = getattr(ns, "command", None)
            self.error(f"unrecognized arguments: {' '.join(extra)}", f"{self.prog} {command}" if command else None)
        from contam_assets import settings

        try:
            return settings.fill_args(ns)  # flags left out: the variable, else the default
        except ValueError as exc:
            command = getattr(ns, "command", None)
            self.exit(2, error_line(f"{self.prog} {command}" if command else self.prog, exc) + "\n")


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@contextlib.contextmanager
def stop_on_signals(command: str, hint: str):
    """While inside: SIGTERM, SIGINT or SIGHUP ends the process at once with one line on stderr
    (``contam detect: stopped by SIGTERM; <hint>``) and exit code 128 + the signal's number.

    The signal is seen through ``signal.set_wakeup_fd`` by a thread of its own, so it is seen whatever Python handler
    holds the signal at the moment (Dagster installs its own while a job runs, which would turn it into a failed
    step).  The process ends as a kill would: the run's writes are made to survive that (docs/robustness.md), and
    its scan workers leave with it.  The Python handler of each signal does the same, should the wakeup file
    descriptor be taken over; whichever comes first prints the line.  Outside the main thread this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    err_fd = os.dup(2)  # the terminal's stderr: Dagster points fd 2 at its compute log files while steps run
    previous = {sig: signal.signal(sig, lambda signum, _: _stop(err_fd, command, signal.Signals(signum), hint))
                for sig in STOP_SIGNALS}
    old_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    # multiprocessing's resource tracker (started with the scan workers) warns of "leaked" semaphores when the run
    # ends at once; it removes them all the same, so its warning is noise under the one line
    old_warnings = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [old_warnings, "ignore:resource_tracker:UserWarning"]))

    def watch() -> None:
        while True:
            data = os.read(read_fd, 1)
            if not data or data[0] == 0:  # the block ended: stop watching
                return
            if data[0] in STOP_SIGNALS:
                _stop(err_fd, command, signal.Signals(data[0]), hint)

    watcher = threading.Thread(target=watch, daemon=True, name="contam-stop-on-signal")
    watcher.start()
    try:
        yield
    finally:
        if old_warnings is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = old_warnings
        signal.set_wakeup_fd(old_wakeup)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.write(write_fd, b"\0")
        watcher.join()
        for fd in (read_fd, write_fd, err_fd):
            os.close(fd)


_STOPPING = threading.Lock()


def _stop(err_fd: int, command: str, sig: signal.Signals, hint: str) -> None:
    """One line, then the exit code of a process a signal ended (128 + its number), at once."""
    if not _STOPPING.acquire(blocking=False):  # the other path (watcher or handler) is already stopping
        return
    os.write(err_fd, f"contam {command}: stopped by {sig.name}; {hint}\n".encode())
    flush = threading.Thread(target=sys.stdout.flush, daemon=True)  # what was printed is not lost, unless the
    flush.start()  # main thread holds stdout's lock (blocked on a full pipe): then at most half a second is waited
    flush.join(0.5)
    os._exit(128 + sig)


_FULL_DB = ("database or disk is full", "disk i/o error")  # SQLite's words for a write the disk refused


def disk_full(exc: BaseException) -> str | None:
    """What to say when ``exc`` (or an exception it was raised from) is a write the disk refused: no space left
    (ENOSPC, EDQUOT) or SQLite's full or failing disk (Dagster's run storage); None for anything else."""
    import errno
    import sqlite3

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            where = f" ({exc.filename})" if exc.filename else ""
            return f"no space left on the disk{where}"
        if isinstance(exc, sqlite3.OperationalError) and any(w in str(exc).lower() for w in _FULL_DB):
            return f"the disk refused a database write ({exc}): it is full or failing"
        exc = exc.__cause__ or exc.__context__
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="contam", description="Measure and remove benchmark contamination.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(_commands_pkg.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{_commands_pkg.__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except (CliError, TimeoutError) as exc:  # TimeoutError: a database another process held too long (store/db.py)
        print(error_line(f"contam {args.command}", exc), file=sys.stderr)
        return 2
    except Exception as exc:
        full = disk_full(exc)
        if full is None:
            raise
        print(error_line(f"contam {args.command}", f"{full}; free space where the run writes (its --out folder, "
                                                   f"DAGSTER_HOME, the temporary folder) and run it again"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(rc or 0)


def entry() -> None:
    """The ``contam`` command: ``main``, then exit without the interpreter tearing down the heap object by object.

    A `contam detect` ends holding the reference set, the index and Dagster's modules: freeing them one by one
    took 1–2 s of one core after the summary was printed.  The exit handlers still run (logging, wandb, the
    process pools') and the streams are flushed; where a thread other than this one still runs, the ordinary
    exit waits for it.
    """
    rc = main()
    if threading.active_count() > 1:
        sys.exit(rc)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # a closed pipe or stream, or none: what a normal exit loses too
            pass
    os._exit(rc)


if __name__ == "__main__":  # pragma: no cover
    # `python -m contam_assets.cli`: run the importable module's entry so CliError is one class
    from contam_assets.cli import entry as _entry

    _entry()
