"""Our own fixtures for decon's test scenarios (not a test module).

decon's tests/detect_integration_test.rs and tests/sampling_test.rs check, through
its CLI, that a verbatim copy is found wherever it sits in a document, that clean
text is not, that punctuation does not matter, that several items in one document
are all reported, that every compression is read, that purify drops the flagged
lines, that thresholds and sampling behave as their names say.  The texts here are
written for these tests; each training line is commented with what it holds.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path

import yaml
import zstandard

# -- the reference set (decon's format: one record per line, a comment line first) ----

BRIDGE = dict(
    passage="The Brooklyn Bridge spans the East River between Manhattan and Brooklyn. Designed by John Augustus "
            "Roebling and finished under the direction of his son Washington and daughter-in-law Emily, it was the "
            "longest suspension bridge in the world when it opened.",
    question="In which year was the Brooklyn Bridge opened to traffic across the East River?",
    answer="1883",
)
LEAVES = dict(
    passage="Green plants make their own food. Inside the chloroplasts of their leaves, the energy of sunlight is "
            "used to combine water drawn up from the roots with a gas taken in through tiny pores called stomata.",
    question="Which gas do green plants absorb from the air through their stomata to build sugars during photosynthesis?",
    answer="carbon dioxide",
)
MOUNTAIN = dict(
    passage="Rising almost six thousand metres above the plains of northern Tanzania, this dormant volcano has three "
            "cones and is crowned by glaciers that are shrinking year after year.",
    question="What is the name of the highest mountain on the African continent, the dormant volcano in northern Tanzania?",
    answer="Kilimanjaro",
)
ITEMS = [BRIDGE, LEAVES, MOUNTAIN]


def reference_lines(items=ITEMS, eval_key: str = "toy_qa", with_passage: bool = True, with_answer: bool = True,
                    start_doc_id: int = 100) -> list[str]:
    lines = ["# toy reference set written for the decon scenarios"]
    for i, it in enumerate(items):
        rec = {"eval_key": eval_key, "eval_instance_index": i, "split": "test", "question": it["question"],
               "doc_id": start_doc_id + i, "fingerprint": f"toy{i:04d}"}
        if with_answer:
            rec["answer"] = it["answer"]
        if with_passage:
            rec["passage"] = it["passage"]
        lines.append(json.dumps(rec))
    return lines


# -- training text --------------------------------------------------------------------

FILLER = [
    "Bread dough rises best in a warm kitchen; knead it for ten minutes, cover the bowl with a damp cloth and leave "
    "it until it has doubled in size, which usually takes a little over an hour.",
    "Tomatoes need six to eight hours of direct sun, deep watering twice a week and a stake or cage once the first "
    "trusses of flowers appear, otherwise the stems bend under the weight of the fruit.",
    "The committee agreed to move the spring meeting to the library annex, to publish the minutes a week earlier "
    "than before, and to invite two new members from the neighbouring district.",
    "A good pair of walking boots should be broken in slowly: wear them around the house first, then on short "
    "walks, before taking them on a long hike over rough and rocky ground.",
    "When the ferry was cancelled because of the storm, the passengers waited in the harbour cafe, playing cards "
    "and drinking tea until the captain announced a new departure time for the evening.",
]


def filler(k: int, n: int = 2) -> str:
    return " ".join(FILLER[(k + j) % len(FILLER)] for j in range(n))


def full_copy(it: dict) -> str:
    return f"{it['passage']} Now try this one yourself. {it['question']} The answer is {it['answer']}."


def training_files() -> dict[str, list[str]]:
    """file name -> lines (texts); decon's scenarios, one file each."""
    mixed = [
        filler(0) + " " + full_copy(BRIDGE) + " " + filler(3),  # 0: BRIDGE, passage + question + answer
        filler(1, 3),  # 1: clean
        filler(2, 3),  # 2: clean
        full_copy(LEAVES) + " " + filler(4),  # 3: LEAVES at the start
        filler(3, 3),  # 4: clean
    ]
    return {
        "mixed.jsonl": mixed,
        "clean.jsonl": [filler(0, 3), filler(2, 4), filler(4, 2)],  # no benchmark text at all
        "middle.jsonl": [filler(0, 4) + " " + full_copy(MOUNTAIN) + " " + filler(1, 4)],  # MOUNTAIN mid-document
        "beginning.jsonl": [full_copy(BRIDGE) + " " + filler(2, 4)],  # BRIDGE first
        "end.jsonl": [filler(1, 4) + " " + full_copy(BRIDGE)],  # BRIDGE last
        "multiple.jsonl": [" ".join([full_copy(BRIDGE), filler(0), full_copy(LEAVES), filler(1), full_copy(MOUNTAIN)])],
        # one character changed, added or removed inside the BRIDGE question (decon: may or may not match)
        "single_edit.jsonl": [filler(0) + " " + full_copy(BRIDGE).replace("Brooklyn Bridge opened", "Brooklyn Bridqe opened")],
        "single_insertion.jsonl": [filler(0) + " " + full_copy(BRIDGE).replace("opened to", "opened xto")],
        "single_deletion.jsonl": [filler(0) + " " + full_copy(BRIDGE).replace("traffic across", "trafic across")],
        # edge cases for the threshold scenario: a whole copy, half a question, a question without passage or answer
        "edge_cases.jsonl": [
            full_copy(MOUNTAIN),
            filler(2) + " " + " ".join(LEAVES["question"].split()[:9]) + " " + filler(3),
            filler(4) + " " + BRIDGE["question"] + " " + filler(0),
        ],
    }


