"""safeio: names, regular files opened without blocking or following symlinks, bounded JSON."""

from __future__ import annotations

import os
import threading

import pytest

from contam_assets.evaluation.safeio import (
    Refused,
    check_name,
    components_problem,
    json_bytes,
    loads_bounded,
    read_regular,
)


def _read(path, **kw):
    """read_regular in a thread, so a call that blocked would fail the test instead of hanging it."""
    out = {}

    def run():
        try:
            out["value"] = read_regular(path, **kw)
        except Refused as exc:
            out["refused"] = (exc.kind, exc.message)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "read_regular blocked"
    return out


def test_special_files_are_refused_without_being_waited_on(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    assert _read(tmp_path / "fifo") == {"refused": ("not_a_file", "not a regular file (a FIFO)")}
    assert _read(tmp_path) == {"refused": ("not_a_file", "not a regular file (a folder)")}
    assert _read("/dev/null") == {"refused": ("not_a_file", "not a regular file (a character device)")}
    (tmp_path / "f").write_text("x" * 100)
    assert _read(tmp_path / "f", max_bytes=99)["refused"][0] == "too_large"
    assert _read(tmp_path / "f", max_bytes=100) == {"value": b"x" * 100}
    assert _read(tmp_path / "missing")["refused"] == ("unreadable", "cannot read: No such file or directory")


def test_a_symlink_swapped_into_the_checked_path_is_not_followed(tmp_path):
    (tmp_path / "in" / "stage").mkdir(parents=True)
    (tmp_path / "in" / "stage" / "report.json").write_text("inside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "report.json").write_text("secret")
    checked = os.path.realpath(tmp_path / "in" / "stage" / "report.json")
    assert _read(checked) == {"value": b"inside"}
    os.rename(tmp_path / "in" / "stage", tmp_path / "in" / "old")
    os.symlink(tmp_path / "outside", tmp_path / "in" / "stage")  # after the check, before the open
    res = _read(checked)
    assert res["refused"][0] == "unreadable" and "secret" not in str(res)
    os.unlink(tmp_path / "in" / "stage")
    (tmp_path / "in" / "stage").mkdir()
    os.symlink(tmp_path / "outside" / "report.json", tmp_path / "in" / "stage" / "report.json")
    assert _read(checked)["refused"] == ("not_a_file", "not a regular file (a symlink)")


def test_bounded_json():
    assert loads_bounded(b'{"a": NaN, "b": 1e999, "c": [-Infinity, {"d": 2E+400}], "e": "NaN"}') == \
        {"a": None, "b": None, "c": [None, {"d": None}], "e": "NaN"}
    for text, message in [("[" * 100_000 + "]" * 100_000, "JSON nested deeper than 32 levels"),
                          ("[" * 33 + "]" * 33, "JSON nested deeper than 32 levels"),
                          ("{", "not valid JSON: Expecting property name enclosed in double quotes (line 1, column 2)")]:
        with pytest.raises(Refused, match=message.replace("(", r"\(").replace(")", r"\)")):
            loads_bounded(text.encode(), max_depth=32)
    assert loads_bounded(("[" * 32 + "]" * 32).encode(), max_depth=32)
    with pytest.raises(Refused, match="not UTF-8 text"):
        loads_bounded("é".encode("latin-1"))
    with pytest.raises(Refused, match="unpaired UTF-16 surrogate"):
        json_bytes(loads_bounded(b'{"a": "\\udcff"}'))
    assert json_bytes({"x": float("nan"), "y": "é"}) == '{"x":null,"y":"é"}'.encode()


def test_names():
    for name in ("uni-é中", "step 1+%", "a&b=c#d?", "x" * 255):
        assert check_name(name) == name
    for name, why in [("", "empty"), (".", "not allowed"), ("..", "not allowed"), ("a/b", "'/'"),
                      ("a\x00", "NUL"), ("x" * 256, "256 bytes"), ("é" * 128, "256 bytes"),
                      (os.fsdecode(b"bad-\xff"), "not valid UTF-8")]:
        with pytest.raises(Refused, match=why):
            check_name(name)
    assert components_problem("a/" + "b" * 255) is None
    assert "256 bytes" in components_problem("a/" + "b" * 256 + "/c")
