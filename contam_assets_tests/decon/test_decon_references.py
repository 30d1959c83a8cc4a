"""decon reference folders as a source: identity across chunk files, real GSM8K and MMLU, and no silent empty runs."""

from __future__ import annotations

import csv
import hashlib
import json
import random
from pathlib import Path

import duckdb
import polars as pl
import pytest

from contam_assets.detector.config import DECON_MODE, ConfigError, DetectConfig, preset
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import decon_spec, load_spec
from contam_assets_tests.e2e.test_cli_data import contam
from contam_assets_tests.support import decon_fixtures as fx

LETTERS = "ABCD"


def decon_records_from_shared(shared: Path, n_gsm: int, subjects: list[str]) -> tuple[list[dict], list[dict]]:
    """GSM8K test and some MMLU subjects written as decon's reference records (one line per MMLU choice)."""
    gsm = [json.loads(line) for line in open(shared / "gsm8k_test.jsonl")][:n_gsm]
    g_recs = [dict(eval_key="gsm8k", eval_instance_index=i, split="test", question=g["question"], answer=g["answer"],
                   doc_id=1000 + i, fingerprint=hashlib.sha256((g["question"] + g["answer"]).encode()).hexdigest()[:16])
              for i, g in enumerate(gsm)]
    m_recs, idx = [], 0
    for subject in subjects:
        with open(shared / "mmlu_test" / f"{subject}_test.csv", newline="") as fh:
            for row in csv.DictReader(fh):
                for c in range(4):
                    m_recs.append(dict(eval_key="mmlu", eval_instance_index=idx, split="test", question=row["question"],
                                       answer=row[f"choice{c}"], is_correct=c == int(row["answer"]),
                                       doc_id=50000 + len(m_recs),
                                       fingerprint=hashlib.sha256((row["question"] + row[f"choice{c}"]).encode()).hexdigest()[:16]))
                idx += 1
    return g_recs, m_recs


def write_chunks(folder: Path, stem: str, recs: list[dict], n: int) -> None:
    """decon's layout: <stem>-1.jsonl.gz ... <stem>-n.jsonl.gz, eval_instance_index counting on across chunks."""
    import gzip

    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(recs) // n)
    for k in range(n):
        part = recs[k * size:(k + 1) * size]
        data = "".join(json.dumps(r) + "\n" for r in part)
        (folder / f"{stem}-{k + 1}.jsonl.gz").write_bytes(gzip.compress(data.encode()))


