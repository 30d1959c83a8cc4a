"""Speed work must not change what the detector finds.

The match rows and counters of a planted suite (real GSM8K, HumanEval, GSM-Hard
and MMLU items planted into host text, see throughput_planted.py) were recorded
with the detector as first written, before any performance change, in
throughput_golden.json.  Every later version must reproduce them exactly: same
documents, same instances, same spans, same scores, same flags.

If the detector's *behaviour* is changed on purpose (a new decon rule, a new
task spec), regenerate the file with CONTAM_REGEN_THROUGHPUT_GOLDEN=1 and review
the diff.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from contam_assets.detector.config import DetectConfig
from contam_assets.testing.throughput_planted import as_documents, build_detector, planted_documents, scan_rows

GOLDEN = Path(__file__).with_name("throughput_golden.json")
# eval_* columns repeat the reference record (record_id pins it); training_segments repeats
# training_text split at the pinned spans; training_text is pinned by its digest.
DROP = ("eval_question", "eval_answer", "eval_passage", "training_segments")
CONFIGS = {
    "cl100k": DetectConfig(),
    "cl100k-no-unescape": DetectConfig(unescape=False),
    "word": DetectConfig(tokenizer="word"),
}


def observed(shared_data: Path, name: str) -> dict:
    cfg = CONFIGS[name]
    records, index, ref = build_detector(shared_data, cfg)
    docs = planted_documents(records, shared_data)
    rows, counters = scan_rows(as_documents([t for _, t in docs]), index, ref, cfg)
    for r in rows:
        # columns added after the recording (the thorough preset's): decon's presets give them fixed values
        reason, twins = r.pop("reason"), r.pop("twins")
        assert reason == ("solution_only" if r["suite"].endswith("_solution") else "question+answer"), r
        assert twins is None, r
    rows = [{k: v for k, v in r.items() if k not in DROP} for r in rows]
    for r in rows:
        r["training_text"] = hashlib.sha1(r["training_text"].encode("utf-8")).hexdigest()[:16]
    return {"kinds": [k for k, _ in docs], "counters": counters, "rows": rows}


def _dump(golden: dict) -> str:
    """One match row per line, so a regenerated file diffs readably."""
    c = lambda x: json.dumps(x, sort_keys=True, ensure_ascii=False)  # noqa: E731
    parts = []
    for name in sorted(golden):
        g = golden[name]
        rows = ",\n".join("  " + c(r) for r in g["rows"])
        parts.append(f'{c(name)}: {{"counters": {c(g["counters"])}, "kinds": {c(g["kinds"])}, "rows": [\n{rows}\n]}}')
    return "{\n" + ",\n".join(parts) + "\n}\n"


def _load() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8")) if GOLDEN.exists() else {}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_planted_scan_reproduces_the_recorded_matches(shared_data, name):
    got = json.loads(json.dumps(observed(shared_data, name)))  # same JSON types as the file
    if os.environ.get("CONTAM_REGEN_THROUGHPUT_GOLDEN") == "1":
        golden = _load()
        golden[name] = got
        GOLDEN.write_text(_dump(golden), encoding="utf-8")
    want = _load()[name]
    assert got["kinds"] == want["kinds"], "the planted suite itself changed"
    assert got["counters"] == want["counters"]
    assert len(got["rows"]) == len(want["rows"])
    for g, w in zip(got["rows"], want["rows"]):
        # columns appended since the file was recorded (decon's adjusted score, answer spans, ...) are not in it:
        # every recorded column must be reproduced exactly, and a recorded column may never disappear
        assert set(w) <= set(g), sorted(set(w) - set(g))
        g = {k: g[k] for k in w}
        assert g == w, {k: (g.get(k), w.get(k)) for k in set(g) | set(w) if g.get(k) != w.get(k)}


def test_recorded_suite_exercises_flags_near_misses_and_clean_documents():
    golden = _load()["cl100k"]
    kinds = golden["kinds"]
    flagged = {r["line"] for r in golden["rows"] if r["flagged"]}
    stored = {r["line"] for r in golden["rows"]}
    flagged_kinds = {kinds[i] for i in flagged}
    # verbatim copies, reformatted copies, MC listings and escaped solutions are flagged ...
    assert {"verbatim_qa", "instruct", "case_ws", "mc", "solution_escaped"} <= flagged_kinds
    # ... a question without its answer is stored but not flagged, and near misses are stored too
    assert any(not r["flagged"] and kinds[r["line"]] == "question_only" for r in golden["rows"])
    assert any(0.5 <= r["score"] < r["required_score"] for r in golden["rows"])
    # host text, non-members and fragments of questions give nothing to flag
    assert not any(kinds[i] in ("host", "non_member", "fragments") for i in flagged)
    assert not any(kinds[i] == "host" for i in stored)
    assert sum(k == "host" for k in kinds) >= 30
