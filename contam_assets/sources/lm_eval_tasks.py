"""lm-evaluation-harness tasks as a benchmark source (`contam detect --lm-eval-tasks gsm8k,arc_easy,mmlu`).

lm_eval is used as a library: its TaskManager indexes the task YAMLs (the installed ones and an
``--lm-eval-include`` folder), ``load_task_or_group`` builds the task objects (groups and tags expand to their
leaves), and each split's docs come from the task's own ``test_docs`` / ``validation_docs`` / ``training_docs``,
so ``process_docs`` hooks run.  Each doc is mapped through the task:

- question: the longest raw field the rendered prompt (``doc_to_decontamination_query`` where the task sets
  ``should_decontaminate``, else ``doc_to_text``) holds whole after the one normaliser, looked for first among
  the dataset's own fields (before ``process_docs``, where it maps rows one to one), then the processed doc's;
  because templates add words (``Question:``, ``Answer:``, lettered choices, HellaSwag's activity label) that no
  training copy of the item carries and decon indexes the raw question; the rendered prompt itself where no
  field is held whole;
- qa answer: the raw field the target is rendered from (``doc_to_target`` names it, or its template reads it:
  ``gsm8k_cot``'s target is the final number, ``{{answer.split('####')[-1]}}``, but a training copy carries the
  worked solution in ``answer``); the longest such text field, else the rendered target (a ``!function`` target);
- code answer (tasks with ``unsafe_code``, whose target is a test program): the reference solution, the longest raw
  text field that neither the rendered prompt nor the rendered target holds (HumanEval's ``canonical_solution``,
  MBPP's ``code``), also indexed as the ``<task>_solution`` suite as the specs' code tasks are;
- multiple choice: ``doc_to_choice`` as the choices, ``doc_to_target`` (an index, or the gold choice's text) as
  the gold.

Every leaf's rows go to ``<folder>/<task>/<split>.jsonl`` (both names through ``detector.names.path_name``, so no
two leaves share a file) with a task spec over them (``kind`` from the task's output type), so the reference set,
its digest and the skip report treat them as any spec's files.  Offline
unless ``allow_download``: HF_DATASETS_OFFLINE / HF_HUB_OFFLINE are set before ``datasets`` is imported, so a
task resolves from the local Hugging Face cache or its own local ``dataset_path`` / ``data_files``.
Every leaf is reported: its instances per split, or the exact reason it failed.  A task whose build would import
Python from outside the installed lm_eval (an include folder's ``!function``; ``lm_eval_code``) is built only when
that code is trusted.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from contam_assets.detector.names import path_name
from contam_assets.detector.text import clean_text
from contam_assets.sources.lm_eval_code import SANDBOX_HINT, refusal, task_code, template_sandbox
from contam_assets.sources.lm_eval_include import broken_yaml
from contam_assets.sources.lm_eval_translations import translation_for
from contam_assets.sources.registry import Fields, SplitSpec, TaskSpec

MANIFEST = "manifest.json"
ROWS = 2  # how rows are mapped from docs; a manifest of another mapping is read again
SPLIT_ROLES = ("test_split", "validation_split", "training_split", "fewshot_split")


class LmEvalError(ValueError):
    pass


class TaskCodeRefused(LmEvalError):
    """Building the tasks would run code from outside the installed lm_eval, and it was not trusted."""


@dataclass
class LeafReport:
    task: str
    splits: dict[str, int] = field(default_factory=dict)  # split -> docs written
    error: str = ""
    absent: list[str] = field(default_factory=list)  # splits the task names that its dataset does not hold
    untrusted: str = ""  # not built: the file of task code building it would run (untrusted)

    @property
    def ok(self) -> bool:
        return not self.error and sum(self.splits.values()) > 0


def offline(allow_download: bool) -> None:
    if not allow_download:
        for k in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
            os.environ.setdefault(k, "1")


def task_manager(names: list[str], include: str | None):
    """A TaskManager over the include folder alone when it defines every name asked for (indexing the ~14,000
    installed YAMLs takes a minute), else over the installed tasks and the include folder."""
    from lm_eval.tasks import TaskManager

    if include:
        tm = TaskManager(include_path=include, include_defaults=False)
        if all(n in tm.all_tasks for n in names):
            return tm
    return TaskManager(include_path=include) if include else TaskManager()


def _question(task, doc, raw_doc: dict | None = None) -> str:
    cfg = task.config
    rendered = None
    if cfg.should_decontaminate and cfg.doc_to_decontamination_query:
        try:
            rendered = task.doc_to_decontamination_query(doc)
        except (SyntaxError, ValueError):  # lm_eval 0.4.13 literal_evals the rendered query (arc_easy's fails)
            rendered = None
    if rendered is None:
        rendered = task.doc_to_text(doc)
    if not isinstance(rendered, str):
        rendered = str(rendered)
    # the dataset's own fields first (before process_docs rewrote them: HellaSwag's ctx, not "label: Ctx"),
    # each compared with the prompt after the one normaliser, so a capitalised or re-spaced copy still counts
    wrapped = f" {clean_text(rendered)} "
    for fields in ([raw_doc] if raw_doc else []) + [doc]:
        found = [v for v in fields.values() if isinstance(v, str) and clean_text(v) and f" {clean_text(v)} " in wrapped]
        if found:
            return max(found, key=lambda v: len(clean_text(v)))
    return rendered


def _target_fields(task) -> list[str]:
    """The doc fields ``doc_to_target`` reads: the field it names, or the variables its Jinja template reads
    (none for a ``!function`` or a constant)."""
    target = task.config.doc_to_target
    if not isinstance(target, str):
        return []
    if "{{" not in target and "{%" not in target:
        return [target]
    from jinja2 import Environment, TemplateSyntaxError, meta

    try:
        return sorted(meta.find_undeclared_variables(Environment().parse(target)))
    except TemplateSyntaxError:
        return []


def _text_fields(doc, raw_doc: dict | None) -> dict[str, str]:
    """The doc's text fields as the dataset holds them (a raw field over a processed one of the same name)."""
    out = {k: v for k, v in doc.items() if isinstance(v, str) and clean_text(v)}
    out.update({k: v for k, v in (raw_doc or {}).items() if isinstance(v, str) and clean_text(v)})
    return out


