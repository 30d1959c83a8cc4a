"""Host text for the planted suite and the clean documents.

Three kinds of real text, all on the machine already, chosen by a seeded RNG:

- ``web``: paragraphs of the project's demo host text (``core.demo.HostText``);
- ``code``: blocks of the Python standard library's source (code, comments, docstrings);
- ``prose``: the Python language reference shipped in ``pydoc_data.topics`` (English prose).

The standard library is fixed by the Python version (3.11), so a seed gives the
same documents on every machine with that version.  None of it is benchmark
text; the suite still checks every clean document against every instance
(``overlap.ShingleIndex``) and drops the few that overlap one.
"""

from __future__ import annotations

import random
import re
import sysconfig
from functools import lru_cache
from pathlib import Path

from contam_assets.demo import HostText

MAX_FILE_BYTES = 400_000  # larger standard-library files (generated tables) are skipped
_BLANK = re.compile(r"\n\s*\n")


@lru_cache(maxsize=1)
def stdlib_files() -> tuple[str, ...]:
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if rel.startswith(("site-packages/", "dist-packages/")) or "/site-packages/" in rel:
            continue
        try:
            if p.stat().st_size > MAX_FILE_BYTES or p.stat().st_size < 200:
                continue
        except OSError:
            continue
        out.append(str(p))
    return tuple(out)


@lru_cache(maxsize=1)
def prose_topics() -> tuple[str, ...]:
    """Paragraphs of the Python language reference (pydoc_data.topics)."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # pragma: no cover - part of CPython
        return ()
    paras = []
    for name in sorted(topics):
        for p in _BLANK.split(topics[name]):
            p = p.strip()
            if len(p.split()) >= 25 and not p.startswith((">>>", "   ")):
                paras.append(p)
    return tuple(paras)


@lru_cache(maxsize=256)
def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


class Hosts:
    """Deterministic source of host text (seeded)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.web = HostText(seed)
        self.files = stdlib_files()
        self.prose = prose_topics()

    # -- pieces ---------------------------------------------------------------
    def code_block(self, min_chars: int = 200, max_chars: int = 2500) -> str:
        """A run of whole lines from a standard-library file, starting after a blank line."""
        for _ in range(20):
            text = _read(self.rng.choice(self.files))
            if len(text) < min_chars:
                continue
            starts = [0] + [m.end() for m in _BLANK.finditer(text)]
            s = self.rng.choice(starts)
            want = self.rng.randint(min_chars, max_chars)
            end = text.find("\n", s + want)
            block = text[s: end if end > 0 else len(text)].strip("\n")
            if len(block) >= min_chars // 2:
                return block
        return self.web.code_document()

    def prose_block(self) -> str:
        if not self.prose:
            return self.web.paragraph()
        k = self.rng.randint(1, 3)
        return "\n\n".join(self.rng.choice(self.prose) for _ in range(k))

    def paragraph(self, source: str = "web") -> str:
        if source == "code":
            return self.code_block(100, 900)
        if source == "prose":
            return self.prose_block()
        return self.web.paragraph()

    # -- whole documents --------------------------------------------------------
    def clean_document(self) -> tuple[str, str]:
        """(source, text) of a clean document: web 30 %, code 50 %, prose 20 %."""
        u = self.rng.random()
        if u < 0.3:
            return "web", self.web.document()
        if u < 0.8:
            n = self.rng.choice((1, 1, 2))
            return "code", "\n\n".join(self.code_block() for _ in range(n))
        return "prose", self.prose_block()

    def wrap(self, block: str, source: str) -> tuple[str, int, int]:
        """Embed ``block`` between host text of ``source``; return (document, start, end) of the block."""
        before = self.paragraph(source) if self.rng.random() < 0.85 else ""
        after = self.paragraph(source) if self.rng.random() < 0.85 else ""
        sep = "\n\n"
        doc = (before + sep if before else "") + block
        start = len(doc) - len(block)
        end = len(doc)
        if after:
            doc += sep + after
        return doc, start, end
