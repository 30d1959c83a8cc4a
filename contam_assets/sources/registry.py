"""Benchmark task registry: one TOML spec per task under data/tasks/.

A spec names the task, its kind (``qa`` / ``multiple-choice`` / ``code``), its
language, the source file(s) of each split (relative to the benchmark folder)
and the field mapping.  See data/tasks/README.md for the format.

A spec of ``format = "decon"`` names a folder or glob of decon reference files
instead (one JSON record per line with ``eval_key``, ``eval_instance_index``,
``split``, ``question``, ``answer``, ``passage``, ``is_correct``, ``doc_id``,
``fingerprint``; any of decon's compressions; ``#`` lines skipped), as
``contam detect --evals-dir`` does for a decon ``evals_dir``.
"""

from __future__ import annotations

import csv
import glob
import importlib
import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from contam_assets.sources.hf_files import expand_folder, hub_roots, is_hf_file, iter_hf_rows, json_array_rows
from contam_assets.store.compression import COMPRESSIONS, STREAM_ERRORS, compression_of, open_text

KINDS = ("qa", "multiple-choice", "code")
FORMATS = ("contam", "decon")
# decon's EXPAND_DIRS_EXTENSIONS: files of an evals folder it reads
DECON_REFERENCE_SUFFIXES = (".json", ".jsonl") + COMPRESSIONS


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
    alternatives: tuple[str, ...] = ()  # further paths or globs, tried in order when `file` matches nothing


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
    gold_base: int = 0  # the gold field counts choices from this (1: WinoGrande's "1"/"2", SIQA's "1".."3")
    gold_index: int | None = None  # the gold choice's fixed position (SciQ's correct answer listed last)
    gold_labels: str | None = None  # a list of choice labels the gold names (ARC's choices.label: "A".."D" or "1".."4")


@dataclass(frozen=True)
class Translation:
    """What a task translates (``translation_of`` and ``[translation]`` in its spec; sources/translation_links.py)."""

    of: str  # the source task
    split: str = ""  # the source split ("": the split of the same name)
    splits: tuple[str, ...] = ()  # the translated task's splits it covers (empty: all of them)
    align: str = "index"  # index: item k is the source's item offset + k; id: the rows share an id field
    id: str = ""  # align = "id": the id field (a dotted path) of the translated rows
    source_id: str = ""  # and of the source rows ("": the same path)
    offset: int = 0  # align = "index": the source item the first translated item translates
    limit: int | None = None  # align = "index": over this many source items from offset (None: all the rest)
    unavailable: str = ""  # why the items cannot be aligned (a shipped lm-eval entry): refused when used
    shipped: bool = False  # from the lm-eval table (sources/lm_eval_translations.py), not a spec: skipped without its source


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
    format: str = "contam"  # contam: fields mapped by the spec; decon: decon reference records
    hub: str = ""  # "org/name": split files are relative to that Hub dataset's folder (hf_files.hub_roots)
    translation: Translation | None = None  # the task translates another task's items

    @property
    def derived_suite(self) -> str | None:
        return f"{self.name}_solution" if self.solution_suite else None


