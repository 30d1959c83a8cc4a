"""README.md as a newcomer reads it: every command it shows is run by a test exactly as written.

The "Your own data" block runs here, line by line, in a folder laid out as the README says (a pool under `pool/`
with planted GSM8K copies, `../shared/data` beside it).  Every other command of the page is either the very line
of a docs page whose own test runs it (decon, S3, review page, Dagster), or a bare subcommand name in the prose.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from contam_assets.store import connect
from contam_assets_tests.support.doc_commands import ROOT, commands

README = "README.md"
HOST = ROOT / "data" / "demo" / "host_text.md"

# A README line that is a docs page's line, run by that page's test (named here so a reader can find it).
RUN_ELSEWHERE = {
    "contam detect --decon-config decon.yaml": ("docs/decon.md", "test_decon_docs.py"),
    "contam detect --pool s3://my-bucket/fineweb/data --out s3://my-bucket/contam/run1": ("docs/pools.md", "test_pools_docs.py"),
    "contam review contam_out --serve": (None, "test_review_browser.py"),
    "python benchmarks/scale_run.py --size 1GB --work /tmp/contam-scale --json scale.json": ("docs/scale.md", "test_scale_run_benchmark.py"),
    "python benchmarks/incremental_rescan.py --mb 8 --planted 0.05": ("docs/scale.md", "test_incremental_rescan_benchmark.py"),
    "python benchmarks/small_shards.py --files 5000 --shards 5 --rounds 3 --work /tmp/contam-small-shards --json small.json": ("docs/scale.md", "test_small_shards_benchmark.py"),
    "python benchmarks/paraphrase_quality.py --benchmarks ../shared/data --clean-docs 10000 --out /tmp/paraphrase_quality.json":
        ("docs/paraphrase.md", "test_paraphrase.py"),
}
RUN_BY_TEST_DOCS_COMMANDS = ("dg check defs", "dg list defs", "DAGSTER_HOME=$PWD/contam_out/.dagster_home")


def _block(title: str) -> list[str]:
    text = (ROOT / README).read_text(encoding="utf-8")
    section = text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def _subcommands() -> set[str]:
    return {p.stem for p in (ROOT / "contam_assets" / "commands").glob("*.py") if not p.stem.startswith("_")}


def test_readme_is_a_front_door():
    text = (ROOT / README).read_text(encoding="utf-8")
    assert len(text.encode()) <= 12 * 1024, len(text.encode())
    lines = text.splitlines()
    assert lines[3].startswith("./dev demo ") and lines[4].startswith("./dev test "), "the two commands come first"
    assert not re.search(r"\b(round|this round|issue \d+)\b", text, re.I), "the README narrates history"
    for link in re.findall(r"\]\(((?:docs/)?[\w./-]+\.md)\)", text):
        assert (ROOT / link).is_file(), link


def test_every_readme_command_is_run_somewhere():
    own = set(_block("Your own data"))
    subs = _subcommands()
    for cmd in commands(README):
        bare = cmd.split("#")[0].strip()
        if cmd in own or bare in {c.split("#")[0].strip() for c in own}:
            continue
        if cmd.startswith("./dev "):
            continue  # the two setup commands: CI runs ./dev test, test_docs_commands the demo's outputs
        if bare in RUN_ELSEWHERE:
            doc, _test = RUN_ELSEWHERE[bare]
            assert doc is None or bare in commands(doc), (bare, doc)
            continue
        if cmd.startswith(RUN_BY_TEST_DOCS_COMMANDS):
            continue  # test_docs_commands.py looks these up in README.md and runs them
        words = bare.split()
        assert words[0] == "contam" and len(words) == 2 and words[1] in subs, f"README shows {cmd!r}, which no test runs"


def _pool(folder: Path, shared: Path) -> list[str]:
    """Four shards of host paragraphs; three documents quote a GSM8K test item with its answer (their ids)."""
    paragraphs = [p.strip() for p in HOST.read_text(encoding="utf-8").split("\n\n") if p.strip() and not p.startswith("#")]
    items = [json.loads(x) for x in (shared / "gsm8k_test.jsonl").read_text().splitlines()[:3]]
    rng = random.Random(7)
    planted = []
    for s in range(4):
        rows = []
        for d in range(25):
            text = "\n\n".join(rng.sample(paragraphs, 3))
            doc_id = f"s{s}-d{d}"
            if s in (0, 2) and d in (3, 9) and len(planted) < len(items):
                item = items[len(planted)]
                text += f"\n\nQuestion: {item['question']}\nAnswer: {item['answer']}\n"
                planted.append(doc_id)
            rows.append(json.dumps({"id": doc_id, "text": text, "source": "web"}))
        (folder / f"part-{s}.jsonl").write_text("\n".join(rows) + "\n")
    return planted


@pytest.fixture(scope="module")
def own_data(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("readme")
    # ../shared/data as the README has it: every file of the shared folder, GSM8K's train split cut to its first 300
    # items (the pool quotes test items; the estimate and the run each index the set without the other 7,173)
    data = root / "shared" / "data"
    data.mkdir(parents=True)
    for src in shared_data.iterdir():
        if src.name == "gsm8k_train.jsonl":
            (data / src.name).write_text("".join(src.read_text().splitlines(keepends=True)[:300]))
        else:
            (data / src.name).symlink_to(src)
    work = root / "work"
    (work / "pool").mkdir(parents=True)
    planted = _pool(work / "pool", shared_data)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTAM_")}
    env |= {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", "DAGSTER_HOME": str(root / "home")}
    (root / "home").mkdir()
    (root / "home" / "dagster.yaml").touch()
    results = []
    for cmd in _block("Your own data"):
        r = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True, timeout=900)
        results.append(r)
        assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-3000:])
    return dict(out=work / "out", planted=planted, results=results, cmds=_block("Your own data"))


def test_the_own_data_block_is_the_documented_flow(own_data):
    assert [c.split()[1] for c in own_data["cmds"]] == ["tasks", "estimate", "detect", "review", "apply"]
    tasks_out = own_data["results"][0].stdout
    assert "gsm8k" in tasks_out and "1319" in tasks_out.replace(",", "")


def test_the_estimate_and_the_full_run_agree_on_what_is_there(own_data):
    est = json.loads((own_data["out"] / "estimate.json").read_text())
    assert est["fraction"] == 0.25 and est["sampled"]["units"] >= 1
    assert any(t.startswith("gsm8k") for t in est["tasks"])
    with connect(own_data["out"] / "contam.duckdb", read_only=True) as con:
        removed = {r[0] for r in con.execute("select doc_id from removals").fetchall()}
    assert set(own_data["planted"]) <= removed, (own_data["planted"], removed)
    assert len(removed) == len(own_data["planted"])  # host paragraphs are clean
    assert (own_data["out"] / "report.html").is_file() and (own_data["out"] / "mix" / "part-0.jsonl").is_file()
    mix = (own_data["out"] / "mix" / "part-0.jsonl").read_text()
    assert not any(f'"{d}"' in mix for d in own_data["planted"])
    assert "question" in own_data["results"][3].stdout.lower() or own_data["results"][3].stdout.strip()