def _answer(task, doc, raw_doc: dict | None, question: str, target) -> str | None:
    """A qa task's answer: the longest text field the target is rendered from, else the rendered target."""
    fields = _text_fields(doc, raw_doc)
    found = [fields[n] for n in _target_fields(task) if n in fields and fields[n] != question]
    if found:
        return max(found, key=lambda v: len(clean_text(v)))
    if isinstance(target, list):
        target = target[0] if target else None
    return None if target is None else str(target)


def _solution(task, doc, raw_doc: dict | None, question: str, target) -> str | None:
    """A code task's reference solution: the longest text field that neither the rendered prompt nor the rendered
    target (the test program) holds whole."""
    shown = f" {clean_text(str(task.doc_to_text(doc)))} {clean_text(str(target))} "
    rest = [v for v in _text_fields(doc, raw_doc).values() if v != question and f" {clean_text(v)} " not in shown]
    return max(rest, key=lambda v: len(clean_text(v))) if rest else None


def is_code_task(task) -> bool:
    return bool(getattr(task.config, "unsafe_code", False))


def _row(task, doc, multiple_choice: bool, raw_doc: dict | None = None) -> dict:
    row = {"question": _question(task, doc, raw_doc)}
    target = task.doc_to_target(doc)
    if multiple_choice:
        choices = _choice_texts([str(c) for c in task.doc_to_choice(doc)], doc)
        if isinstance(target, list):
            target = target[0] if target else None
        gold = target if isinstance(target, int) else (choices.index(target) if target in choices else None)
        row.update(choices=choices, gold=gold)
    else:
        solution = _solution(task, doc, raw_doc, row["question"], target) if is_code_task(task) else None
        row["answer"] = solution or _answer(task, doc, raw_doc, row["question"], target)
    return row


def _choice_texts(choices: list[str], doc: dict) -> list[str]:
    """The choices as text: where the task scores letters (MMLU's ``doc_to_choice: [A, B, C, D]``), the doc's
    own list of as many texts, which is what a training copy of the item carries."""
    if not choices or any(len(c.strip()) > 2 for c in choices):
        return choices
    for value in doc.values():
        if isinstance(value, dict):
            value = value.get("text")
        if (isinstance(value, list) and len(value) == len(choices) and all(isinstance(v, str) for v in value)
                and [v.strip() for v in value] != [c.strip() for c in choices]):
            return value
    return choices


