"""Task and split names as file names: one encoding, used wherever a name becomes a path.

A task's name is whatever its spec, its lm-eval YAML or its decon reference file says: ``arc:easy``, ``arc_easy``,
``Case``, ``case``, ``..``, a name with ``/``, 500 characters of any script.  ``path_name`` turns it into one path
component such that two different names never share a path, on a case-sensitive file system or a case-insensitive
one (macOS, Windows), and no name leaves its folder:

- a *plain* name (lower-case ASCII letters and digits, ``_`` and ``-``, inner dots, at most ``MAX_BYTES`` bytes, not
  starting with ``.`` or ``-``, its part before the first dot not a Windows device name such as ``con`` or ``com1``)
  is its own path name, so files named before this encoding existed keep their names;
- any other name becomes ``<prefix>~<hash>``: a readable prefix (the name lower-cased, every character outside
  ``[a-z0-9_-]`` as ``_``, leading ``-`` dropped, cut so the whole fits ``MAX_BYTES``) and 16 hex digits of the SHA-256 of the exact name.

Injective: a plain name holds no ``~``, every other result does, and two hashed results differ in their hash
(64 bits) whenever their names differ.  Case-insensitive safe: every result is lower-case ASCII, so two results
that differ at all differ after case folding too.
"""

from __future__ import annotations

import hashlib
import re

MAX_BYTES = 100  # a path component well under every file system's 255-byte limit, with room for a suffix
HASH_CHARS = 16
_PLAIN = re.compile(r"[a-z0-9_][a-z0-9_-]*(?:\.[a-z0-9_-]+)*")
_UNSAFE = re.compile(r"[^a-z0-9_-]")
_DEVICE = re.compile(r"(?:con|nul|aux|prn|com[1-9]|lpt[1-9])(?:\..*)?")  # Windows opens the device, suffix or not


def is_plain(name: str) -> bool:
    """The name is its own path name (see the module's doc)."""
    return len(name) <= MAX_BYTES and _PLAIN.fullmatch(name) is not None and _DEVICE.fullmatch(name) is None


def path_name(name: str) -> str:
    """The one path component that stands for ``name`` (a task's, a split's) in every folder and file name."""
    if is_plain(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    prefix = _UNSAFE.sub("_", name[:MAX_BYTES].lower()).lstrip("-")[: MAX_BYTES - HASH_CHARS - 1] or "_"
    return f"{prefix}~{digest}"
