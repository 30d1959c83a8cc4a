"""Fields of a benchmark row by dotted path and list index: ``answer.value``, ``answers.text[0]``, ``choices.text``.

A path is read part by part: ``a.b`` is key ``b`` of the mapping at ``a``; ``a[0]`` is item 0 of the list at
``a`` (negative indices count from the end).  A key that is itself spelled with dots or brackets (a CSV
column ``choice.0``) is found first as it is.  Every miss is a :class:`FieldError` whose message says which
part was missing or had the wrong type, so the caller can name the task, split and row beside it.
"""

from __future__ import annotations

import re

_PART = re.compile(r"([^.\[\]]+)|\[(-?\d+)\]|(\.)")


class FieldError(ValueError):
    pass


class Missing(FieldError):
    """The path leads nowhere in this row (a key absent, an index out of range)."""


def parse_path(path: str) -> list[str | int]:
    parts: list[str | int] = []
    pos = 0
    for m in _PART.finditer(path):
        if m.start() != pos:
            break
        pos = m.end()
        if m.group(1) is not None:
            parts.append(m.group(1))
        elif m.group(2) is not None:
            parts.append(int(m.group(2)))
    if pos != len(path) or not parts or not isinstance(parts[0], str):
        raise FieldError(f"bad field path {path!r} (write key.sub, key[0], key.sub[1])")
    return parts


def get_path(row: dict, path: str):
    """The value at ``path`` in ``row`` (None is a value: a null field); Missing when the path is absent."""
    if path in row:
        return row[path]
    value = row
    done = ""
    for part in parse_path(path):
        if isinstance(part, int):
            if not isinstance(value, list):
                raise Missing(f"{done or path!r} is {_kind(value)}, not a list, so {path!r} has no [{part}]")
            if not -len(value) <= part < len(value):
                raise Missing(f"{done} has {len(value)} item(s), so {path!r} has no [{part}]")
            value = value[part]
            done += f"[{part}]"
        else:
            if not isinstance(value, dict):
                raise Missing(f"{done!r} is {_kind(value)}, not a mapping, so {path!r} has no .{part}")
            if part not in value:
                have = ", ".join(list(value)[:8]) or "nothing"
                raise Missing(f"no field {(done + '.' if done else '') + part!r} (it has: {have})")
            value = value[part]
            done += f".{part}" if done else part
    return value


def _kind(value) -> str:
    return {dict: "a mapping", list: "a list"}.get(type(value), "null" if value is None else type(value).__name__)


def as_text(value, path: str) -> str | None:
    """A scalar as text (None stays None; an integral float prints without ``.0``); a mapping or list is an
    error that names the path and, for a mapping, the keys one could name instead."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        keys = ", ".join(f"{path}.{k}" for k in list(value)[:6])
        raise FieldError(f"field {path!r} holds a mapping, not text (name a part of it: {keys})")
    if isinstance(value, list):
        raise FieldError(f"field {path!r} holds a list of {len(value)}, not text (name one item: {path}[0])")
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def as_text_list(value, path: str) -> list[str]:
    """A list of scalars (choices) as text; HF's ``{"text": [...], "label": [...]}`` reads as its text list."""
    if isinstance(value, dict) and isinstance(value.get("text"), list):
        value, path = value["text"], f"{path}.text"
    if not isinstance(value, list):
        raise FieldError(f"field {path!r} holds {_kind(value)}, not a list of choices")
    return [as_text(v, f"{path}[{i}]") or "" for i, v in enumerate(value)]