def _raw_docs(task, split: str, docs):
    """The split's rows as the dataset holds them, where process_docs mapped them one to one (else None)."""
    if not task.config.process_docs:
        return None
    try:
        raw = task.dataset[split]
        return raw if len(raw) == len(docs) else None
    except (KeyError, TypeError):
        return None


def _splits(task, report: LeafReport) -> list[tuple[str, object]]:
    """(split name, docs) of every split the task defines and its dataset holds, the evaluated one first; docs
    through the task's own methods, so process_docs runs.  A split the dataset lacks goes to ``report.absent``."""
    cfg, out, seen = task.config, [], set()
    have = set(task.dataset.keys()) if hasattr(task.dataset, "keys") else None
    methods = {"test_split": "test_docs", "validation_split": "validation_docs", "training_split": "training_docs",
               "fewshot_split": None}
    for role in SPLIT_ROLES:
        name = getattr(cfg, role, None)
        if not name or name in seen:
            continue
        seen.add(name)
        if have is not None and name not in have:
            report.absent.append(name)
            continue
        method = methods[role]
        if method is None:  # a fewshot split named nowhere else: the dataset's split, through process_docs
            docs = task.dataset[name]
            docs = cfg.process_docs(docs) if cfg.process_docs else docs
        else:
            docs = getattr(task, method)()
        out.append((name, docs))
    return out


def materialize(names: list[str], folder: Path, include: str | None = None, allow_download: bool = False,
                trust_code: bool = False, refuse_code: bool = True) -> tuple[list[TaskSpec], list[LeafReport]]:
    """Task specs over every leaf of the named lm-eval tasks, their rows written under ``folder``; a leaf that
    fails is reported, not raised.  LmEvalError when lm_eval cannot start or a name is unknown.

    A name whose build would import code from outside the installed lm_eval (a ``!function`` of an include
    folder's YAML) is built only with ``trust_code``; else TaskCodeRefused before anything is built, or, with
    ``refuse_code=False`` (listing), a report saying so and nothing built for that name."""
    offline(allow_download)
    if include and not Path(include).is_dir():
        raise LmEvalError(f"lm-eval include folder not found: {include}")
    try:
        tm = task_manager(names, include)
    except ImportError as exc:
        raise LmEvalError(f"lm_eval is not installed ({exc}); pip install lm-eval") from None
    unknown = [n for n in names if n not in tm.all_tasks]
    if unknown:  # a YAML lm_eval skipped in silence may be where it was defined: named
        broken = broken_yaml(include, tm) if include else None
        raise LmEvalError(f"unknown lm-eval task(s) {unknown}" + (f" (include folder {include})" if include else "")
                          + (f"; {broken}" if broken else ""))
    specs, reports = [], []
    code = {} if trust_code else {n: c for n in names if (c := task_code(tm, [n]))}
    if code and refuse_code:
        raise TaskCodeRefused(refusal([c for cs in code.values() for c in cs]))
    folder.mkdir(parents=True, exist_ok=True)
    with template_sandbox(trust_code):  # lm_eval's templates could run Python: sandboxed unless trusted
        for name in names:
            if name in code:
                reports.append(LeafReport(task=name, untrusted=str(code[name][0].module)))
                continue
            for leaf, task in _load(tm, name, reports).items():
                spec, report = _write_leaf(leaf, task, folder)
                reports.append(report)
                if spec is not None:
                    specs.append(spec)
    (folder / MANIFEST).write_text(json.dumps({"names": names, "include": include or "", "rows": ROWS,
                                               "reports": [r.__dict__ for r in reports],
                                               "specs": [dict(name=s.name, kind=s.kind, splits=[[x.name, x.file] for x in s.splits])
                                                         for s in specs]}, indent=1))
    return specs, reports


