"""Reference set: every benchmark row of every split turned into reference records.

Rules (decon's reference preprocessing plus seed 003's derived suites):
- one record per row; multiple choice expands to one record per choice (`is_correct`);
- decon reference files are already one record per line: task and suite are the line's
  `eval_key`, the instance its `eval_instance_index` (else the line), and `split`,
  `is_correct`, `doc_id`, `fingerprint` are kept as the file says;
- code tasks add a derived suite `<task>_solution` whose question is the reference solution
  alone (`derived_suites`);
- beyond decon (`answer_suites`): a qa task whose median answer has at least `answer_suite_min_words`
  words adds `<task>_answer`, whose question is an answer of that length alone (GSM8K's worked
  solutions), held for review like the solution suites;
- beyond decon (`reference_overlap`): every record carries the JSON list of its instance's twins
  (overlap.py);
- a suite whose answers are all the same string is indexed on its question alone (`same_answer_rule`);
- a record is not indexed when passage+question+answer has fewer than `eval_min_token_length`
  non-space tokens or fewer than `eval_min_unique_words` unique words, or when it duplicates an
  earlier record of its suite: by content (first 16 hex of sha256 over passage+question+answer),
  or, with `dedup_by="fingerprint"` as decon does, by the record's own fingerprint field only.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.ipc as pa_ipc

from contam_assets.detector.config import DetectConfig
from contam_assets.sources import reference_filters
from contam_assets.sources.fields import FieldError, Missing, as_text, as_text_list, get_path
from contam_assets.sources.kept_tokens import TokenWriter
from contam_assets.sources.reference_filters import _filter_chunk, fingerprint  # noqa: F401 - reference.fingerprint
from contam_assets.sources.registry import TaskSpec, TaskSpecError, locate, split_rows
from contam_assets.store.files import temp_path

RECORD_SCHEMA = {
    "record_id": pl.Int32,
    "task": pl.Utf8,
    "suite": pl.Utf8,
    "split": pl.Utf8,
    "instance_index": pl.Int32,
    "subject": pl.Utf8,
    "choice_index": pl.Int32,
    "is_correct": pl.Boolean,
    "kind": pl.Utf8,
    "language": pl.Utf8,
    "derived": pl.Boolean,
    "question": pl.Utf8,
    "answer": pl.Utf8,
    "passage": pl.Utf8,
    "fingerprint": pl.Utf8,
    "indexed": pl.Boolean,
    "skip_reason": pl.Utf8,
    "source_file": pl.Utf8,
    "source_line": pl.Int32,  # line (CSV: row) of the record in source_file
    "eval_key": pl.Utf8,  # decon's name of the eval dataset (our suite)
    "eval_doc_id": pl.Int64,  # decon reference files: the record's doc_id
    "twins": pl.Utf8,  # beyond decon: JSON list of {instance, relation} (reference_overlap part), else null
}


@dataclass
class ReferenceStats:
    availability: list[dict] = field(default_factory=list)  # task, split, origin, files, rows
    bad_rows: list[str] = field(default_factory=list)
    same_answer_suites: list[str] = field(default_factory=list)
    answer_suites: list[str] = field(default_factory=list)
    overlap: pl.DataFrame | None = None  # reference_overlap pairs (overlap.OVERLAP_SCHEMA), when the part is on
    # rows that never became records, per (task, split, reason): unreadable, no_question; and notes that are not
    # skips (no_answer: indexed on the question alone), kept apart in `notes`
    row_skips: dict[tuple[str, str, str], int] = field(default_factory=dict)
    notes: dict[tuple[str, str, str], int] = field(default_factory=dict)

    def skip(self, task: str, split: str, reason: str, counted_as_instance: bool = True) -> None:
        into = self.row_skips if counted_as_instance else self.notes
        into[(task, split, reason)] = into.get((task, split, reason), 0) + 1


def _text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _format_answer(value, fmt: str) -> str | None:
    if value is None:
        return None
    if fmt == "number":
        try:
            f = float(value)
            return str(int(f)) if f.is_integer() else repr(f)
        except (TypeError, ValueError):
            return _text(value)
    return _text(value)


def _gold_index(value, n_choices: int, base: int = 0) -> int | None:
    if value is None or value == "" or isinstance(value, bool):
        return None
    if isinstance(value, str) and len(value.strip()) == 1 and value.strip().isalpha():
        return ord(value.strip().upper()) - ord("A")
    try:
        idx = int(value) - base
    except (TypeError, ValueError):
        return None
    return idx if 0 <= idx < n_choices else None


def _choices(row: dict, spec: TaskSpec) -> list[str]:
    fields = spec.fields.choices
    if len(fields) == 1:  # one list-valued field (HF's {"text": [...], "label": [...]} reads as its text)
        return as_text_list(get_path(row, fields[0]), fields[0])
    return [as_text(get_path(row, f), f) or "" for f in fields]


def _field(row: dict, path: str | None, required: bool = True):
    """The text at ``path`` (None when there is no path, or a null value); a missing path is an error when
    ``required``, else None."""
    if not path:
        return None
    try:
        value = get_path(row, path)
    except Missing:
        if required:
            raise
        return None
    return as_text(value, path)


UNSPECIFIED_SPLIT = "unspecified"  # a decon reference record without a split


@functools.lru_cache(maxsize=4096)
def _file_name(path: str) -> str:
    """A source file's name, once per file (names repeated on every record held once: a registry of millions)."""
    return sys.intern(Path(path).name)


