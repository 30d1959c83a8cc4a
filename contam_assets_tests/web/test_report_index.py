"""The report index sees every kind of change without reading unchanged files (in-process, no server)."""

from __future__ import annotations

import copy
import gzip
import json
import os

import pytest

from contam_assets.evaluation.checkpoint_report import SCHEMA, dumps
from contam_assets.web import report_index
from contam_assets.web.report_index import ReportIndex, listing_body

REPORT = {"schema": SCHEMA, "model": {"checkpoint": "e/s", "experiment": "e", "stage": "s", "step": 1,
                                      "is_base": False},
          "recipe": "r", "scores": {"loss": 0.5}, "probes": {}, "benchmarks": {}, "contamination": None}


def _write(root, exp, stage, step=1, loss=0.5, atomic=True):
    rep = copy.deepcopy(REPORT)
    rep["model"] |= {"experiment": exp, "stage": stage, "step": step}
    rep["scores"] = {"loss": loss}
    path = root / exp / "eval" / stage / "report.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if atomic:
        tmp = path.with_name(".tmp")
        tmp.write_text(dumps(rep))
        os.replace(tmp, path)
    else:
        path.write_text(dumps(rep))
    return path


def _listed(index):
    good, errors, generation = index.refresh()
    body = json.loads(listing_body("out", good, errors))
    return {(e["experiment"], e["stage"]): e["scores"]["loss"] for e in body["evaluations"]}, \
        {(e["experiment"], e["stage"]): e["kind"] for e in body["errors"]}, generation


@pytest.fixture
def counted_reads(monkeypatch):
    """How many report files the index reads."""
    reads = []
    real = report_index.read_report

    def read(path, lstat=None):
        reads.append(path)
        return real(path, lstat)

    monkeypatch.setattr(report_index, "read_report", read)
    return reads


def _age(*paths):
    """Times in the past, as for files written a while ago (recent ones are read again while racy)."""
    for p in paths:
        st = os.stat(p)
        os.utime(p, ns=(st.st_atime_ns - 10**10, st.st_mtime_ns - 10**10))


def test_changes_are_seen_and_unchanged_files_are_not_read_again(tmp_path, counted_reads):
    root = tmp_path / "out"
    for exp in ("a", "b"):
        for i in range(3):
            _write(root, exp, f"s{i}", step=i)
    _age(*root.glob("*/eval/*/report.json"))
    index = ReportIndex(str(root))
    listed, errors, gen = _listed(index)
    assert len(listed) == 6 and not errors and len(counted_reads) == 6
    assert _listed(index)[2] == gen and len(counted_reads) == 6  # nothing changed: nothing read

    path = _write(root, "a", "s1", step=1, loss=0.25, atomic=False)  # in place: same inode
    listed, _, gen2 = _listed(index)
    assert listed[("a", "s1")] == 0.25 and gen2 == gen + 1 and set(counted_reads[6:]) == {str(path)}
    _age(path)
    other = _write(root, "b", "s2", step=2, loss=0.75)  # atomic replace: a new inode
    before = len(counted_reads)
    assert _listed(index)[0][("b", "s2")] == 0.75 and set(counted_reads[before:]) <= {str(path), str(other)}

    (root / "b" / "eval" / "s9").mkdir()  # how `evaluate` writes: the folder first, then the file renamed in
    assert ("b", "s9") not in _listed(index)[0]
    _write(root, "b", "s9", step=9, loss=0.125)
    assert _listed(index)[0][("b", "s9")] == 0.125

    _write(root, "c", "s0")  # a new experiment
    assert ("c", "s0") in _listed(index)[0]
    (root / "a" / "eval" / "s0" / "report.json").unlink()  # a report removed
    os.rename(root / "b", root / "b2")  # an experiment renamed
    listed, errors, _ = _listed(index)
    assert set(listed) == {("a", "s1"), ("a", "s2"), ("b2", "s0"), ("b2", "s1"), ("b2", "s2"), ("b2", "s9"),
                           ("c", "s0")} and not errors

    (root / "a" / "eval" / "s1" / "report.json").write_text("{")  # broken, then fixed
    assert _listed(index)[1] == {("a", "s1"): "malformed"}
    _write(root, "a", "s1", step=1, loss=0.5)
    listed, errors, _ = _listed(index)
    assert listed[("a", "s1")] == 0.5 and not errors