def load_manifest(folder: Path, names: list[str], include: str | None) -> tuple[list[TaskSpec], list[LeafReport]] | None:
    """The specs and reports of the last read of the same names and include folder, or None."""
    try:
        m = json.loads((folder / MANIFEST).read_text())
        if m["names"] != names or m["include"] != (include or "") or m.get("rows") != ROWS:
            return None
        specs = [_spec(d["name"], d["kind"], [SplitSpec(name=n, file=f) for n, f in d["splits"]])
                 for d in m["specs"]]
        if any(Path(x.file).parts[-2:] != leaf_file(folder, s.name, x.name).parts[-2:] for s in specs for x in s.splits):
            return None  # written under another naming (two names could share a file): read the tasks again
        return specs, [LeafReport(**r) for r in m["reports"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _spec(leaf: str, kind: str, splits: list[SplitSpec]) -> TaskSpec:
    """kind: multiple-choice, qa, or code (the answer is the reference solution, also a ``<task>_solution`` suite)."""
    fields = (Fields(question="question", choices=("choices",), gold="gold") if kind == "multiple-choice" else
              Fields(question="question", answer="answer", solution="answer" if kind == "code" else None))
    return TaskSpec(name=leaf, kind=kind, language="en", fields=fields,
                    splits=tuple(splits), description=f"lm-evaluation-harness task {leaf}", solution_suite=kind == "code",
                    spec_path="", translation=translation_for(leaf))


def children(tm, name: str) -> list[str]:
    """The names a group lists, or the tasks a tag marks (empty for a task), from lm_eval's own index."""
    entry = tm.task_index.get(name)
    kind = getattr(getattr(entry, "kind", None), "name", "")
    if kind == "GROUP":
        return [t for t in (entry.cfg or {}).get("task", []) if isinstance(t, str)]
    if kind == "TAG":
        return sorted(n for n, e in tm.task_index.items() if name in (e.tags or ()))
    return []


def _load(tm, name: str, reports: list[LeafReport], depth: int = 0) -> dict:
    """{leaf name: Task} of a task, group or tag.  lm_eval builds a group whole and fails it for one bad leaf,
    so a group that fails is loaded leaf by leaf: every leaf is reported, the ones that load are kept."""
    try:
        return dict(tm.load([name])["tasks"])
    except Exception as exc:  # noqa: BLE001 - lm_eval raises anything from a task's config or dataset
        subs = children(tm, name) if depth < 8 else []
        if not subs:
            reports.append(LeafReport(task=name, error=_reason(exc)))
            return {}
    out: dict = {}
    for sub in subs:
        out.update(_load(tm, sub, reports, depth + 1))
    return out


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    hint = (" (a split the task names is not in its dataset)" if isinstance(exc, KeyError) else
            f" ({SANDBOX_HINT})" if type(exc).__name__ == "SecurityError" else "")
    return f"{type(exc).__name__}: {text[:300]}{hint}"


def _write_leaf(leaf: str, task, folder: Path) -> tuple[TaskSpec | None, LeafReport]:
    report = LeafReport(task=leaf)
    mc = task.OUTPUT_TYPE == "multiple_choice" if hasattr(task, "OUTPUT_TYPE") else task.config.output_type == "multiple_choice"
    splits = []
    try:
        for split, docs in _splits(task, report):
            path = leaf_file(folder, leaf, split)
            path.parent.mkdir(parents=True, exist_ok=True)
            n = 0
            with open(path, "w", encoding="utf-8") as fh:
                raws = _raw_docs(task, split, docs)
                for i, doc in enumerate(docs):
                    fh.write(json.dumps(_row(task, doc, mc, raws[i] if raws is not None else None), ensure_ascii=False) + "\n")
                    n += 1
            report.splits[split] = n
            splits.append(SplitSpec(name=split, file=str(path)))
    except Exception as exc:  # noqa: BLE001 - a doc the task's own templates cannot render
        report.error = _reason(exc)
        return None, report
    if not report.ok:
        report.error = report.error or "no docs in any split"
        return None, report
    return _spec(leaf, "multiple-choice" if mc else "code" if is_code_task(task) else "qa", splits), report


def leaf_file(folder: Path, leaf: str, split: str) -> Path:
    """Where a leaf's split is written: one file per exact (leaf, split), whatever the names (detector/names.py)."""
    return folder / path_name(leaf) / f"{path_name(split)}.jsonl"


def report_lines(reports: list[LeafReport]) -> list[str]:
    return [f"  lm-eval {r.task}: " + (", ".join(f"{s} {n:,}" for s, n in r.splits.items()) if r.ok else
                                       f"not read: building it runs task code ({r.untrusted}), which listing never "
                                       "does; contam detect runs it with --trust-task-code" if r.untrusted else
                                       f"FAILED {r.error}")
            + (f" (not in its dataset: {', '.join(r.absent)})" if r.absent else "") for r in reports]