def decon_record(src, spec: TaskSpec) -> dict | None:
    """One reference record from a decon reference line, its fields read as decon reads them."""
    row = src.row
    name = _file_name(src.source_file)
    # decon rule: eval_key, else eval_name, else the file stem (the name without its last suffix)
    eval_key = sys.intern(next((row[k] for k in ("eval_key", "eval_name") if isinstance(row.get(k), str)), name.rsplit(".", 1)[0]))
    index = row.get("eval_instance_index")
    text = lambda k: row[k] if isinstance(row.get(k), str) else None  # noqa: E731
    doc_id = row.get("doc_id")
    return dict(
        task=eval_key, suite=eval_key, eval_key=eval_key, split=sys.intern(text("split") or UNSPECIFIED_SPLIT),
        # decon rule: eval_instance_index, else the line number
        instance_index=index if isinstance(index, int) and not isinstance(index, bool) and index >= 0 else src.source_line,
        subject=None, kind=spec.kind, language=spec.language, derived=False,
        question=text("question") or "", answer=text("answer") or None, passage=text("passage") or None,
        choice_index=None, is_correct=row["is_correct"] if isinstance(row.get("is_correct"), bool) else None,
        fingerprint=text("fingerprint"), eval_doc_id=doc_id if isinstance(doc_id, int) and not isinstance(doc_id, bool) else None,
        source_file=name, source_line=src.source_line,
    )


def rows_for_task(spec: TaskSpec, benchmarks_dir: Path | None, stats: ReferenceStats,
                  derived_suites: bool = True, progress=None) -> list[dict]:
    """Raw reference records of one task (before the same-answer rule and the decon filters); ``progress``: a
    build_budget.BuildProgress told of the files and rows read."""
    return list(iter_task_rows(spec, benchmarks_dir, stats, derived_suites, progress))