@dataclass
class SourceRow:
    instance_index: int  # 0-based row index within the split (counting on across its files, except per subject)
    row: dict
    subject: str | None
    source_file: str
    source_line: int = 0  # 0-based line (CSV: row) within source_file


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
    if raw.get("format", "contam") == "decon":
        return _decon_spec_from(raw, path)
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
            gold_base=f.get("gold_base", 0),
            gold_index=f.get("gold_index"),
            gold_labels=f.get("gold_labels"),
        )
        splits = []
        for s in raw["splits"]:
            where = s.get("where", {})
            files = [s["file"]] if isinstance(s["file"], str) else list(s["file"])
            splits.append(
                SplitSpec(
                    name=s["name"],
                    file=files[0],
                    alternatives=tuple(files[1:]),
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
            hub=raw.get("hub", ""),
            translation=_translation_from(raw, path),
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


def _translation_from(raw: dict, path: Path) -> Translation | None:
    """``translation_of = "task"`` and the optional ``[translation]`` table (split, splits, align, id, source_id,
    offset, limit), checked for their types."""
    of, extra = raw.get("translation_of"), raw.get("translation", {})
    if of is None:
        if extra:
            raise TaskSpecError(f"{path}: [translation] needs translation_of = \"<source task>\"")
        return None
    if not isinstance(of, str) or not of or not isinstance(extra, dict):
        raise TaskSpecError(f"{path}: translation_of must name a task, and translation must be a table")
    unknown = sorted(set(extra) - {"split", "splits", "align", "id", "source_id", "offset", "limit"})
    if unknown:
        raise TaskSpecError(f"{path}: unknown [translation] key(s) {unknown}")
    splits = extra.get("splits", ())
    t = Translation(of=of, split=extra.get("split", ""), splits=(splits,) if isinstance(splits, str) else tuple(splits),
                    align=extra.get("align", "index"), id=extra.get("id", ""), source_id=extra.get("source_id", ""),
                    offset=extra.get("offset", 0), limit=extra.get("limit"))
    if t.align not in ("index", "id"):
        raise TaskSpecError(f"{path}: [translation] align must be \"index\" or \"id\", got {t.align!r}")
    if t.align == "id" and not t.id:
        raise TaskSpecError(f"{path}: [translation] align = \"id\" needs id = \"<field>\"")
    if not isinstance(t.offset, int) or t.offset < 0 or (t.limit is not None and (not isinstance(t.limit, int) or t.limit < 1)):
        raise TaskSpecError(f"{path}: [translation] offset must be an integer >= 0 and limit an integer >= 1")
    return t


def _decon_spec_from(raw: dict, path: Path) -> TaskSpec:
    files = raw.get("files")
    if isinstance(files, str):
        files = [files]
    if not files or not all(isinstance(f, str) for f in files):
        raise TaskSpecError(f"{path}: a decon-format spec needs files = \"<folder or glob>\" (or a list of them)")
    if "name" not in raw:
        raise TaskSpecError(f"{path}: missing required key 'name'")
    return decon_spec(files, name=raw["name"], language=raw.get("language", "en"), description=raw.get("description", ""),
                      spec_path=str(path))


def decon_spec(files: str | list[str], name: str = "decon", language: str = "en", description: str = "",
               spec_path: str = "") -> TaskSpec:
    """A task spec over decon reference files: folders (read recursively) or globs, absolute or relative to
    the benchmark folder.  Its records take their task and suite from each record's ``eval_key``."""
    files = [files] if isinstance(files, str) else list(files)
    return TaskSpec(name=name, kind="qa", language=language, fields=Fields(question="question", answer="answer",
                    passage="passage"), splits=tuple(SplitSpec(name="*", file=f) for f in files),
                    description=description or "decon reference files", solution_suite=False, spec_path=spec_path,
                    format="decon")


def spec_digest(spec: TaskSpec) -> str:
    """Content hash of a spec: its file's bytes, or (a spec made in code, e.g. --evals-dir) its fields."""
    import hashlib

    if spec.spec_path and Path(spec.spec_path).is_file():
        return hashlib.sha256(Path(spec.spec_path).read_bytes()).hexdigest()[:16]
    return hashlib.sha256(repr(spec).encode()).hexdigest()[:16]


def inputs_digest(specs: list[TaskSpec], benchmarks_dir: Path | None, reference_key: dict, version: str,
                  file_hashes: dict | None = None) -> str:
    """What a reference set is built from: the code's version, the knobs that shape it (``reference_key``),
    every spec, and the name and bytes (xxh3-128) of every source file each split reads, in order.
    Two builds with the same digest make the same records, so a run may keep the set it has.
    ``file_hashes`` (path -> [size, mtime_ns, ctime_ns, inode, xxh3-128]), kept by the caller between runs: a file
    whose size, times and inode are those recorded is not read again (a write changes its ctime, whatever the
    mtime is set to afterwards); the dict is updated with every file hashed."""
    import xxhash

    h = xxhash.xxh3_128(json.dumps([version, reference_key], sort_keys=True, default=str).encode())
    for spec in specs:
        h.update(f"\x1e{spec.name}\x1f{spec_digest(spec)}".encode())
        for split in spec.splits:
            avail = locate(spec, split, benchmarks_dir)
            h.update(f"\x1d{split.name}\x1f{avail.origin}".encode())
            for f in avail.files:
                try:
                    st = os.stat(f)
                    h.update(f"\x1c{Path(f).name}\x1f{st.st_size}\x1f{file_digest(f, st, file_hashes)}".encode())
                except OSError as exc:  # the build reports it as bad rows; the digest records that it failed
                    h.update(f"\x1c{Path(f).name}\x1f!{type(exc).__name__}".encode())
    return h.hexdigest()


def file_digest(path, st: os.stat_result, file_hashes: dict | None = None) -> str:
    """xxh3-128 of the file's bytes, taken from ``file_hashes`` where its size, times and inode are those recorded."""
    import xxhash

    key, stamp = os.path.abspath(path), [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    known = (file_hashes or {}).get(key)
    if isinstance(known, list) and len(known) == 5 and known[:4] == stamp:
        return known[4]
    h = xxhash.xxh3_128()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    if file_hashes is not None:
        file_hashes[key] = [*stamp, h.hexdigest()]
    return h.hexdigest()


def source_bytes(specs: list[TaskSpec], benchmarks_dir: Path | None) -> int:
    """Bytes on disk of every source file the specs' splits read: what a reference build parses (a file that
    cannot be read counts 0)."""
    total = 0
    for spec in specs:
        for split in spec.splits:
            for f in locate(spec, split, benchmarks_dir).files:
                try:
                    total += os.path.getsize(f)
                except OSError:
                    pass
    return total


def unknown_tasks_message(unknown: list[str], names: list[str]) -> str:
    """One line: the unknown names, each with its nearest known name where one is close, and the known names."""
    import difflib

    def one(name: str) -> str:
        near = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        return f"{name!r}" + (f" (did you mean {near[0]!r}?)" if near else "")

    return (f"unknown task{'s' if len(unknown) > 1 else ''} {', '.join(one(u) for u in unknown)}; "
            f"known: {', '.join(sorted(names)) or 'none'}")


def load_registry(tasks_dir: Path, only: list[str] | None = None) -> list[TaskSpec]:
    tasks_dir = Path(tasks_dir)
    if not tasks_dir.is_dir():
        raise TaskSpecError(f"task folder not found: {tasks_dir}")
    specs = [load_spec(p) for p in sorted(tasks_dir.glob("*.toml"))]
    names = [s.name for s in specs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise TaskSpecError(f"duplicate task names in {tasks_dir}: {sorted(dup)}")
    yamls = sorted(p.name for p in tasks_dir.iterdir() if p.suffix in (".yaml", ".yml"))
    hint = (f"; {tasks_dir} holds YAML file(s) ({', '.join(yamls[:5])}), which task specs are not: for "
            f"lm-evaluation-harness task YAMLs pass --lm-eval-include {tasks_dir} --lm-eval-tasks NAMES") if yamls else ""
    if not specs and yamls:
        raise TaskSpecError(f"no task spec (*.toml) in {tasks_dir}" + hint)
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise TaskSpecError(unknown_tasks_message(unknown, names) + hint)
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
    if spec.format == "decon":
        avail.files = decon_reference_files(split.file, benchmarks_dir)
        avail.origin = "benchmarks" if avail.files else "missing"
        return avail
    if benchmarks_dir is not None or Path(split.file).is_absolute():
        roots = hub_roots(Path(benchmarks_dir), spec.hub) if spec.hub and benchmarks_dir is not None else []
        for root in roots or [Path(benchmarks_dir or "/")]:
            for pattern in (split.file, *split.alternatives):
                files = split_files(root / pattern, split.name)
                if files:
                    avail.files, avail.origin = files, "benchmarks"
                    return avail
    if split.embedded:
        p = _embedded_path(split.embedded)
        if p is not None:
            avail.files, avail.origin = [str(p)], "embedded"
    return avail


def split_files(pattern: Path, split: str = "") -> list[str]:
    """The files a split's ``file`` names: a path or glob; a folder stands for its data files (hf_files:
    ``save_to_disk``, Hub cache, any folder of data files; a ``DatasetDict.save_to_disk`` folder for its
    subfolder named like the split), or for itself when it holds none (the build then reports it as unreadable)."""
    out: list[str] = []
    for match in sorted(glob.glob(str(pattern))):
        if os.path.isdir(match) and os.path.isfile(os.path.join(match, "dataset_dict.json")):
            sub = os.path.join(match, split)
            out += (expand_folder(Path(sub)) or [sub]) if split and os.path.isdir(sub) else [match]
        elif os.path.isdir(match):
            out += expand_folder(Path(match)) or [match]
        else:
            out.append(match)
    return out


def decon_reference_files(pattern: str, benchmarks_dir: Path | None) -> list[str]:
    """The files of a decon reference folder (recursively, decon's suffixes) or glob, sorted."""
    p = Path(pattern)
    if not p.is_absolute() and benchmarks_dir is not None:
        p = Path(benchmarks_dir) / p
    if p.is_dir():
        out = []
        for root, dirs, names in os.walk(p):
            dirs.sort()
            out += [os.path.join(root, n) for n in names
                    if n.endswith(DECON_REFERENCE_SUFFIXES) and not n.startswith(".")]
        return sorted(out)
    return sorted(f for f in glob.glob(str(p)) if os.path.isfile(f))


def looks_like_decon_references(folder: Path, max_files: int = 20) -> bool:
    """True when a folder holds decon reference files (records with an eval_key), read from their first lines."""
    for path in decon_reference_files(str(folder), None)[:max_files]:
        try:
            for _, row, _ in iter_rows(path, comments=True):
                if row is not None and "eval_key" in row and "question" in row:
                    return True
                break
        except STREAM_ERRORS:
            continue
    return False


def iter_rows(path: str, comments: bool = False) -> Iterator[tuple[int, dict | None, str | None]]:
    """(row index, row or None, error) for every row of a JSONL or CSV file, in any compression.

    ``comments``: lines starting with ``#`` are skipped (decon reference files); they still count as lines.
    """
    if is_hf_file(path):
        yield from iter_hf_rows(path)
        return
    name = path[: -len(compression_of(path))] if compression_of(path) else path
    with open_text(path) as fh:
        if name.endswith(".csv"):
            for i, row in enumerate(csv.DictReader(fh)):
                yield i, dict(row), None
            return
        array, lines = json_array_rows(fh) if name.endswith(".json") else (None, fh)
        for i, obj in enumerate(array or ()):
            yield (i, obj, None) if isinstance(obj, dict) else (i, None, "row is not a JSON object")
        for i, line in enumerate(lines):
            if comments and line.startswith("#"):
                continue  # decon rule: comment lines are skipped
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
    base = 0  # files of one split (without subjects) number their rows on, so every instance has its own index
    for path in avail.files:
        subject = None
        if split.subject_from_file:
            stem = Path(path).name.split(".")[0]
            subject = stem[: -len(split.subject_suffix)] if split.subject_suffix and stem.endswith(split.subject_suffix) else stem
        last = -1
        rows = iter_rows(path, comments=spec.format == "decon")
        while True:
            try:
                idx, row, err = next(rows)
            except StopIteration:
                break
            except STREAM_ERRORS as exc:  # a truncated or corrupt compressed file
                yield None, f"{Path(path).name}: unreadable after row {last} ({type(exc).__name__}: {exc})"
                break
            last = idx
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
            yield SourceRow(instance_index=idx if subject is not None else base + idx, row=row, subject=subject,
                            source_file=path, source_line=idx), None
        if subject is None:
            base += last + 1


def split_rows(spec: TaskSpec, split: SplitSpec, avail: SplitAvailability, stats, progress=None) -> Iterator[SourceRow]:
    """The readable rows of one split (``iter_split``); an unreadable one is counted in ``stats`` (a
    reference.ReferenceStats: a bad row and a skip)."""
    for src, err in iter_split(spec, split, avail):
        if progress is not None:
            progress.row(src.source_file if src is not None else "")
        if src is None:
            stats.bad_rows.append(f"{spec.name}/{split.name}: {err}")
            stats.skip(spec.name, split.name, "unreadable")
            continue
        yield src
