"""A decon user's config, reference folder and test scenarios, through `contam detect --decon-config`.

Each test below is one scenario of decon's tests/detect_integration_test.rs or
tests/sampling_test.rs, on our own fixtures (decon_fixtures.py), asserting decon's
expectation on the decon-shaped report files, as decon's harness does (it also forces
eval_min_token_length and eval_min_unique_word_count to 0 on the command line).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import pytest

from contam_assets_tests.e2e.test_cli_data import contam
from contam_assets_tests.support import decon_fixtures as fx

HARNESS = ("--min-tokens", "0", "--min-unique-words", "0")  # decon's tests/common create_default_args


def reports_in(folder: Path) -> list[dict]:
    """Every entry of the report files directly in `folder` (decon's read_report_files)."""
    out = []
    for p in sorted(folder.glob("*.jsonl")):
        out += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return out


def found(reports, training_line: int, eval_line: int) -> bool:
    return any(r["training_line"] == training_line and r["eval_line"] == eval_line for r in reports)


def setup(tmp_path: Path, files: dict[str, list[str]], config: dict, ref_lines=None, **extra) -> tuple[Path, Path]:
    ref, train, reports = tmp_path / "reference", tmp_path / "training", tmp_path / "reports"
    ref.mkdir(parents=True)
    (ref / "toy_reference.jsonl").write_text("\n".join(ref_lines or fx.reference_lines()) + "\n")
    for name, texts in files.items():
        fx.write_jsonl(train / name, texts)
    return fx.write_config(tmp_path / "config.yaml", config, ref, train, reports, **extra), reports


def detect(cfg: Path, *args, tmp_path: Path):
    r = contam("detect", "--decon-config", cfg, *HARNESS, *args, env_extra={"DAGSTER_HOME": str(tmp_path / "home")})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def main_run(tmp_path_factory):
    """decon's default scenarios in one pool: every training fixture beside the others, purify on."""
    tmp = tmp_path_factory.mktemp("decon_main")
    files = {k: v for k, v in fx.training_files().items() if k != "edge_cases.jsonl"}
    for ext in ("gz", "zst", "bz2", "xz"):  # the compressed copies in folders of their own (decon names reports by stem)
        files[f"{ext}/mixed.jsonl.{ext}"] = fx.training_files()["mixed.jsonl"]
    cfg, reports = setup(tmp, files, fx.DEFAULT_CONFIG, purify=True, cleaned_output_dir=str(tmp / "cleaned"))
    r = detect(cfg, tmp_path=tmp)
    return tmp, reports, r


def by_file(reports_dir: Path, name: str) -> list[dict]:
    p = reports_dir / name
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


def test_basic_contamination_detection(main_run):
    _, reports, _ = main_run
    r = by_file(reports, "mixed-simple-0.80.jsonl")
    assert len(r) >= 2
    # the comment line counts as line 0 of the reference file, as in decon: BRIDGE is eval line 1, LEAVES line 2
    assert found(r, 0, 1) and found(r, 3, 2)
    assert {x["training_line"] for x in r} == {0, 3}


def test_no_contamination(main_run):
    _, reports, _ = main_run
    assert not (reports / "clean-simple-0.80.jsonl").exists()


def test_purification(main_run):
    tmp, _, _ = main_run
    cleaned = tmp / "cleaned" / "mixed.jsonl.gz"
    assert cleaned.exists()
    lines = gzip.decompress(cleaned.read_bytes()).decode().splitlines()
    assert len(lines) == 3 and [json.loads(x)["id"] for x in lines] == ["mixed.jsonl:1", "mixed.jsonl:2", "mixed.jsonl:4"]
    # every training file gets its purified copy, clean ones whole
    assert len(gzip.decompress((tmp / "cleaned" / "clean.jsonl.gz").read_bytes()).splitlines()) == 3


@pytest.mark.parametrize("name,line,eval_line", [
    ("middle-simple-0.80.jsonl", 0, 3),  # MOUNTAIN embedded in the middle of a long document
    ("beginning-simple-0.80.jsonl", 0, 1),
    ("end-simple-0.80.jsonl", 0, 1),
], ids=["middle", "beginning", "end"])
def test_match_anywhere_in_the_document(main_run, name, line, eval_line):
    _, reports, _ = main_run
    assert found(by_file(reports, name), line, eval_line)


def test_multiple_matches_in_document(main_run):
    _, reports, _ = main_run
    r = by_file(reports, "multiple-simple-0.80.jsonl")
    assert len(r) >= 2 and sorted(x["eval_line"] for x in r if x["training_line"] == 0) == [1, 2, 3]


@pytest.mark.parametrize("ext", ["gz", "zst", "bz2", "xz"])
def test_compressed_files(main_run, ext):
    tmp, reports, _ = main_run
    r = by_file(reports / ext, "mixed.jsonl-simple-0.80.jsonl")  # decon: the report is named by the file's stem
    assert len(r) >= 2 and found(r, 0, 1) and found(r, 3, 2)
    assert {x["training_file"] for x in r} == ({"mixed.jsonl"} if ext in ("gz", "zst") else {f"mixed.jsonl.{ext}"})
    # our own tables balance for every compression: read = kept + removed + rejected, and the mix keeps the format
    con = duckdb.connect(str(tmp / "reports-contam" / "contam.duckdb"), read_only=True)
    read, kept, removed, rejected = con.execute("select read, kept, removed, rejected from shard_stats where shard = ?",
                                                [f"{ext}/mixed.jsonl.{ext}"]).fetchone()
    written = con.execute("select written from mix_stats where shard = ?", [f"{ext}/mixed.jsonl.{ext}"]).fetchone()[0]
    assert (read, kept, removed, rejected, written) == (5, 3, 2, 0, 3)
    from contam_assets.store.pool import read_shard

    mix = tmp / "reports-contam" / "mix" / ext / f"mixed.jsonl.{ext}"
    assert [d.doc_id for d in read_shard(mix, "m")] == [f"mixed.jsonl.{ext}:{i}" for i in (1, 2, 4)]


def test_single_character_changes_run(main_run):
    # decon only checks that these run; the entries (if any) must name the BRIDGE item
    _, reports, r = main_run
    for name in ("single_edit", "single_insertion", "single_deletion"):
        assert all(x["eval_line"] == 1 for x in by_file(reports, f"{name}-simple-0.80.jsonl"))


def test_report_fields_are_decons(main_run):
    tmp, reports, r = main_run
    e = by_file(reports, "beginning-simple-0.80.jsonl")[0]
    assert e["eval_key"] == e["eval_dataset"] == "toy_qa" and e["eval_instance_index"] == 0 and e["split"] == "test"
    assert e["fingerprint"] == "toy0000" and e["reference_file"] == "toy_reference.jsonl" and e["method"] == "simple"
    assert e["contamination_score"] == 1.0 and e["idf_overlap"] == 1.0 and e["answer_idf_overlap"] == 1.0
    # decon's markers around the decoded tokens (which start with their space)
    assert "【 in which year was the brooklyn bridge opened to traffic across the east river】" in e["training_overlap_text"]
    assert "⟦" in e["training_overlap_text"] and "⟨" in e["training_overlap_text"]
    assert e["token_length_delta"] == e["cluster_token_length"] - e["eval_token_length"]
    # an unknown key of the config is reported, not dropped silently
    assert "unknown key(s)" in r.stdout and "answer_threshold" in r.stdout
    # the knobs that produced the tables are stored with them
    con = duckdb.connect(str(tmp / "reports-contam" / "contam.duckdb"), read_only=True)
    got = dict(con.execute("select name, value from detect_settings").fetchall())
    origin = dict(con.execute("select name, origin from detect_settings").fetchall())
    assert got["sample_every"] == "1" and origin["sample_every"].startswith("decon config")
    assert got["eval_min_token_length"] == "0" and origin["eval_min_token_length"] == "set"
    assert got["unescape"] == "false" and got["dedup_by"] == '"fingerprint"'


def test_compare_with_the_decon_shaped_reports(main_run):
    tmp, reports, _ = main_run
    r = contam("compare", reports, tmp / "reports-contam", "--fail-on-difference")
    assert r.returncode == 0 and "agree entry for entry" in r.stdout, r.stdout
    # one entry less on one side: the comparison names it
    edited = tmp / "edited"
    edited.mkdir()
    for p in reports.rglob("*.jsonl"):
        dst = edited / p.relative_to(reports)
        dst.parent.mkdir(parents=True, exist_ok=True)
        lines = p.read_text().splitlines()
        dst.write_text("\n".join(lines[1:] if p.name == "multiple-simple-0.80.jsonl" else lines) + "\n")
    r = contam("compare", tmp / "reports-contam", edited, "--only-in-first", "--json", tmp / "cmp.json")
    assert r.returncode == 0 and "the runs differ" in r.stdout and "multiple.jsonl:0" in r.stdout
    s = json.loads((tmp / "cmp.json").read_text())
    assert s["entries_only_first"] == 1 and s["entries_only_second"] == 0 and not s["identical"]


def test_punctuation_cleaning(tmp_path):
    ref = fx.reference_lines(with_passage=False, with_answer=False)  # question_reference: questions only
    cfg, reports = setup(tmp_path, {"punctuation.jsonl": [fx.punctuation_copy()]}, fx.DEFAULT_CONFIG, ref_lines=ref)
    detect(cfg, tmp_path=tmp_path)
    assert found(reports_in(reports), 0, 1)


def test_threshold_variations(tmp_path):
    edge = {"edge_cases.jsonl": fx.training_files()["edge_cases.jsonl"]}
    counts = {}
    for name, base in (("strict", fx.STRICT_CONFIG), ("lenient", fx.LENIENT_CONFIG)):
        cfg, reports = setup(tmp_path / name, edge, base)
        detect(cfg, tmp_path=tmp_path / name)
        counts[name] = len(reports_in(reports))
    assert counts["lenient"] >= counts["strict"] >= 1


def test_3gram_size_variation(tmp_path):
    cfg, reports = setup(tmp_path, {"mixed.jsonl": fx.training_files()["mixed.jsonl"]}, fx.DEFAULT_CONFIG)
    detect(cfg, "--ngram-size", "3", tmp_path=tmp_path)
    assert reports_in(reports)


def _question_position(text: str) -> int:
    """Token position of the BRIDGE question in the cleaned, tokenized long document."""
    from contam_assets.detector.config import DetectConfig
    from contam_assets.detector.text import clean_text
    from contam_assets.detector.tokenize import get_tokenizer

    cfg = DetectConfig(unescape=False)
    tok = get_tokenizer("cl100k")
    doc = tok.encode(clean_text(text, cfg.clean_options)).tolist()
    q = tok.encode(clean_text(fx.BRIDGE["question"], cfg.clean_options)).tolist()
    return next(i for i in range(len(doc)) if doc[i:i + len(q)] == q)


def test_sampling_hits_contamination(tmp_path):
    doc = fx.long_document()
    pos = _question_position(doc)
    assert pos > 100
    cfg, reports = setup(tmp_path, {"long_document.jsonl": [doc]}, fx.DEFAULT_CONFIG)
    # sampled positions 0, pos, 2*pos, ...: the lookup lands on the question's first n-gram
    detect(cfg, "--sample-every", str(pos), "--question-max-misses", "5", tmp_path=tmp_path)
    r = reports_in(reports)
    assert r and any(x["training_line"] == 0 for x in r)


def test_sampling_misses_contamination(tmp_path):
    cfg, reports = setup(tmp_path, {"long_document.jsonl": [fx.long_document()]}, fx.DEFAULT_CONFIG)
    detect(cfg, "--sample-every", "600", "--question-max-misses", "1", tmp_path=tmp_path)  # only position 0 is looked up
    assert not reports_in(reports)


def test_sampling_with_different_intervals(tmp_path):
    # decon's own scenario names tokenizer_str: word, which decon does not know: it tokenizes byte by byte
    counts = {}
    for name, every, misses in (("moderate", 100, 3), ("dense", 25, 10)):
        base = {"mode": "simple", "content_key": "text", "tokenizer_str": "word", "ngram_size": 5,
                "question_threshold": 0.8, "sample_every_m_tokens": every, "question_max_consecutive_misses": misses}
        cfg, reports = setup(tmp_path / name, {"long_document.jsonl": [fx.long_document()]}, base)
        r = detect(cfg, tmp_path=tmp_path / name)
        assert "byte by byte" in r.stdout
        counts[name] = len(reports_in(reports))
    assert counts["dense"] >= counts["moderate"]