def iter_task_rows(spec: TaskSpec, benchmarks_dir: Path | None, stats: ReferenceStats,
                   derived_suites: bool = True, progress=None):
    """``rows_for_task``'s records one at a time (a decon folder is one task of millions of records)."""
    f = spec.fields
    for split in spec.splits:
        avail = locate(spec, split, benchmarks_dir)
        n_rows = 0
        for src in split_rows(spec, split, avail, stats, progress):
            if spec.format == "decon":
                yield (decon_record(src, spec))
                n_rows += 1
                continue
            row = src.row
            where = f"{spec.name}/{split.name} row {src.instance_index} ({Path(src.source_file).name}:{src.source_line})"
            try:
                question = _field(row, f.question)
                passage = _field(row, f.passage)
                choices = _choices(row, spec) if spec.kind == "multiple-choice" else None
                gold_raw = get_path(row, f.gold) if choices is not None and f.gold else None
                labels = as_text_list(get_path(row, f.gold_labels), f.gold_labels) if choices is not None and f.gold_labels else None
                answer = _field(row, f.answer) if choices is None else None
                solution = _field(row, f.solution, required=False) if spec.derived_suite and derived_suites else None
            except FieldError as exc:  # the spec does not fit the rows: one line naming task, split, row, field
                raise TaskSpecError(f"{where}: {exc}") from None
            if question is None or not question.strip():
                stats.skip(spec.name, split.name, "no_question")
                continue
            n_rows += 1
            if f.strip_prefix and question.startswith(f.strip_prefix):
                question = question[len(f.strip_prefix):]
            base = dict(
                task=spec.name, split=split.name, instance_index=src.instance_index, subject=src.subject,
                kind=spec.kind, language=spec.language, passage=passage, source_file=_file_name(src.source_file),
                source_line=src.source_line, fingerprint=None, eval_doc_id=None,
            )
            if choices is not None:
                if labels is not None:  # the gold names a label (ARC: "A".."D", or "1".."4" on some rows)
                    gold = labels.index(str(gold_raw).strip()) if str(gold_raw).strip() in labels else None
                else:
                    gold = (f.gold_index if f.gold_index is not None and f.gold_index < len(choices) else
                            _gold_index(gold_raw, len(choices), f.gold_base) if f.gold else None)
                for ci, choice in enumerate(choices):
                    yield (dict(base, suite=spec.name, eval_key=spec.name, derived=False, question=question,
                                        answer=choice, choice_index=ci, is_correct=(None if gold is None else ci == gold)))
            else:
                if f.answer and answer is None:
                    stats.skip(spec.name, split.name, "no_answer", counted_as_instance=False)
                answer = _format_answer(answer, f.answer_format)
                yield (dict(base, suite=spec.name, eval_key=spec.name, derived=False, question=question,
                                    answer=answer, choice_index=None, is_correct=None))
            if spec.derived_suite and derived_suites:
                if solution and solution.strip():
                    # seed 003: derived suite whose question is the reference solution alone
                    yield (dict(base, suite=spec.derived_suite, eval_key=spec.derived_suite, derived=True,
                                        question=solution, answer=None, passage=None, choice_index=None, is_correct=None))
        stats.availability.append(dict(task=spec.name, split=split.name, origin=avail.origin,
                                       files=len(avail.files), rows=n_rows))


