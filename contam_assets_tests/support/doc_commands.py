"""Commands as the README and docs/ write them, so tests run them exactly as written.

A command is a line of a fenced code block (a trailing backslash continues it on the next
line) or an inline code span that starts with one of the project's tools.  Tests look a
command up by its start and run the whole text with bash: when the docs change, the test
runs the new text, or fails if the command is gone.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("contam ", "dagster ", "dagster-daemon ", "dg ", "./dev ", "python ", "DAGSTER_HOME=", "CONTAM_", "ray ")
_FENCE = re.compile(r"^ *```[a-z]*\n(.*?)^ *```", re.S | re.M)
_SPAN = re.compile(r"`([^`\n]+)`")


def commands(doc: str) -> list[str]:
    text = (ROOT / doc).read_text(encoding="utf-8")
    out: list[str] = []
    for block in _FENCE.findall(text):
        pending = ""
        for line in block.splitlines():
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1].rstrip() + " "
                continue
            cmd = (pending + line.strip()).strip()
            pending = ""
            if cmd.startswith(TOOLS):
                out.append(cmd)
    for span in _SPAN.findall(_FENCE.sub("", text)):
        if span.startswith(TOOLS):
            out.append(span.strip())
    return out


def command(doc: str, start: str) -> str:
    """The one command of `doc` that starts with `start` (the test fails when the docs lost it)."""
    found = sorted({c for c in commands(doc) if c.startswith(start)})
    assert found, f"{doc} shows no command starting with {start!r}"
    assert len(found) == 1, f"{doc} shows several commands starting with {start!r}: {found}"
    return found[0]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment a user's shell gives a documented command: no CONTAM_ or DAGSTER_ variable of the test run,
    this venv's tools (contam, dagster, python) first on PATH, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTAM_", "DAGSTER_"))}
    return env | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"} | extra