def test_chunked_decon_folder_keeps_every_instance_identity(tmp_path, shared_data):
    g, m = decon_records_from_shared(shared_data, 30, ["abstract_algebra", "anatomy"])
    write_chunks(tmp_path / "evals", "mmlu_test", m, 3)
    write_chunks(tmp_path / "evals", "gsm8k_test", g, 1)
    (tmp_path / "evals" / "notes.txt").write_text("not a reference file")  # decon reads only its suffixes
    recs, stats = build_reference_set([decon_spec(str(tmp_path / "evals"))], None, preset("default", **DECON_MODE))
    assert not stats.bad_rows and recs.height == len(g) + len(m)
    assert set(recs["task"]) == set(recs["suite"]) == {"gsm8k", "mmlu"}
    mm = recs.filter(pl.col("suite") == "mmlu")
    # one (instance, choice) per line, and the instance index is the record's, not the line within its chunk
    assert mm.group_by("instance_index").len()["len"].max() == 4
    assert mm["instance_index"].n_unique() == len(m) // 4 == mm["instance_index"].max() + 1
    assert mm.select("source_file", "source_line").unique().height == len(m)
    assert set(mm["source_file"]) == {"mmlu_test-1.jsonl.gz", "mmlu_test-2.jsonl.gz", "mmlu_test-3.jsonl.gz"}
    assert mm["eval_doc_id"].to_list() == [r["doc_id"] for r in m]
    assert mm["is_correct"].sum() == len(m) // 4
    # every record traces back to its line: chunk k starts where chunk k-1 ended
    first_of_chunk2 = mm.filter(pl.col("source_file") == "mmlu_test-2.jsonl.gz").sort("source_line").row(0, named=True)
    assert first_of_chunk2["source_line"] == 0 and first_of_chunk2["instance_index"] == m[-(-len(m) // 3)]["eval_instance_index"]


def test_registry_globs_number_instances_on_across_files(tmp_path, shared_data):
    # our own spec format: a split whose glob matches chunk files numbers its rows on, so no two rows share an index
    gsm = [json.loads(line) for line in open(shared_data / "gsm8k_test.jsonl")][:40]
    (tmp_path / "bench").mkdir()
    for k in range(2):
        (tmp_path / "bench" / f"gsm-{k}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gsm[k * 20:(k + 1) * 20]))
    spec_file = tmp_path / "gsm.toml"
    spec_file.write_text('name = "gsmc"\nkind = "qa"\n[fields]\nquestion = "question"\nanswer = "answer"\n'
                         '[[splits]]\nname = "test"\nfile = "gsm-*.jsonl"\n')
    recs, _ = build_reference_set([load_spec(spec_file)], tmp_path / "bench", DetectConfig())
    assert recs["instance_index"].to_list() == list(range(40))
    assert recs["source_line"].to_list() == list(range(20)) * 2
    assert recs["question"].to_list() == [g["question"] for g in gsm]


def test_dedup_in_decon_mode_is_by_the_fingerprint_field_only(tmp_path):
    q = "Which gas do green plants absorb from the air through their stomata to build sugars during photosynthesis?"
    lines = [dict(eval_key="k", question=q, answer="carbon dioxide", doc_id=1, fingerprint="same"),
             dict(eval_key="k", question=q, answer="carbon dioxide", doc_id=2, fingerprint="same"),  # dropped: same field
             dict(eval_key="k", question=q, answer="carbon dioxide", doc_id=3),  # no field: never deduplicated
             dict(eval_key="k", question=q, answer="carbon dioxide", doc_id=4)]
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "ref.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    decon = build_reference_set([decon_spec(str(tmp_path / "e"))], None, preset("default", **DECON_MODE))[0]
    assert decon["skip_reason"].to_list() == [None, "duplicate", None, None]
    # (the same-answer rule would index these four on their question alone, under the length bar: off here)
    ours = build_reference_set([decon_spec(str(tmp_path / "e"))], None, preset("default", same_answer_rule=False))[0]
    assert ours["skip_reason"].to_list() == [None, "duplicate", "duplicate", "duplicate"]  # by content


@pytest.fixture(scope="module")
def gsm_mmlu_run(tmp_path_factory, shared_data):
    """decon's default config on GSM8K + MMLU references in decon's format, a pool of verbatim and cut copies."""
    tmp = tmp_path_factory.mktemp("decon_gsm_mmlu")
    g, m = decon_records_from_shared(shared_data, 300, ["high_school_world_history", "college_medicine"])
    write_chunks(tmp / "evals", "gsm8k_test", g, 2)
    write_chunks(tmp / "evals", "mmlu_test", m, 3)
    rng = random.Random(7)
    texts, expected, cut_lines = [], set(), set()
    # MMLU items whose question shares no long prefix with another (world-history items quote one source text for
    # several questions: a copy of one is, by decon's rules, also a near copy of its siblings)
    prefix = lambda r: " ".join(r["question"].split()[:12])  # noqa: E731
    twins = {p for p, n in pl.Series([prefix(r) for r in m if r["is_correct"]]).value_counts().iter_rows() if n > 1}
    correct = [r for r in m if r["is_correct"] and len(r["question"].split()) >= 30 and prefix(r) not in twins]
    for i in range(40):  # GSM8K: question + worked answer, verbatim
        r = g[rng.randrange(len(g))]
        expected.add((len(texts), "gsm8k", r["eval_instance_index"]))
        texts.append(f"{fx.filler(i)} {r['question']}\n{r['answer']} {fx.filler(i + 1)}")
    for i in range(20):  # MMLU: the question and its correct option
        r = correct[rng.randrange(len(correct))]
        expected.add((len(texts), "mmlu", r["eval_instance_index"]))
        texts.append(f"{fx.filler(i)} Question: {r['question']} Answer: {r['answer']} {fx.filler(i + 2)}")
    for i in range(20):  # GSM8K with the middle of the question cut out: decon's rules do not flag it
        r = g[rng.randrange(len(g))]
        w = r["question"].split()
        cut_lines.add(len(texts))
        texts.append(f"{fx.filler(i)} {' '.join(w[: len(w) // 4] + w[3 * len(w) // 4:])}\n{r['answer'][:40]} {fx.filler(i + 3)}")
    clean = [fx.filler(i, 3) for i in range(20)]
    texts += clean
    fx.write_jsonl(tmp / "pool" / "mixed.jsonl", texts)
    cfg = fx.write_config(tmp / "default.yaml", {"mode": "simple", "tokenizer_str": "cl100k"}, tmp / "evals", tmp / "pool",
                          tmp / "reports")  # every other key: decon's default.yaml values
    r = contam("detect", "--decon-config", cfg, env_extra={"DAGSTER_HOME": str(tmp / "home")})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return tmp, expected, cut_lines


def test_flagged_set_is_the_one_decons_rules_give(gsm_mmlu_run):
    tmp, expected, cut_lines = gsm_mmlu_run
    entries = [json.loads(line) for line in (tmp / "reports" / "mixed-simple-0.80.jsonl").read_text().splitlines()]
    got = {(e["training_line"], e["eval_key"], e["eval_instance_index"]) for e in entries}
    assert got == expected
    assert not {e["training_line"] for e in entries} & cut_lines
    # the MMLU entries name the correct option's line, and every entry traces back to its reference line
    for e in entries:
        assert e["reference_file"].startswith(f"{e['eval_key']}_test-") and e["eval_line"] >= 0
        if e["eval_key"] == "mmlu":
            assert e["is_correct"] is True
    # our tables agree with the reports entry for entry
    r = contam("compare", tmp / "reports", tmp / "reports-contam", "--fail-on-difference")
    assert r.returncode == 0, r.stdout


def test_the_default_path_is_unchanged_apart_from_new_columns(gsm_mmlu_run):
    tmp, _, _ = gsm_mmlu_run
    con = duckdb.connect(str(tmp / "reports-contam" / "contam.duckdb"), read_only=True)
    cols = [c[0] for c in con.execute("describe matches").fetchall()]
    assert cols[-7:] == ["contamination_score", "answer_spans", "cluster_end", "reason", "twins", "evidence", "via_task"]
    # a flagged complete copy scores 1.0 raw and adjusted; the adjusted score never exceeds the raw one
    assert con.execute("select count(*) from matches where contamination_score > score + 1e-9").fetchone()[0] == 0


def test_silent_empty_runs_are_errors(tmp_path, shared_data):
    pool = tmp_path / "pool"
    fx.write_jsonl(pool / "a.jsonl", [fx.full_copy(fx.BRIDGE)])
    home = {"DAGSTER_HOME": str(tmp_path / "home")}
    evals = tmp_path / "evals"
    evals.mkdir()
    (evals / "toy-1.jsonl").write_text("\n".join(fx.reference_lines()) + "\n")
    # a decon folder passed as --benchmarks: every registry task lacks its files; the error names them and the fix
    r = contam("detect", "--pool", pool, "--out", tmp_path / "o1", "--benchmarks", evals, env_extra=home)
    assert r.returncode == 2
    assert "have no source files" in r.stderr and "gsm8k (looked for" in r.stderr and "--evals-dir" in r.stderr
    # --allow-missing runs with what there is (the embedded HumanEval)
    r = contam("detect", "--pool", pool, "--out", tmp_path / "o2", "--benchmarks", evals, "--allow-missing", env_extra=home)
    assert r.returncode == 0, r.stderr[-2000:]
    # a decon folder with no reference file, or one whose records are all filtered out
    (tmp_path / "none").mkdir()
    r = contam("detect", "--pool", pool, "--out", tmp_path / "o3", "--evals-dir", tmp_path / "none", env_extra=home)
    assert r.returncode == 2 and "no source files" in r.stderr
    r = contam("detect", "--pool", pool, "--out", tmp_path / "o4", "--evals-dir", evals, "--min-tokens", "500", env_extra=home)
    assert r.returncode == 2 and "no indexable benchmark instance" in r.stderr
    # the same folder as --evals-dir finds the copy
    r = contam("detect", "--pool", pool, "--out", tmp_path / "o5", "--evals-dir", evals, env_extra=home)
    assert r.returncode == 0 and "removed 1" in r.stdout, r.stderr[-2000:]


def test_config_errors_name_the_key_and_the_fix(tmp_path):
    pool = tmp_path / "pool"
    fx.write_jsonl(pool / "a.jsonl", [fx.full_copy(fx.BRIDGE)])
    cfg = tmp_path / "c.yaml"
    for text, needle in (("tokenizer_str: o200k\n", "tokenizer_str 'o200k' is not supported"),
                         ("mode: minhash\n", "mode 'minhash' is not supported"),
                         ("perfect_match_decay_start: 50\nperfect_match_decay_end: 20\n", "must be at least decay_start"),
                         ("ngram_size: five\n", "ngram_size: ngram_size takes a whole number")):
        cfg.write_text(text)
        r = contam("detect", "--decon-config", cfg, "--pool", pool, "--out", tmp_path / "o")
        assert r.returncode == 2 and needle in r.stderr, (text, r.stderr[-800:])
    r = contam("detect", "--pool", pool, "--out", tmp_path / "o", "--threshold", "high")
    assert r.returncode == 2 and "--threshold: threshold takes a number" in r.stderr
    with pytest.raises(ConfigError, match="decay_end"):
        DetectConfig(decay_start=30, decay_end=10)


def test_training_files_of_every_decon_kind_and_nested_content_keys(tmp_path):
    pool = tmp_path / "pool"
    evals = tmp_path / "evals"
    evals.mkdir()
    (evals / "toy.jsonl").write_text("\n".join(fx.reference_lines()) + "\n")
    for name in ("a.json", "b.jsonl.zstd", "c.json.bz2", "d.jsonl.xz"):
        fx.write_jsonl(pool / name, [fx.filler(0), fx.full_copy(fx.BRIDGE)])
    nested = pool / "e.jsonl"
    nested.write_text("".join(json.dumps({"id": f"e{i}", "meta": {"body": t}}) + "\n"
                              for i, t in enumerate([fx.filler(1), fx.full_copy(fx.LEAVES)])))
    (pool / "README.md").write_text("not a shard")
    home = {"DAGSTER_HOME": str(tmp_path / "home")}
    # the four files keyed by "text" hold no meta.body: the door stops the run before the scan, naming what they hold
    r = contam("detect", "--pool", pool, "--out", tmp_path / "o", "--evals-dir", evals, "--content-key", "meta.body",
               env_extra=home)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "contam detect: error: no 'meta.body' in a.json; it has: id, text — pass --content-key text "
        "(3 more unit(s) likewise)"], r.stderr[-2000:]
    assert not (tmp_path / "o" / "contam.duckdb").exists()
    # every decon file kind keyed by the nested field: read, scanned, matched
    for name in ("a.json", "b.jsonl.zstd", "c.json.bz2", "d.jsonl.xz"):
        (pool / name).unlink()
        rows = [{"id": f"{name}-{i}", "meta": {"body": t}} for i, t in enumerate([fx.filler(0), fx.full_copy(fx.BRIDGE)])]
        fx.write_jsonl(pool / name, rows)
    r = contam("detect", "--pool", pool, "--out", tmp_path / "o", "--evals-dir", evals, "--content-key", "meta.body",
               env_extra=home)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "skipped README.md: not a pool file" in r.stdout
    con = duckdb.connect(str(tmp_path / "o" / "contam.duckdb"), read_only=True)
    stats = dict(con.execute("select shard, rejected from shard_stats").fetchall())
    assert stats == {"a.json": 0, "b.jsonl.zstd": 0, "c.json.bz2": 0, "d.jsonl.xz": 0, "e.jsonl": 0}
    flagged = con.execute("select shard, line, suite from matches where flagged order by shard").fetchall()
    assert flagged == [(s, 1, "toy_qa") for s in sorted(stats)]
