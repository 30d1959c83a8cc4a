"""A hostile pool shown in the Dagster UI and the terminal: inert text, each partition's own figures, one-line errors.

One `contam detect` (a ranged run over 6 shard partitions) on a pool whose documents carry a beacon image and a
phishing link in `source` and `id`, a terminal escape sequence in an `id`, and a shard named as a javascript: link.
The stored materializations are read back from the Dagster instance and their Markdown rendered by a CommonMark
renderer (markdown-it-py, as the UI's renderer reads CommonMark): no link, no image, no HTML, the text still there.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys

import dagster as dg
import duckdb
import pytest
from markdown_it import MarkdownIt

from contam_assets_tests.support.automation import make_tasks_dir

PAYLOAD = "![t](http://attacker/beacon.png) [Session expired](http://attacker/phish)"
EVIL_SHARD = "[x](javascript:alert(1)).jsonl"
# ESC [2J clears the screen; OSC 8 makes a terminal hyperlink; BEL ends it
CONTROL_ID = "\x1b[2J\x1b]8;;http://attacker/\x07click-me\x1b]8;;\x07"
# flagged documents per shard (the clean shard has none): every shard's figures differ from the run's
SHARDS = {EVIL_SHARD: (2, 3), "part-001.jsonl": (1, 6), "part-002.jsonl": (3, 1), "part-003.jsonl": (0, 8),
          "part-004.jsonl": (4, 0), "part-005.jsonl": (1, 2)}
AS_USER = (["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]
           if os.geteuid() == 0 and shutil.which("setpriv") else [])


def contam(*args, env_extra=None, as_user=False):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([*(AS_USER if as_user else []), sys.executable, "-m", "contam_assets.cli", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=900)


@pytest.fixture(scope="module")
def run(tmp_path_factory, shared_data):
    tmp = tmp_path_factory.mktemp("hostile")
    gsm = [json.loads(line) for line in open(shared_data / "gsm8k_test.jsonl")]
    pool, k = tmp / "pool", 0
    pool.mkdir()
    for shard, (dirty, clean) in SHARDS.items():
        docs = []
        for _ in range(dirty):
            g = gsm[k]
            doc_id = PAYLOAD if k == 0 else CONTROL_ID if k == 1 else f"d{k}"
            docs.append({"id": doc_id, "source": PAYLOAD, "text": f"Homework.\n{g['question']}\n{g['answer']}\nDone."})
            k += 1
        docs += [{"id": f"{shard}-c{i}", "source": "web", "text": "A clean page about rivers and boats. " * 4}
                 for i in range(clean)]
        (pool / shard).write_text("".join(json.dumps(d) + "\n" for d in docs))
    out, home = tmp / "out", tmp / "home"
    r = contam("detect", "--pool", pool, "--out", out, "--benchmarks", shared_data, "--tasks-dir",
               make_tasks_dir(tmp / "tasks"), "--tasks", "gsm8k",
               env_extra={"DAGSTER_HOME": str(home), "CONTAM_DETECT_RUNS": "ranged", "CONTAM_SCAN_WORKERS": "2"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    instance = dg.DagsterInstance.from_config(str(home))
    with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
        stats = {row[0]: dict(zip(("read", "removed", "candidates", "pending_review"), row[1:])) for row in con.execute(
            "select shard, read, removed, candidates, pending_review from shard_stats").fetchall()}
        mix = {row[0]: dict(zip(("written", "dropped"), row[1:]))
               for row in con.execute("select shard, written, dropped from mix_stats").fetchall()}
    yield dict(out=out, instance=instance, stats=stats, mix=mix, stdout=r.stdout)
    instance.dispose()


def latest(instance, asset: str, partition: str | None = None):
    f = dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition] if partition else None)
    records = instance.fetch_materializations(f, limit=1).records
    assert records, (asset, partition)
    return records[0].asset_materialization


MD = MarkdownIt("commonmark", {"html": True}).enable("table")


def rendered_text(md: str) -> str:
    """What a person reads: the rendered HTML without its tags."""
    return html.unescape(re.sub(r"<[^>]+>", " ", MD.render(md)))


def assert_inert(md: str, where: str) -> None:
    page = MD.render(md)
    # no link; no image except the inline PNG plots the project makes itself
    assert "<a " not in page, (where, page)
    assert all(src.startswith("data:image/png;base64,") for src in re.findall(r'<img src="([^"]*)"', page)), (where, page)
    # raw HTML is passed through by CommonMark: none may come from a cell
    assert not re.search(r"<(?!/?(table|thead|tbody|tr|th|td|p|img|em|strong|ul|li)\b)[a-z]", page), (where, page)
    # GFM's autolink literals (bare http://, www., javascript:) need an unescaped ':' or '.'
    assert not re.search(r"(?<!\\)\b(?:https?|javascript|mailto|ftp)(?<!\\):", md), (where, md)
    assert not re.search(r"(?<![\\\w])www\.", md), (where, md)


def test_every_stored_markdown_value_of_a_hostile_pool_is_inert_and_readable(run):
    inst, seen = run["instance"], {}
    for asset in ("task_registry", "reference_set", "ngram_index", "removals", "removal_report"):
        seen[asset] = latest(inst, asset)
    for shard in SHARDS:
        seen[f"shard_matches/{shard}"] = latest(inst, "shard_matches", shard)
        seen[f"decontaminated_mix/{shard}"] = latest(inst, "decontaminated_mix", shard)
    n_md = 0
    for where, mat in seen.items():
        for key, value in mat.metadata.items():
            if isinstance(value, dg.MarkdownMetadataValue):
                assert_inert(value.value, f"{where}:{key}")
                n_md += 1
    assert n_md >= 12  # splits, per_suite, skip_reasons, per_task, per_source, score_histogram, 6 x top_matches
    # the hostile strings are shown as the characters they are
    per_source = rendered_text(seen["removals"].metadata["per_source"].value)
    assert PAYLOAD in per_source
    top = rendered_text(seen[f"shard_matches/{EVIL_SHARD}"].metadata["top_matches"].value)
    assert EVIL_SHARD in top and PAYLOAD in top and "click-me" in top and "\x1b" not in top


def test_each_shard_partition_shows_its_own_figures_and_matches(run):
    inst, stats = run["instance"], run["stats"]
    assert sorted(stats) == sorted(SHARDS)
    totals = sum(s["read"] for s in stats.values())
    for shard, (dirty, clean) in SHARDS.items():
        md = latest(inst, "shard_matches", shard).metadata
        own = stats[shard]
        assert own["read"] == dirty + clean and own["removed"] == dirty
        assert md["documents_read"].value == own["read"] != totals, shard
        assert md["documents_removed"].value == own["removed"], shard
        assert md["candidates"].value == own["candidates"] and md["pending_review"].value == own["pending_review"]
        top = rendered_text(md["top_matches"].value)
        # only this shard's rows: no other shard is named in its top matches
        assert not [s for s in SHARDS if s != shard and s in top], (shard, top)
        assert (shard in top) == (dirty > 0) and (md["top_matches"].value == "_none_") == (own["candidates"] == 0)
        # the run's sums are there, named as the run's
        assert md["run_totals"].value["documents_read"] == totals and md["run_totals"].value["shards"] == len(SHARDS)
        mix = latest(inst, "decontaminated_mix", shard).metadata
        assert mix["documents_written"].value == run["mix"][shard]["written"] == clean
        assert mix["documents_dropped"].value == run["mix"][shard]["dropped"] == dirty


def test_the_terminal_gets_no_control_characters(run):
    out = run["out"]
    for args in (["--top", "50"], ["--stats"]):
        r = contam("review", out, *args)
        assert r.returncode == 0, r.stderr
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f]", r.stdout), args
    assert "click-me" in contam("review", out, "--top", "50").stdout
    assert "\x1b" not in run["stdout"]


def test_review_outputs_name_their_units(run):
    out = run["out"]
    stats = contam("review", out, "--stats").stdout
    assert "totals, in documents" in stats and "flagged_matches" in stats and "removed_documents" in stats
    r = contam("review", out, "--pending")
    assert r.returncode == 0 and re.search(r"^\d+ match\(es\) pending review in \d+ document\(s\); showing \d+ match\(es\)",
                                           r.stdout), r.stdout
    r = contam("review", out, "--top", "1")
    assert re.search(r"^\d+ match\(es\) in \d+ document\(s\); showing 1 match\(es\)", r.stdout), r.stdout


def _decisions(out) -> int:
    with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
        return con.execute("select count(*) from review_decisions").fetchone()[0]


def test_a_decision_on_an_unknown_instance_is_refused_in_one_line(run):
    out = run["out"]
    for spec, says in (("nosuch/test/1", "no suite/split nosuch/test"), ("gsm8k/tset/1", "did you mean gsm8k/test?"),
                       ("gsm8k/test/999999", "gsm8k/test has indexes 0..")):
        r = contam("review", out, "--accept-instance", spec)
        assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "recorded" not in r.stdout
    assert _decisions(out) == 0
    r = contam("review", out, "--reject-instance", "gsm8k/test/0")
    assert r.returncode == 0 and "recorded 1 decision" in r.stdout and _decisions(out) == 1


def test_mistakes_get_one_line_before_any_work(tmp_path, shared_data):
    pool = tmp_path / "pool"
    pool.mkdir()
    (pool / "a.jsonl").write_text(json.dumps({"text": "hello " * 20}) + "\n")
    (tmp_path / "a_file").write_text("x")
    home = tmp_path / "home"
    cases = [(tmp_path / "a_file", "exists and is not a folder"), (tmp_path / "a_file" / "sub", "cannot create the folder"),
             ("/proc/contam-out", "cannot create the folder"), ("/proc/self", "cannot write in the folder")]
    for out, says in cases:
        r = contam("detect", "--pool", pool, "--out", out, env_extra={"DAGSTER_HOME": str(home)})
        assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, (out, r.stderr)
    r = contam("demo", "--out", "/proc/contam-demo", env_extra={"DAGSTER_HOME": str(home)})
    assert r.returncode == 2 and "cannot create the folder" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = contam("detect", "--pool", pool, "--out", tmp_path / "out", "--benchmarks", shared_data, "--tasks", "gsm8kk",
               env_extra={"DAGSTER_HOME": str(home)})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "unknown task 'gsm8kk' (did you mean 'gsm8k'?); known: " in r.stderr and "humaneval" in r.stderr
    # no Dagster instance was made, no run recorded: nothing ran
    assert not (home / "dagster.yaml").exists() and not (tmp_path / "out" / "run.json").exists()
    if AS_USER:  # root reads and writes anything: drop the capabilities, as a user without them meets the folder
        ro = tmp_path / "read_only"
        ro.mkdir()
        ro.chmod(0o555)
        r = contam("detect", "--pool", pool, "--out", ro, env_extra={"DAGSTER_HOME": str(home)}, as_user=True)
        assert r.returncode == 2 and "cannot write in the folder (Permission denied)" in r.stderr, r.stderr
        r = contam("detect", "--pool", pool, "--out", tmp_path / "o", "--dagster-home", ro / "h", as_user=True)
        assert r.returncode == 2 and "--dagster-home" in r.stderr and "Permission denied" in r.stderr, r.stderr
