"""Benchmark task registry: one TOML spec per task under data/tasks/.

A spec names the task, its kind (``qa`` / ``multiple-choice`` / ``code``), its
language, the source file(s) of each split (relative to the benchmark folder)
and the field mapping.  See data/tasks/README.md for the format.
"""

from __future__ import annotations

import csv
import glob
import gzip
import importlib
import io
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

KINDS = ("qa", "multiple-choice", "code")


class TaskSpecError(ValueError):
    pass


@dataclass(frozen=True)
class SplitSpec:
    name: str
    file: str  # path or glob relative to the benchmark folder
    where_field: str | None = None  # keep rows whose integer field lies in [where_min, where_max]
    where_min: int | None = None
    where_max: int | None = None
    subject_from_file: bool = False  # MMLU: one file per subject, subject = file stem minus subject_suffix
    subject_suffix: str = ""
    embedded: str | None = None  # "module:ATTRIBUTE" naming a file shipped inside a Python package


@dataclass(frozen=True)
class Fields:
    question: str
    answer: str | None = None
    passage: str | None = None
    choices: tuple[str, ...] = ()  # one list-valued field, or several scalar fields (CSV)
    gold: str | None = None  # index (0-based int) or letter of the correct choice
    solution: str | None = None  # code tasks: the reference solution (derived `<task>_solution` suite)
    strip_prefix: str = ""  # removed from the start of the question (e.g. "Question: ")
    answer_format: str = "text"  # text | number (floats that are integers print without ".0")


@dataclass(frozen=True)
class TaskSpec:
    name: str
    kind: str
    language: str
    fields: Fields
    splits: tuple[SplitSpec, ...]
    description: str = ""
    solution_suite: bool = False
    spec_path: str = ""

    @property
    def derived_suite(self) -> str | None:
        return f"{self.name}_solution" if self.solution_suite else None


@dataclass
class SourceRow:
    instance_index: int  # 0-based row index within the split's source file
    row: dict
    subject: str | None
    source_file: str


@dataclass
class SplitAvailability:
    task: str
    split: str
    files: list[str] = field(default_factory=list)
    origin: str = "missing"  # benchmarks | embedded | missing


def load_spec(path: Path) -> TaskSpec:
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TaskSpecError(f"{path}: cannot read task spec: {exc}") from exc
    try:
        f = raw["fields"]
        choices = f.get("choices", ())
        if isinstance(choices, str):
            choices = (choices,)
        fields = Fields(
            question=f["question"],
            answer=f.get("answer"),
            passage=f.get("passage"),
            choices=tuple(choices),
            gold=f.get("gold"),
            solution=f.get("solution"),
            strip_prefix=f.get("strip_prefix", ""),
            answer_format=f.get("answer_format", "text"),
        )
        splits = []
        for s in raw["splits"]:
            where = s.get("where", {})
            splits.append(
                SplitSpec(
                    name=s["name"],
                    file=s["file"],
                    where_field=where.get("field"),
                    where_min=where.get("min"),
                    where_max=where.get("max"),
                    subject_from_file=s.get("subject_from_file", False),
                    subject_suffix=s.get("subject_suffix", ""),
                    embedded=s.get("embedded"),
                )
            )
        spec = TaskSpec(
            name=raw["name"],
            kind=raw["kind"],
            language=raw.get("language", "en"),
            description=raw.get("description", ""),
            fields=fields,
            splits=tuple(splits),
            solution_suite=raw.get("solution_suite", raw["kind"] == "code"),
            spec_path=str(path),
        )
    except KeyError as exc:
        raise TaskSpecError(f"{path}: missing required key {exc}") from exc
    if spec.kind not in KINDS:
        raise TaskSpecError(f"{path}: kind must be one of {KINDS}, got {spec.kind!r}")
    if spec.kind == "multiple-choice" and not spec.fields.choices:
        raise TaskSpecError(f"{path}: a multiple-choice task needs fields.choices")
    if spec.solution_suite and not spec.fields.solution:
        raise TaskSpecError(f"{path}: a solution suite needs fields.solution")
    return spec


def load_registry(tasks_dir: Path, only: list[str] | None = None) -> list[TaskSpec]:
    tasks_dir = Path(tasks_dir)
    if not tasks_dir.is_dir():
        raise TaskSpecError(f"task folder not found: {tasks_dir}")
    specs = [load_spec(p) for p in sorted(tasks_dir.glob("*.toml"))]
    names = [s.name for s in specs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise TaskSpecError(f"duplicate task names in {tasks_dir}: {sorted(dup)}")
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise TaskSpecError(f"unknown task(s) {unknown}; known: {names}")
        specs = [s for s in specs if s.name in only]
    return specs


def _embedded_path(ref: str) -> Path | None:
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    p = Path(getattr(module, attr, ""))
    return p if p.is_file() else None


def locate(spec: TaskSpec, split: SplitSpec, benchmarks_dir: Path | None) -> SplitAvailability:
    """Where a split's rows come from: the benchmark folder, else a package's embedded copy."""
    avail = SplitAvailability(task=spec.name, split=split.name)
    if benchmarks_dir is not None:
        files = sorted(glob.glob(str(Path(benchmarks_dir) / split.file)))
        if files:
            avail.files, avail.origin = files, "benchmarks"
            return avail
    if split.embedded:
        p = _embedded_path(split.embedded)
        if p is not None:
            avail.files, avail.origin = [str(p)], "embedded"
    return avail


def _open_text(path: str) -> io.TextIOBase:
    if path.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace", newline="")


def iter_rows(path: str) -> Iterator[tuple[int, dict | None, str | None]]:
    """(row index, row or None, error) for every row of a .jsonl(.gz) or .csv file."""
    name = path[:-3] if path.endswith(".gz") else path
    with _open_text(path) as fh:
        if name.endswith(".csv"):
            for i, row in enumerate(csv.DictReader(fh)):
                yield i, dict(row), None
            return
        for i, line in enumerate(fh):
            if not line.strip():
                yield i, None, "empty line"
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                yield i, None, f"malformed JSON: {exc.msg}"
                continue
            if not isinstance(obj, dict):
                yield i, None, "row is not a JSON object"
                continue
            yield i, obj, None


def iter_split(spec: TaskSpec, split: SplitSpec, avail: SplitAvailability) -> Iterator[tuple[SourceRow | None, str | None]]:
    """Rows of one split (after the split's `where` filter); bad rows come back as (None, reason)."""
    for path in avail.files:
        subject = None
        if split.subject_from_file:
            stem = Path(path).name.split(".")[0]
            subject = stem[: -len(split.subject_suffix)] if split.subject_suffix and stem.endswith(split.subject_suffix) else stem
        for idx, row, err in iter_rows(path):
            if row is None:
                yield None, f"{Path(path).name}:{idx}: {err}"
                continue
            if split.where_field is not None:
                try:
                    v = int(row[split.where_field])
                except (KeyError, TypeError, ValueError):
                    yield None, f"{Path(path).name}:{idx}: no integer field {split.where_field!r}"
                    continue
                if (split.where_min is not None and v < split.where_min) or (split.where_max is not None and v > split.where_max):
                    continue
            yield SourceRow(instance_index=idx, row=row, subject=subject, source_file=path), None
