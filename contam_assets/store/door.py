"""The door: before a scan, every unit of the pool is sampled (its first rows, or its schema) for the content key.

A unit in which no sampled row holds the key fails the run before anything is scanned, with one line naming
the keys or columns it does hold and the flag to pass::

    no 'text' in part-0.jsonl; it has: id, content — pass --content-key content

(without it every document would be counted as rejected and the mix would be empty).  A unit with no JSON
object at all, or one that cannot be opened, passes the door: the scan counts and reports its lines.
"""

from __future__ import annotations

from pathlib import Path

from contam_assets.store.location import ObjectGone
from contam_assets.store.readers import reader_for

SAMPLE_ROWS = 100  # rows of each unit the door reads
LIKELY = ("text", "content", "raw_content", "body", "document", "contents", "page_content", "markdown")


class DoorError(ValueError):
    """A unit holds no content key; the message is one line with the keys it has and the flag to pass."""


def suggestion(keys: dict[str, int]) -> str | None:
    """The key most likely to hold the text: a well-known name with string values, else the longest strings."""
    strings = {k: v for k, v in keys.items() if v > 0}
    for name in LIKELY:
        for k in strings:
            if k == name or k.endswith("." + name):
                return k
    return max(strings, key=strings.get) if strings else None


def missing_key_line(unit: str, content_key: str, keys: dict[str, int], flag: str = "--content-key") -> str:
    shown = ", ".join(list(keys)[:12]) + (", …" if len(keys) > 12 else "")
    best = suggestion(keys)
    fix = f"pass {flag} {best}" if best else f"pass {flag} with the key of the text"
    return f"no {content_key!r} in {unit}; it has: {shown or 'no keys'} — {fix}"


def check_units(paths: dict[str, Path], content_key: str, flag: str = "--content-key", rows: int = SAMPLE_ROWS) -> None:
    """DoorError for the first unit (in key order) whose sampled rows hold no content key; the count of others."""
    bad = []
    for unit in sorted(paths):
        reader = reader_for(unit) or reader_for(str(paths[unit]))
        if reader is None:
            continue
        try:
            ok, keys = reader.sample_fields(paths[unit], content_key, rows)
        except ObjectGone:  # deleted from the store since it was listed: the scan fails that unit, with the reason
            continue
        if not ok:
            bad.append((unit, keys))
    if bad:
        unit, keys = bad[0]
        more = f" ({len(bad) - 1} more unit(s) likewise)" if len(bad) > 1 else ""
        raise DoorError(missing_key_line(unit, content_key, keys, flag) + more)