def add_answer_suites(records: list[dict], cfg: DetectConfig, stats: ReferenceStats) -> list[dict]:
    """Derived `<task>_answer` records (beyond decon, the `answer_suites` part) for qa tasks with long answers."""
    by_task: dict[str, list[dict]] = {}
    for r in records:
        if r["kind"] == "qa" and not r["derived"]:
            by_task.setdefault(r["task"], []).append(r)
    out = []
    for task, recs in by_task.items():
        lengths = sorted(len((r["answer"] or "").split()) for r in recs)
        # beyond decon rule: a task whose median answer has >= answer_suite_min_words words gets `<task>_answer`
        if not lengths or lengths[len(lengths) // 2] < cfg.answer_suite_min_words:
            continue
        stats.answer_suites.append(f"{task}_answer")
        for r in recs:
            if len((r["answer"] or "").split()) >= cfg.answer_suite_min_words:
                out.append(dict(r, suite=f"{task}_answer", derived=True, question=r["answer"], answer=None, passage=None))
    return out


def apply_same_answer_rule(records: list[dict], stats: ReferenceStats) -> None:
    # seed 003: a suite whose answers are all the same string is indexed on its question alone
    by_suite: dict[str, set] = {}
    counts: dict[str, int] = {}
    for r in records:
        by_suite.setdefault(r["suite"], set()).add(r["answer"])
        counts[r["suite"]] = counts.get(r["suite"], 0) + 1
    for suite, answers in by_suite.items():
        if counts[suite] > 1 and len(answers) == 1 and None not in answers:
            stats.same_answer_suites.append(suite)
            for r in records:
                if r["suite"] == suite:
                    r["answer"] = None


FILTER_CHUNK = 10_000  # records whose texts are cleaned and tokenized at once (bounds the filters' memory)
COLUMNS_CHUNK = 50_000  # records held as Python dicts at once while the set is read into columns


def apply_decon_filters(records: list[dict], cfg: DetectConfig, progress=None) -> None:
    """The decon filters of every record, in record order, ``FILTER_CHUNK`` records at a time (a record's token
    count depends on its own texts only; the duplicate check carries its seen keys from chunk to chunk).
    ``progress(done, total)``: called after each chunk."""
    seen: dict[str, set] = {}
    for start in range(0, len(records), FILTER_CHUNK):
        _filter_chunk(records[start:start + FILTER_CHUNK], cfg, seen)
        if progress is not None:
            progress(min(start + FILTER_CHUNK, len(records)), len(records))


def build_reference_set(specs: list[TaskSpec], benchmarks_dir: Path | None, cfg: DetectConfig,
                        progress=None) -> tuple[pl.DataFrame, ReferenceStats]:
    """``progress``: a build_budget.BuildProgress (lines during a long build), or None.

    The records are held in columns (polars), at most ``COLUMNS_CHUNK`` of them as Python dicts at once: rows
    are read into dicts and turned into tables of that many, and the same-answer rule and the decon filters then
    run over those tables in record order, a table's dicts at a time (the per-suite state they need, answers
    seen and fingerprints kept, carried across).  The answer suites and the reference overlap need every record
    at once: with either on, the set is built as one list of dicts (``build_reference_set_whole``, the plain
    definition, which gives the same table).  ``write_reference_set`` gives the same table as files, holding
    one table of ``COLUMNS_CHUNK`` records at a time."""
    if cfg.answer_suites or cfg.reference_overlap:
        return build_reference_set_whole(specs, benchmarks_dir, cfg, progress)
    stats, suites = ReferenceStats(), {}
    parts = list(_read_parts(specs, benchmarks_dir, cfg, stats, suites, progress))
    same = _same_answer_suites(suites, stats)
    total, seen, done = sum(p.height for p in parts), {}, 0
    for i, part in enumerate(parts):
        parts[i] = filtered_part(part, same, cfg, seen, done, total, progress)
        done += part.height
    if not parts:
        return pl.DataFrame(schema=RECORD_SCHEMA), stats
    df = pl.concat(parts, how="vertical", rechunk=False)  # no second copy of every text
    del parts
    return df, stats


def write_reference_set(specs: list[TaskSpec], benchmarks_dir: Path | None, cfg: DetectConfig, folder: Path,
                        progress=None, workers: int = 1) -> tuple[int, ReferenceStats]:
    """``build_reference_set``'s table written to ``records.parquet`` and ``records.arrow`` in ``folder``
    (`artifacts.RecordsWriter`), ``COLUMNS_CHUNK`` records held at a time: the records as read are spilled to a
    temporary Arrow file there (the same-answer rule needs every answer of a suite before the filters run), then
    read back a table at a time, filtered and written.  ``workers``: processes that compute the filters' order-free
    part of the tables (`reference_filters.FilterPool`; 0 = every core, 1 = this process), the duplicate check
    applied here in record order: the same files.  The answer suites and the reference overlap need every record at
    once: with either on, the table is built whole and written.  Returns the number of records."""
    from contam_assets.store.artifacts import RecordsWriter, write_records

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if cfg.answer_suites or cfg.reference_overlap:
        df, stats = build_reference_set_whole(specs, benchmarks_dir, cfg, progress)
        write_records(folder, df)
        return df.height, stats
    stats, suites = ReferenceStats(), {}
    raw = temp_path(folder / "raw.arrow")
    try:
        writer, total = None, 0
        with reference_filters.FilterPool(cfg, workers) as filters, pa.OSFile(str(raw), "wb") as sink:
            for part in _read_parts(specs, benchmarks_dir, cfg, stats, suites, progress):
                table = part.to_arrow(compat_level=pl.CompatLevel.newest())
                writer = writer or pa_ipc.new_file(sink, table.schema)
                writer.write_table(table)
                total += part.height
                if total > COLUMNS_CHUNK:  # a second table: the workers start while the rest is read
                    filters.start()
            if writer is not None:
                writer.close()
            same = _same_answer_suites(suites, stats)
            # the token ids the filters made kept beside the records: the index build reads them instead of tokenizing
            with TokenWriter(folder, cfg) as ids, RecordsWriter(folder, RECORD_SCHEMA) as out:
                if writer is not None:
                    with pa.OSFile(str(raw), "rb") as src:  # read, not mapped: one table's pages at a time
                        reader = pa_ipc.open_file(src)
                        seen: dict[str, set] = {}
                        ahead = filters.verdicts(raw, list(range(reader.num_record_batches)), same, FILTER_CHUNK, ids=True)
                        for i, verdicts in enumerate(ahead):
                            part, chunks = pl.from_arrow(reader.get_batch(i)), []
                            out.write(filtered_part(part, same, cfg, seen, out.rows, total, progress, chunks, verdicts))
                            ids.add(chunks)
                            del part, chunks, verdicts
        return out.rows, stats
    finally:
        raw.unlink(missing_ok=True)


def _read_parts(specs: list[TaskSpec], benchmarks_dir: Path | None, cfg: DetectConfig, stats: ReferenceStats,
                suites: dict, progress):
    """The records as read, tables of ``COLUMNS_CHUNK`` (record order); the same-answer rule's state per suite
    kept in ``suites``: suite -> [records, first answer, every answer equal to the first]."""
    recs: list[dict] = []
    for spec in specs:
        for r in iter_task_rows(spec, benchmarks_dir, stats, derived_suites=cfg.derived_suites, progress=progress):
            recs.append(r)
            if cfg.same_answer_rule:
                st = suites.get(r["suite"])
                if st is None:
                    suites[r["suite"]] = [1, r["answer"], True]
                else:
                    st[0] += 1
                    st[2] = st[2] and r["answer"] == st[1]
            if len(recs) == COLUMNS_CHUNK:
                yield pl.DataFrame(recs, schema=RECORD_SCHEMA)
                recs = []
    if recs:
        yield pl.DataFrame(recs, schema=RECORD_SCHEMA)


def _same_answer_suites(suites: dict, stats: ReferenceStats) -> list[str]:
    # seed 003: a suite whose answers are all the same string is indexed on its question alone
    same = [suite for suite, (n, first, equal) in suites.items() if n > 1 and equal and first is not None]
    stats.same_answer_suites.extend(same)
    return same


def filtered_part(part: pl.DataFrame, same: list[str], cfg: DetectConfig, seen: dict, first_id: int, total: int,
                  progress, ids_out: list | None = None, verdicts=None) -> pl.DataFrame:
    """One table of read records with the same-answer rule and the decon filters applied (``seen``: the
    duplicate check's state, carried from table to table) and its record ids from ``first_id``; ``ids_out``: given,
    the token ids of each of its chunks appended; ``verdicts``: the filters' order-free part of the table computed
    in a worker (`reference_filters.FilterPool`), else computed here ``FILTER_CHUNK`` records at a time."""
    return reference_filters.filtered_part(part, same, cfg, seen, first_id, total, progress, ids_out, FILTER_CHUNK,
                                           verdicts)


def build_reference_set_whole(specs: list[TaskSpec], benchmarks_dir: Path | None, cfg: DetectConfig,
                              progress=None) -> tuple[pl.DataFrame, ReferenceStats]:
    """``build_reference_set`` with every record a Python dict at once (about 1.7 KB an instance): the plain
    definition, and the path of the answer suites and the reference overlap."""
    stats = ReferenceStats()
    records: list[dict] = []
    for spec in specs:
        records.extend(rows_for_task(spec, benchmarks_dir, stats, derived_suites=cfg.derived_suites, progress=progress))
    if cfg.answer_suites:
        records.extend(add_answer_suites(records, cfg, stats))
    if cfg.same_answer_rule:
        apply_same_answer_rule(records, stats)
    apply_decon_filters(records, cfg, progress=progress.filtered if progress is not None else None)
    for i, r in enumerate(records):
        r["record_id"] = i
    if cfg.reference_overlap and records:
        from contam_assets.detector.overlap import reference_overlap, twins_column

        stats.overlap, twins = reference_overlap(records, cfg.clean_options)
        for r, t in zip(records, twins_column(records, twins)):
            r["twins"] = t
    df = pl.DataFrame(records, schema=RECORD_SCHEMA) if records else pl.DataFrame(schema=RECORD_SCHEMA)
    return df, stats
