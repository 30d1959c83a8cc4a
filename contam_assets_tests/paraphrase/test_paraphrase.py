"""The paraphrase part (docs/paraphrase.md): rewordings planted into host documents are found and held,
look-alikes (fresh problems, number-changed copies) are not, and default/thorough rows are untouched."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import duckdb
import numpy as np
import pytest

from contam_assets.detector.config import PRESETS, ConfigError, with_parts
from contam_assets.detector.index_build import build_index
from contam_assets.detector.matches import Reference, scan_documents
from contam_assets.paraphrase.embed import EmbedderError, load_embedder
from contam_assets.paraphrase.quantities import hard, numbers, signature
from contam_assets.paraphrase.search import sentence_bounds
from contam_assets.paraphrase.stage import paraphrase_rows
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import load_registry
from contam_assets.store.pool import Document
from contam_assets_tests.support.doc_commands import clean_env, command

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("/work/shared/data")
PARA = DATA / "paraphrase"
HOST = ("The town council met on Tuesday to discuss the new library. Residents asked about parking and opening "
        "hours, and the mayor promised an answer next month.")
pytestmark = pytest.mark.skipif(not (PARA / "gsmplus_testmini.jsonl").is_file(), reason="shared data not present")


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open()]


def doc(i: int, body: str) -> Document:
    text = f"{HOST}\n\n{body}\n\nThanks for reading."
    return Document(line=i, doc_id=f"d{i}", source="web", text=text, n_bytes=len(text.encode()), raw=b"", offset=0)


@pytest.fixture(scope="module")
def gsm8k():
    cfg = PRESETS["paraphrase"]
    records, _ = build_reference_set(load_registry(ROOT / "data" / "tasks", ["gsm8k"]), DATA, cfg)
    return cfg, Reference(records)


def test_numbers_in_digits_and_words():
    assert numbers("She paid $1,200 and 2.50 for twenty-five pens and a quarter of a pie") == \
        {1200.0: 1, 2.5: 1, 25: 1, 0.25: 1}
    assert hard(numbers("one hour, three dozen eggs, two-thirds of 9")) == {36: 1, round(2 / 3, 4): 1, 9.0: 1}
    assert signature("def add(a, b=1, *rest):\n    return a") == ("add", ("a", "b", "rest"))


def test_planted_rewordings_are_found_held_and_linked_to_their_item(gsm8k):
    cfg, ref = gsm8k
    rows = [r for r in jsonl(PARA / "gsmplus_testmini.jsonl") if r["kind"] == "problem understanding"][:10]
    docs = [doc(i, r["question"]) for i, r in enumerate(rows)]
    out = paraphrase_rows(docs, "web/a.jsonl", ref, cfg, "paraphrase", [])
    assert len(out) >= 5  # 6 of these 10; about 79 % of all 188 rows (benchmarks/paraphrase_quality.py)
    for r in out:
        assert r["reason"] == "paraphrase" and r["flagged"] and r["needs_review"]
        assert (r["task"], r["split"], r["instance_index"]) == ("gsm8k", "test", rows[r["line"]]["index"])
        ev = json.loads(r["evidence"])
        assert ev["rule"] == "math" and ev["similarity"] >= cfg.paraphrase_min_similarity and ev["quantities"]
        assert r["training_text"] in docs[r["line"]].text and HOST not in r["training_text"]


def test_a_task_named_in_paraphrase_remove_removes_instead_of_holding(gsm8k):
    from contam_assets.detector.config import DetectConfig, validate

    cfg, ref = gsm8k
    rows = [r for r in jsonl(PARA / "gsmplus_testmini.jsonl") if r["kind"] == "problem understanding"][:10]
    docs = [doc(i, r["question"]) for i, r in enumerate(rows)]
    held = paraphrase_rows(docs, "web/a.jsonl", ref, cfg.replace(paraphrase_remove="mbpp"), "paraphrase", [])
    removed = paraphrase_rows(docs, "web/a.jsonl", ref, cfg.replace(paraphrase_remove="mbpp, gsm8k"), "paraphrase", [])
    every = paraphrase_rows(docs, "web/a.jsonl", ref, cfg.replace(paraphrase_remove="all"), "paraphrase", [])
    assert len(held) == len(removed) == len(every) >= 5
    assert all(r["needs_review"] for r in held) and not any(r["needs_review"] for r in removed + every)
    assert [r["match_id"] for r in held] == [r["match_id"] for r in removed]
    with pytest.raises(ConfigError, match="task names separated by commas"):
        cfg.replace(paraphrase_remove="gsm8k mbpp")  # a space is no separator
    with pytest.raises(ConfigError, match="needs the paraphrase part"):
        DetectConfig(paraphrase_remove="gsm8k")  # without the part it would do nothing
    assert not validate(cfg.replace(paraphrase_remove="gsm8k,all"))
    assert cfg.replace(paraphrase_remove="gsm8k").digest() != cfg.digest()  # a change rescans
    assert DetectConfig().digest() == DetectConfig(paraphrase_remove="").digest()


def test_look_alikes_are_not_held(gsm8k):
    cfg, ref = gsm8k
    exact = set(ref.records["question"].str.strip_chars().to_list())
    sky = [r["question"] for r in jsonl(DATA / "skywork_mock_gsm8k_eval_1419.jsonl")[:120]]
    hard_rows = [r["input"] for r in jsonl(DATA / "gsmhard_v2.jsonl") if r["input"].strip() not in exact][:40]
    changed = [r["question"] for r in jsonl(PARA / "gsmplus_testmini.jsonl")
               if r["kind"] in ("numerical substitution", "digit expansion")][:40]
    docs = [doc(i, t) for i, t in enumerate(sky + hard_rows + changed)]
    held = paraphrase_rows(docs, "web/b.jsonl", ref, cfg, "paraphrase", [])
    # no GSM-Hard copy nor changed GSM-Plus row; of 120 fresh problems at most 2 (the target: 2 %); 0 measured
    assert [r["line"] for r in held if r["line"] >= len(sky)] == [] and len(held) <= 2


def test_default_and_thorough_rows_are_unchanged_by_the_part(gsm8k):
    _, ref = gsm8k
    assert not PRESETS["default"].paraphrase and not PRESETS["thorough"].paraphrase
    assert PRESETS["paraphrase"] == with_parts(PRESETS["thorough"], ["paraphrase"])
    assert PRESETS["thorough"].digest() == PRESETS["thorough"].replace(paraphrase=False).digest()
    gsm = jsonl(DATA / "gsm8k_test.jsonl")[:3]
    pu = [r for r in jsonl(PARA / "gsmplus_testmini.jsonl") if r["kind"] == "problem understanding"][:3]
    docs = [doc(i, t) for i, t in enumerate([g["question"] + "\n" + g["answer"] for g in gsm] + [r["question"] for r in pu])]
    cfg = PRESETS["thorough"]
    index = build_index(ref.records, cfg)
    base, _ = scan_documents(docs, "web/c.jsonl", index, ref, cfg, "thorough")
    assert base and all(r["evidence"] is None and r["reason"] != "paraphrase" for r in base)
    extra = paraphrase_rows(docs, "web/c.jsonl", ref, cfg.replace(paraphrase=True), "thorough", base)
    # the documents the n-gram rules already matched get no second row for the same instance
    assert {r["line"] for r in extra} <= {3, 4, 5} and extra


def test_a_model2vec_folder_by_path_and_a_bad_one(tmp_path):
    from safetensors.numpy import save_file

    wl = load_embedder()
    save_file({"embeddings": wl.table}, str(tmp_path / "model.safetensors"))
    wl.tokenizer.save(str(tmp_path / "tokenizer.json"))
    m2v = load_embedder(str(tmp_path))
    texts = ["Janet has 16 ducks.", "A train leaves at noon."]
    assert np.allclose(m2v.embed(texts), wl.embed(texts), atol=1e-6)
    # a window's vector from the sums at its sentence bounds is (up to how the tokenizer splits at a
    # sentence start inside a text) the vector of its text embedded alone
    text = "Janet has 16 ducks. She sells the eggs. A train leaves at noon."
    cuts = sentence_bounds(text)
    assert cuts.tolist() == [0, 20, 40, len(text)]
    sums, tokens = wl.prefix_sums(text, cuts)
    assert np.allclose(sums[-1] / tokens[-1] / np.linalg.norm(sums[-1] / tokens[-1]), wl.embed([text])[0], atol=1e-5)
    spans = [(0, 1), (1, 2), (2, 3), (1, 3), (0, 2)]
    alone = wl.embed([text[cuts[a]:cuts[b]] for a, b in spans])
    for k, (a, b) in enumerate(spans):  # each window is nearest to its own text (0.90-0.99), not to another
        mean = (sums[b] - sums[a]) / (tokens[b] - tokens[a])
        cos = alone @ (mean / np.linalg.norm(mean))
        assert int(cos.argmax()) == k and cos[k] > 0.9
    with pytest.raises(EmbedderError, match="not a model2vec folder"):
        load_embedder(str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="paraphrase_min_similarity"):
        PRESETS["paraphrase"].replace(paraphrase_min_similarity=3.0)


def _env() -> dict:
    return clean_env()


def test_the_documented_detect_command_end_to_end_on_a_tiny_pool(tmp_path):
    # docs/paraphrase.md's command, run as written from a folder beside a small ../shared/data
    bench, run, pool = tmp_path / "shared" / "data", tmp_path / "run", tmp_path / "run" / "pool" / "web"
    for p in (bench, pool):
        p.mkdir(parents=True)
    for name, n in (("gsm8k_train.jsonl", 50), ("gsm8k_test.jsonl", 200)):  # a small reference set keeps it fast
        (bench / name).write_text("".join((DATA / name).read_text().splitlines(True)[:n]))
    pu = [r for r in jsonl(PARA / "gsmplus_testmini.jsonl") if r["kind"] == "problem understanding" and r["index"] < 200]
    sky = jsonl(DATA / "skywork_mock_gsm8k_eval_1419.jsonl")[:3]
    lines = [doc(0, pu[0]["question"]), doc(1, pu[1]["question"])] + [doc(2 + i, s["question"]) for i, s in enumerate(sky)]
    (pool / "part-0.jsonl").write_text("".join(json.dumps({"id": d.doc_id, "text": d.text}) + "\n" for d in lines))
    cmd = command("docs/paraphrase.md", "contam detect")
    res = subprocess.run(["bash", "-c", cmd], cwd=run, env=_env() | {"DAGSTER_HOME": str(tmp_path / "dh")},
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    con = duckdb.connect(str(run / "out" / "contam.duckdb"), read_only=True)
    rows = con.execute("select line, reason, flagged, needs_review, instance_index, evidence from matches "
                       "where reason = 'paraphrase' order by line").fetchall()
    assert {r[0] for r in rows} == {0, 1}, rows  # both rewordings; the Skywork problems (lines 2-4) not held
    assert [r[4] for r in rows] == [pu[0]["index"], pu[1]["index"]]
    assert all(r[2] and r[3] and json.loads(r[5])["rule"] == "math" for r in rows)
    assert con.execute("select count(*) from removals").fetchone()[0] == 0  # held, not removed
    assert "evidence: similarity" in (run / "out" / "report.html").read_text()
    con.close()
    # the task named in --paraphrase-remove: the two rewordings removed at once, the mix without them
    res = subprocess.run(["bash", "-c", cmd.replace("--out out", "--out out2") + " --paraphrase-remove gsm8k"], cwd=run,
                         env=_env() | {"DAGSTER_HOME": str(tmp_path / "dh2")}, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    with duckdb.connect(str(run / "out2" / "contam.duckdb"), read_only=True) as con2:
        assert sorted(r[0] for r in con2.execute("select line from removals").fetchall()) == [0, 1]
    assert [json.loads(x)["id"] for x in (run / "out2" / "mix" / "web" / "part-0.jsonl").read_text().splitlines()] == \
        ["d2", "d3", "d4"]
    # a name the reference set does not hold: one line, a failed run
    res = subprocess.run(["bash", "-c", cmd.replace("--out out", "--out out3") + " --paraphrase-remove gsm8kk"], cwd=run,
                         env=_env() | {"DAGSTER_HOME": str(tmp_path / "dh3")}, capture_output=True, text=True, timeout=600)
    assert res.returncode != 0 and "--paraphrase-remove names gsm8kk" in res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr


def test_the_documented_benchmark_command_at_a_tiny_size(tmp_path):
    cmd = command("docs/paraphrase.md", "python benchmarks/paraphrase_quality.py")
    cmd = re.sub(r"--clean-docs \S+", "--clean-docs 40", cmd)
    cmd = re.sub(r"--out \S+", f"--out {tmp_path / 'pq.json'}", cmd) + " --limit 15 --tasks gsm8k,humaneval"
    res = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    out = json.loads((tmp_path / "pq.json").read_text())
    files = {e["file"] for e in out["recall"] + out["look_alikes"]}
    assert {"GSM-Plus", "ReCode HumanEval", "Skywork mock GSM8K (eval 1419, question)"} <= files
    assert all(0 <= e["held"] <= 1 and e["rows"] > 0 for e in out["recall"] + out["look_alikes"])
    assert [c["n"] for c in out["clean"]] == [40, 40, 40] and all(c["MB_per_s_per_core"] > 0 for c in out["clean"])
