"""Planted contamination on real benchmark data: what decon's rules flag and what they do not."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from contam_assets.defs.resources import DEFAULT_TASKS_DIR
from contam_assets.demo import HostText
from contam_assets.detector.config import preset
from contam_assets.detector.index_build import build_index
from contam_assets.detector.matches import Reference, scan_documents
from contam_assets.detector.scoring import interpolate_threshold, passes_threshold
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import load_registry
from contam_assets.store.pool import Document

TASKS = ["gsm8k", "humaneval", "mmlu", "gsm_hard"]


@pytest.fixture(scope="module")
def detector(shared_data):
    cfg = preset("default")
    records, _ = build_reference_set(load_registry(DEFAULT_TASKS_DIR, TASKS), shared_data, cfg)
    index = build_index(records, cfg)
    return cfg, records, index, Reference(records)


def scan(detector, texts: list[str], cfg=None):
    cfg0, records, index, ref = detector
    docs = [Document(line=i, doc_id=str(i), source=None, text=t, n_bytes=len(t), raw=b"") for i, t in enumerate(texts)]
    rows, _ = scan_documents(docs, "test.jsonl", index, ref, cfg or cfg0)
    return pl.DataFrame(rows) if rows else pl.DataFrame()


def jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="module")
def gsm_test(shared_data):
    return jsonl(shared_data / "gsm8k_test.jsonl")


def host(seed=1):
    h = HostText(seed)
    return h.document(2), h.document(2)


def test_verbatim_gsm8k_test_item_is_flagged_with_its_identity(detector, gsm_test):
    idx = [3, 250, 1318]
    texts = []
    for i in idx:
        before, after = host(i)
        item = gsm_test[i]
        texts.append(f"{before}\n\n{item['question']}\n{item['answer']}\n\n{after}")
    rows = scan(detector, texts)
    for doc, i in enumerate(idx):
        hit = rows.filter((pl.col("line") == doc) & pl.col("flagged") & (pl.col("task") == "gsm8k"))
        assert hit.height >= 1, f"instance {i} not flagged"
        assert hit.filter((pl.col("split") == "test") & (pl.col("instance_index") == i)).height == 1
        best = hit.sort("score", descending=True).row(0, named=True)
        assert best["instance_index"] == i and best["split"] == "test"
        assert best["question_overlap"] > 0.99 and best["answer_overlap"] > 0.99
        assert not best["needs_review"]


def test_case_whitespace_and_line_breaks_still_match(detector, gsm_test):
    item = gsm_test[42]
    q, a = item["question"], item["answer"]
    variants = [
        q.upper() + "\n" + a.upper(),
        "  ".join(q.split()) + "\n\n\n" + "\t".join(a.split()),
        q.replace(" ", "\n") + "\r\n" + a.replace(" ", "\n"),
        q.replace(",", " ,").replace(".", " . ") + " " + a,
    ]
    before, after = host(7)
    rows = scan(detector, [f"{before}\n{v}\n{after}" for v in variants])
    for doc in range(len(variants)):
        hit = rows.filter((pl.col("line") == doc) & pl.col("flagged") & (pl.col("split") == "test") & (pl.col("instance_index") == 42))
        assert hit.height == 1, f"variant {doc} missed"


def test_question_without_answer_is_a_candidate_not_a_flag(detector, gsm_test):
    item = gsm_test[100]
    before, after = host(3)
    rows = scan(detector, [f"{before}\n\n{item['question']}\n\n{after}"])
    row = rows.filter((pl.col("task") == "gsm8k") & (pl.col("split") == "test") & (pl.col("instance_index") == 100))
    assert row.height == 1
    r = row.row(0, named=True)
    # decon: question 0.75 + answer 0.25 * 0 = 0.75 < 0.8 -> stored near miss
    assert not r["flagged"]
    assert r["score"] == pytest.approx(0.75, abs=0.01)
    assert r["score"] >= 0.5  # above the report floor


def test_humaneval_solution_alone_json_escaped_is_caught_for_review(detector, shared_data):
    he = jsonl(shared_data / "HumanEval.jsonl.gz")
    item = he[12]
    escaped = json.dumps({"completion": item["canonical_solution"]})
    code_doc = f"# evaluation log\nrecord = {escaped}\nprint(record)\n"
    rows = scan(detector, [code_doc])
    sol = rows.filter((pl.col("suite") == "humaneval_solution") & (pl.col("instance_index") == 12))
    assert sol.height == 1
    r = sol.row(0, named=True)
    assert r["flagged"] and r["needs_review"]
    # the primary suite never sees it: the prompt is absent
    assert rows.filter((pl.col("suite") == "humaneval") & pl.col("flagged")).height == 0
    # exact decon parity (no unescaping): the escaped copy scores lower
    parity = scan(detector, [code_doc], cfg=detector[0].replace(unescape=False))
    p = parity.filter((pl.col("suite") == "humaneval_solution") & (pl.col("instance_index") == 12)) if parity.height else parity
    assert p.height == 0 or p.row(0, named=True)["score"] < r["score"]


def test_short_instances_need_a_perfect_match(detector, shared_data):
    cfg, records, index, _ = detector
    # length-adjusted bar: 1.0 up to 20 tokens, 0.8 from 50, linear between
    assert interpolate_threshold(20, 20, 50, 0.8) == 1.0
    assert interpolate_threshold(35, 20, 50, 0.8) == pytest.approx(0.9)
    assert interpolate_threshold(50, 20, 50, 0.8) == 0.8
    assert passes_threshold(1.0, 1.0, 0.8) and not passes_threshold(0.99, 1.0, 0.8)
    # a real short MMLU instance: question + correct choice of ~25 tokens
    mmlu = records.filter((pl.col("task") == "mmlu") & pl.col("indexed") & pl.col("is_correct"))
    local_of = {int(r): i for i, r in enumerate(index.record_ids)}
    short = None
    for r in mmlu.iter_rows(named=True):
        i = local_of[r["record_id"]]
        L = int(index.q_len[i]) + int(index.a_unique[i])
        if 22 <= L <= 30 and index.q_unique[i] >= 12 and len(r["question"].split()) >= 12:
            short = r
            break
    assert short is not None
    words = short["question"].split()
    mid = len(words) // 2
    edited = " ".join(words[:mid] + ["zebra"] + words[mid + 1 :])  # one word changed
    before, after = host(11)
    exact, changed = scan(detector, [
        f"{before}\n{short['question']}\n{short['answer']}\n{after}",
        f"{before}\n{edited}\n{short['answer']}\n{after}",
    ]).partition_by("line", as_dict=True).values()
    key = (pl.col("instance_index") == short["instance_index"]) & (pl.col("subject") == short["subject"])
    assert exact.filter(key & pl.col("flagged")).height >= 1
    ch = changed.filter(key)
    assert ch.height == 0 or not ch["flagged"].any()
    if ch.height:
        assert (ch["score"] < ch["required_score"]).all() and (ch["required_score"] > 0.9).all()


def test_gsm_style_problems_that_are_not_gsm8k_items_are_not_flagged(detector, shared_data):
    mock = jsonl(shared_data / "skywork_mock_gsm8k_eval_1419.jsonl")
    texts = [f"{m['question']}\n{m['answer']}" for m in mock[:600]]
    public = jsonl(shared_data / "skywork_mock_gsm8k_test_public.jsonl")
    texts += [m["text"] for m in public[:300]]
    rows = scan(detector, texts)
    flagged = rows.filter(pl.col("flagged") & pl.col("task").is_in(["gsm8k"])) if rows.height else rows
    assert flagged.height == 0, flagged.select("line", "instance_index", "score").head()


def test_gsm_hard_changed_numbers_do_not_flag_gsm8k(detector, shared_data, gsm_test):
    hard = jsonl(shared_data / "gsmhard_v2.jsonl")
    gsm_q = {g["question"] for g in gsm_test}
    changed = [h for h in hard if h["input"] not in gsm_q][:200]
    rows = scan(detector, [h["input"] for h in changed])
    # a changed question alone is neither a GSM8K flag (answer missing, numbers differ) ...
    assert rows.height == 0 or rows.filter(pl.col("flagged") & (pl.col("task") == "gsm8k")).height == 0


def test_multiple_choice_listing_credits_the_options(detector, shared_data):
    cfg, records, index, _ = detector
    grp = records.filter((pl.col("task") == "mmlu") & (pl.col("subject") == "astronomy") & (pl.col("instance_index") == 5)).sort("choice_index")
    q = grp["question"][0]
    opts = "\n".join(f"{'ABCD'[i]}. {t}" for i, t in enumerate(grp["answer"].to_list()))
    rows = scan(detector, [f"Practice quiz.\n{q}\n{opts}\nAnswer: B\n\nMore practice follows."])
    hit = rows.filter((pl.col("task") == "mmlu") & (pl.col("subject") == "astronomy") & (pl.col("instance_index") == 5))
    assert hit.height == 1  # one row per (instance, span): the best of the expanded choices
    if grp.filter(pl.col("indexed")).height:
        assert hit["answer_overlap"][0] is not None


def test_scan_is_deterministic(detector, gsm_test):
    texts = [f"intro\n{g['question']}\n{g['answer']}" for g in gsm_test[:20]]
    a, b = scan(detector, texts), scan(detector, texts)
    assert a.equals(b)
    flagged = a.filter(pl.col("flagged") & (pl.col("task") == "gsm8k"))
    assert sorted(flagged["line"].to_list()) == list(range(20))
    assert flagged["instance_index"].to_list() == sorted(flagged["instance_index"].to_list())
