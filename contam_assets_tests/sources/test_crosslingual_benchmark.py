"""docs/crosslingual.md's figures: its two benchmark commands run exactly as written, and their reverse links; the
manual-page pool's accounting."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from contam_assets_tests.support.doc_commands import ROOT, command

DOC = "docs/crosslingual.md"


@pytest.mark.parametrize("preset, reverse_link", [("default", 2 / 3), ("thorough", 1.0)])
def test_the_documented_runs_give_the_documented_reverse_links(preset, reverse_link, shared_data):
    cmd = command(DOC, f"python benchmarks/crosslingual_quality.py --preset {preset} ")
    out = cmd.split("--out ")[1].split()[0]
    r = subprocess.run(cmd.replace("python ", f"{sys.executable} ", 1), shell=True, cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    figures = json.loads(open(out).read())
    assert figures["removals_direct_only"] is True and figures["removals"] == 134
    for task in ("mgsm_es", "mgsm_fr"):
        t = figures["tasks"][task]
        assert t["items_with_english_copy"] == 150 and t["exposed_without_copy"] == 0
        assert t["reverse_link"] == pytest.approx(reverse_link, abs=1e-3)
        assert t["reverse_link_of_flagged_copies"] == 1.0


def test_manual_pages_that_render_to_nothing_are_counted_and_a_missing_folder_gives_none(tmp_path, monkeypatch):
    # the pool of translated manual pages: a page that renders to under 200 characters (here a file man cannot read,
    # and a one-line page) is counted as skipped, by language; a folder without pages gives no shard and no count
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import crosslingual_pool

    if shutil.which("man") is None:
        pytest.skip("no man to render pages")
    pages = tmp_path / "de" / "man1"
    pages.mkdir(parents=True)
    (pages / "kaputt.1").write_bytes(b"\x00\xff not a manual page")
    (pages / "kurz.1").write_text(".TH KURZ 1\n.SH NAME\nkurz \\- ein Satz\n")
    (pages / "lang.1").write_text(".TH LANG 1\n.SH BESCHREIBUNG\n" + "Dieses Programm liest die Datei und schreibt sie. " * 20 + "\n")
    skipped: dict[str, int] = {}
    got = crosslingual_pool.manual_docs(tmp_path, 0, skipped)
    assert list(got) == ["manuals_de"] and [d["id"] for d in got["manuals_de"]] == ["de/lang.1"]
    assert skipped == {"de": 2}
    skipped = {}
    assert crosslingual_pool.manual_docs(tmp_path / "nowhere", 0, skipped) == {} and skipped == {}