def test_a_symlinked_report_is_followed_inside_the_roots_and_its_retarget_seen(tmp_path):
    root = tmp_path / "out"
    first = _write(root, "src", "x", loss=0.1)
    second = _write(root, "src", "y", step=2, loss=0.2)
    (root / "lnk" / "eval" / "s").mkdir(parents=True)
    link = root / "lnk" / "eval" / "s" / "report.json"
    link.symlink_to(first)
    inside = lambda p: p.startswith(str(root) + "/")  # noqa: E731
    index = ReportIndex(str(root), inside)
    assert _listed(index)[0][("lnk", "s")] == 0.1
    tmp = link.with_name("tmp")
    tmp.symlink_to(second)
    os.replace(tmp, link)  # the link now points elsewhere: same folder keys, new link
    assert _listed(index)[0][("lnk", "s")] == 0.2
    outside = tmp_path / "outside.json"
    outside.write_text(first.read_text())
    tmp.symlink_to(outside)
    os.replace(tmp, link)
    listed, errors, _ = _listed(index)
    assert ("lnk", "s") not in listed and errors == {("lnk", "s"): "refused"}


def test_the_gzip_form_is_the_listing_and_a_change_recompresses_one_experiment(tmp_path):
    root = tmp_path / "out"
    for exp in ("a", "b", "c"):
        for i in range(4):
            _write(root, exp, f"s{i}", step=i)
    index = ReportIndex(str(root))
    body, gen = index.listing("out")
    good, errors, _ = index.refresh()
    assert gzip.decompress(body.gzipped()) == body.raw == listing_body("out", good, errors)
    chunks = set(index._chunks)
    _write(root, "b", "s1", step=1, loss=0.9)
    body2, gen2 = index.listing("out")
    assert gen2 == gen + 1 and gzip.decompress(body2.gzipped()) == body2.raw and b"0.9" in body2.raw
    assert len(set(index._chunks) - chunks) == 1  # only b's part was compressed again
    filtered, _ = index.listing("out", recipe="none")
    assert json.loads(gzip.decompress(filtered.gzipped()))["count"] == 0


def test_a_listing_may_be_fresh_s_old(tmp_path):
    root = tmp_path / "out"
    _write(root, "a", "s", loss=0.5)
    index = ReportIndex(str(root), fresh_s=3600)
    assert _listed(index)[0] == {("a", "s"): 0.5}
    _write(root, "a", "s", loss=0.25)
    assert _listed(index)[0] == {("a", "s"): 0.5}  # within the window: the earlier answer
    index.fresh_s = 0
    assert _listed(index)[0] == {("a", "s"): 0.25}


def test_a_same_size_rewrite_in_the_same_clock_tick_is_still_seen(tmp_path, monkeypatch):
    """File times tick coarsely: size, inode and times can all stay the same across a rewrite.

    Modelled by a stat key without times (what such a file system shows).
    """
    from contam_assets.evaluation import report_files

    monkeypatch.setattr(report_files, "file_key", lambda st: None if st is None else (st.st_dev, st.st_ino,
                                                                                        st.st_size, st.st_mode))
    root = tmp_path / "out"
    path = _write(root, "a", "s", loss=0.5)
    index = ReportIndex(str(root))
    assert _listed(index)[0] == {("a", "s"): 0.5}
    path.write_text(path.read_text().replace("0.5", "0.7"))  # same size, in place: the same key
    listed, _, gen = _listed(index)
    assert listed == {("a", "s"): 0.7}
    assert _listed(index)[2] == gen  # read again while racy, but unchanged: the generation stays


def test_a_racy_window_closing_mid_refresh_keeps_the_generation(tmp_path, monkeypatch):
    """A fresh report is read again on each refresh while racy; when its window closes between the check and the
    re-read (a long refresh of many reports), the re-read entry is the same one: the generation, and with it the
    ETag a client holds, must not move (the load benchmark saw a 200 for an If-None-Match of an unchanged listing)."""
    root = tmp_path / "out"
    _write(root, "a", "s", loss=0.5)
    _write(root, "b", "s", loss=0.6)
    index = ReportIndex(str(root))
    listed, _, gen = _listed(index)
    assert listed == {("a", "s"): 0.5, ("b", "s"): 0.6}
    monkeypatch.setattr(report_index, "racy_until", lambda st: 0.0)  # the window closed during the refresh
    assert _listed(index) == (listed, {}, gen)