def punctuation_copy() -> str:
    """The BRIDGE question with its punctuation changed (decon: cleaning makes it match)."""
    return filler(1) + " In which year -- was the Brooklyn Bridge, opened (to traffic) across the East-River??! " + filler(2)


def long_document() -> str:
    """About 550 tokens; BRIDGE and LEAVES copies inside, far from its start (the sampling scenarios)."""
    return " ".join([filler(0, 4), full_copy(BRIDGE), filler(1, 3), full_copy(LEAVES), filler(2, 2)])


def write_jsonl(path: Path, texts: list[str | dict]) -> None:
    """Lines of {"id", "text"} (a dict is written as it is) in the compression the name implies."""
    rows = (t if isinstance(t, dict) else {"id": f"{path.name}:{i}", "text": t} for i, t in enumerate(texts))
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    elif path.name.endswith((".zst", ".zstd")):
        data = zstandard.ZstdCompressor().compress(data)
    elif path.name.endswith(".bz2"):
        data = bz2.compress(data)
    elif path.name.endswith(".xz"):
        data = lzma.compress(data)
    path.write_bytes(data)


# -- configs (decon's keys) -------------------------------------------------------------

DEFAULT_CONFIG = {
    "mode": "simple", "content_key": "text", "tokenizer_str": "cl100k", "ngram_size": 5, "sample_every_m_tokens": 1,
    # decon's test configs carry keys its Config no longer has; decon ignores them, we report them
    "answer_threshold": 0.8,
}
STRICT_CONFIG = {**DEFAULT_CONFIG, "contamination_score_threshold": 0.95}
LENIENT_CONFIG = {**DEFAULT_CONFIG, "contamination_score_threshold": 0.5}


def write_config(path: Path, base: dict, evals: Path, training: Path, reports: Path, **extra) -> Path:
    cfg = {**base, "evals_dir": str(evals), "training_dir": str(training), "report_output_dir": str(reports), **extra}
    path.write_text(yaml.safe_dump(cfg))
    return path


def same_answer_and_duplicates(evals: Path) -> Path:
    """A decon-format folder of two suites, 120 records each: ``same`` (every answer "yes": the same-answer rule;
    repeated questions and fingerprints: the duplicate rules) and ``mixed`` (short questions, missing answers)."""
    evals.mkdir(parents=True)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()
    lines = {"same": [], "mixed": []}
    for i in range(120):
        q = " ".join(words[(i + k) % len(words)] for k in range(40)) + f" item {i % 90}"  # repeats: duplicates
        lines["same"].append(dict(eval_key="same", eval_instance_index=i, split="test", question=q, answer="yes",
                                  doc_id=i, fingerprint=f"f{i % 100}"))
        lines["mixed"].append(dict(eval_key="mixed", eval_instance_index=i, split="train", question=q if i % 7 else "too short",
                                   answer=None if i % 5 == 0 else f"answer {i} " + " ".join(words[:i % 9]), doc_id=500 + i))
    for name, rows in lines.items():
        (evals / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return evals


def toy_reference(tmp_path: Path, cfg=None):
    """(records, cfg) of the toy reference file written to ``tmp_path / "evals"`` (decon's format)."""
    from contam_assets.detector.config import DetectConfig
    from contam_assets.sources.reference import build_reference_set
    from contam_assets.sources.registry import decon_spec

    evals = tmp_path / "evals"
    evals.mkdir()
    (evals / "toy.jsonl").write_text("\n".join(reference_lines()) + "\n")
    cfg = cfg or DetectConfig()
    records, _ = build_reference_set([decon_spec(str(evals))], None, cfg)
    return records, cfg
