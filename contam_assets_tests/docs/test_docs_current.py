"""The docs and the code say what is true now, and the docs' links lead somewhere.

No "issue N" or "round N" references in code, tests, benchmarks or docs (the history lives in CHANGELOG.md, which
this file does not read); every relative link of README.md and docs/*.md names a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLACES = ["contam_assets", "contam_assets_tests", "benchmarks", "docs", "deploy", ".ci", "README.md", "dev"]
SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".json", ".txt", ".sh", ".html", ""}
HISTORY = re.compile(r"\b[Ii]ssues?[ -]?#?\d+|(?<!-)\b[Rr]ound \d+")


def text_files():
    for place in PLACES:
        p = ROOT / place
        files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file())
        for f in files:
            if f.suffix in SUFFIXES and "__pycache__" not in f.parts and f != Path(__file__).resolve():
                yield f


def test_no_issue_or_round_numbers_outside_the_changelog():
    found = []
    for f in text_files():
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if HISTORY.search(line):
                found.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert not found, "say the fact instead of the issue or round it came from:\n" + "\n".join(found)


def test_the_pattern_catches_what_it_must():
    n = 13  # a number kept apart, so that a plain grep of the tree finds nothing here either
    assert HISTORY.search(f"the thorough preset (issue {n})") and HISTORY.search(f"see Issue #{n}")
    assert HISTORY.search(f"added in round {n}") and HISTORY.search(f"issue-{n}'s attacks")
    assert not HISTORY.search("the issue tracker") and not HISTORY.search("round(3.14159, 2)")
    assert not HISTORY.search("small_shards.py --rounds 3")


_FENCE = re.compile(r"^ *```.*?^ *```", re.S | re.M)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_relative_link_of_the_docs_resolves():
    """README.md and docs/*.md: each link to a file of the checkout names one that exists (code blocks and
    spans, which show Markdown as text, aside)."""
    broken = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"`[^`\n]*`", "", _FENCE.sub("", doc.read_text(encoding="utf-8")))
        for target in _LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:|#", target):
                continue
            if not (doc.parent / target.split("#")[0]).exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, broken
