"""Send an evaluation report to Weights & Biases exactly once per report version and project.

With ``tracker: {enabled: true, project: P}`` in the evaluation config, a
report is sent as one wandb run (name ``<experiment>/<stage>``, job type
``evaluation``, group ``eval-<hash>`` — one group per stage folder and project):

* every number of the report as a summary metric with its slash key
  (``scores/loss/gsm8k-test``, ``benchmarks/humaneval/value``,
  ``contamination/exact``, ``contamination/benchmarks/gsm8k-test/near``,
  ``contamination/flagged/0/index``; see ``report.flatten_numbers``);
* the same numbers as a ``wandb.Table`` (columns ``key``, ``value``) logged
  under ``report``;
* config: checkpoint, experiment, stage, step, is_base, recipe, the report
  path, ``report_sha256``, ``report_version`` and ``previous_run_id``.

Exactly once.  ``tracker.json`` beside ``report.json`` records, per project,
the run id, the report's sha256, a version number and a state.  Every send
runs under an exclusive lock on ``tracker.lock`` in the stage folder, so
concurrent evaluations of one report take turns and the second finds the
first one's marker.  The marker is written atomically (rename) *before*
the run starts, with state ``sending`` and the run id, again with the run
folder once wandb has made it, and with state ``sent`` after ``finish``:

* marker ``sent`` for this sha256: nothing is sent (``already sent``);
* marker ``sending`` for this sha256 (a process was killed mid-send): the
  run folder it names is read with ``wandb leet inspect``; a run that
  finished is kept and the marker completed (``recovered``), nothing is
  sent; otherwise the unfinished offline folder is removed and the same run
  id is sent again (``resent``);
* a different sha256 (the report changed): a new version — a *new run*,
  id ``eval-<hash>-v<N>``, in the same group, whose config names the run
  it replaces (``previous_run_id``); the marker keeps the earlier versions
  under ``previous``.  Version 1 keeps the id ``eval-<hash>``.

Mode: ``tracker.mode``, else ``WANDB_MODE`` (``dryrun`` = offline, ``run`` =
online), else offline.  Offline runs are written under ``tracker.dir``
(default ``<experiments_dir>/wandb``); wandb's staging, cache and config
folders default to ``<dir>/.wandb-data`` for the duration of the send, so
nothing lands in the home folder.  ``WANDB_MODE=disabled`` sends nothing
and writes no marker.  The tracker never writes into report.json.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from contam_assets.evaluation.checkpoint_report import dumps, flatten_numbers
from contam_assets.evaluation.config import TrackerConfig
from contam_assets.store.files import atomic_write_text

MARKER_FILE = "tracker.json"
LOCK_FILE = "tracker.lock"
TABLE_KEY = "report"
LOCK_WAIT_S = 1800.0  # a send takes seconds; a queue of evaluations of one report may wait this long


class TrackerError(RuntimeError):
    """The marker cannot be read, the lock was not obtained in time, or wandb failed (resent next time)."""


@dataclass(frozen=True)
class SendResult:
    sent: bool
    reason: str  # "sent", "sent (version N)", "resent", "already sent", "recovered", "disabled", "WANDB_MODE=disabled"
    project: str = ""
    run_id: str | None = None
    run_dir: str | None = None
    metrics: int = 0
    version: int = 0


def marker_path(report_path: Path) -> Path:
    return Path(report_path).parent / MARKER_FILE


def read_marker(report_path: Path) -> dict:
    p = marker_path(report_path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise TrackerError(f"tracker marker {p} is not valid JSON ({exc}); fix or delete it") from exc
    return data if isinstance(data, dict) else {}


def save_marker(report_path: Path, marker: dict) -> None:
    """Atomic: a reader (or a process killed during the write) sees the old marker or the new one."""
    atomic_write_text(marker_path(report_path), json.dumps(marker, indent=2) + "\n")


def report_sha256(report: dict) -> str:
    return hashlib.sha256(dumps(report).encode()).hexdigest()


def run_id_for(report_path: Path, project: str, version: int = 1) -> str:
    """Stable run id for one stage folder, project and report version."""
    digest = hashlib.sha256(f"{project}\0{Path(report_path).resolve().parent}".encode()).hexdigest()
    base = f"eval-{digest[:16]}"
    return base if version <= 1 else f"{base}-v{version}"


def resolve_mode(tracker: TrackerConfig) -> str:
    mode = tracker.mode or os.environ.get("WANDB_MODE") or "offline"
    return {"dryrun": "offline", "run": "online"}.get(mode, mode)


@contextlib.contextmanager
def report_lock(report_path: Path, timeout_s: float = LOCK_WAIT_S):
    """Exclusive advisory lock on ``tracker.lock`` beside the report (across processes and threads)."""
    path = Path(report_path).parent / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TrackerError(f"waited {timeout_s:.0f}s for the tracker lock {path}") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def run_finished(run_dir: str | None) -> bool:
    """Whether the wandb run folder holds a finished run (wandb's own reader of its transaction log)."""
    if not run_dir or not Path(run_dir).is_dir():
        return False
    proc = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--summary", "--json", run_dir],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return False
    try:
        state = json.loads(proc.stdout)
    except ValueError:
        return False
    return state.get("state") == "finished" and state.get("exit_code") in (0, None)


@contextlib.contextmanager
def _wandb_dirs(base: Path):
    """Point wandb's staging/cache/config folders under ``base`` unless the user set them."""
    names = ("WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR")
    added = [n for n in names if not os.environ.get(n)]
    for n in added:
        os.environ[n] = str(base / ".wandb-data" / n[6:].lower())
    try:
        yield
    finally:
        for n in added:
            os.environ.pop(n, None)


def send_report(report_path: Path, report: dict, tracker: TrackerConfig, default_dir: Path) -> SendResult:
    """Send ``report`` unless the tracker is off or the marker says this version reached this project."""
    if not tracker.enabled:
        return SendResult(False, "disabled")
    if resolve_mode(tracker) == "disabled":
        return SendResult(False, "WANDB_MODE=disabled", tracker.project)
    with report_lock(report_path):
        return _send_locked(Path(report_path), report, tracker, Path(tracker.dir or default_dir))


def _send_locked(report_path: Path, report: dict, tracker: TrackerConfig, base: Path) -> SendResult:
    project, mode, sha = tracker.project, resolve_mode(tracker), report_sha256(report)
    marker = read_marker(report_path)
    entry = (marker.get("wandb") or {}).get(project)
    if not entry:
        new, reason = {"run_id": run_id_for(report_path, project), "version": 1, "previous_run_id": None}, "sent"
    else:
        state, version = entry.get("state", "sent"), int(entry.get("version", 1))
        recovered = False
        if state == "sending":  # the last send was killed: did its run finish before that?
            recovered = run_finished(entry.get("run_dir"))
            state = entry["state"] = "sent" if recovered else "unfinished"
            if not recovered:
                _drop_unfinished(entry, base, mode)
        if entry.get("report_sha256") == sha:
            if state == "sent":
                if recovered:
                    save_marker(report_path, marker)
                return SendResult(False, "recovered" if recovered else "already sent", project, entry.get("run_id"),
                                  entry.get("run_dir"), entry.get("metrics", 0), version)
            keep = ("run_id", "version", "previous_run_id", "previous")
            new, reason = {k: entry[k] for k in keep if k in entry}, "resent"  # same run id: completes the send
        else:  # the report changed: a new run for the new version, naming the one it replaces
            previous = [{k: v for k, v in entry.items() if k != "previous"}] + entry.get("previous", [])
            new = {"run_id": run_id_for(report_path, project, version + 1), "version": version + 1,
                   "previous_run_id": entry.get("run_id"), "previous": previous}
            reason = f"sent (version {version + 1})"
    new |= {"state": "sending", "mode": mode, "entity": tracker.entity, "run_dir": None,
            "metrics": 0, "report_sha256": sha}
    marker.setdefault("wandb", {})[project] = new
    save_marker(report_path, marker)  # before the run starts: a killed send is recognised

    def started(run_dir: str) -> None:
        new["run_dir"] = run_dir
        save_marker(report_path, marker)

    try:
        run_dir, metrics = _run(report_path, report, tracker, base, mode, new, started)
    except Exception as exc:  # the marker stays "sending": the next evaluation resends under the same run id
        raise TrackerError(f"sending {report_path} to wandb project {project!r} failed: "
                           f"{type(exc).__name__}: {exc}") from exc
    new |= {"state": "sent", "run_dir": run_dir, "metrics": metrics}
    save_marker(report_path, marker)
    return SendResult(True, reason, project, new["run_id"], run_dir, metrics, new["version"])


def _drop_unfinished(entry: dict, base: Path, mode: str) -> None:
    """Remove the offline folders of a send that never finished, so ``wandb sync`` never uploads half a run.

    The folder the marker names, and any other ``offline-run-*-<run id>`` under
    ``base`` (a kill between ``wandb.init`` and the marker's second write).
    """
    if mode != "offline" or not entry.get("run_id"):
        return
    folders = set((base / "wandb").glob(f"offline-run-*-{entry['run_id']}"))
    if entry.get("run_dir"):
        folders.add(Path(entry["run_dir"]))
    for folder in sorted(folders):
        inside = folder.resolve().is_relative_to(base.resolve()) and folder.name.startswith("offline-run-")
        if inside and folder.is_dir() and not run_finished(str(folder)):
            shutil.rmtree(folder, ignore_errors=True)


def _run(report_path: Path, report: dict, tracker: TrackerConfig, base: Path, mode: str, entry: dict,
         started) -> tuple[str, int]:
    base.mkdir(parents=True, exist_ok=True)
    flat = flatten_numbers(report)
    model = report.get("model") or {}
    with _wandb_dirs(base):
        import wandb

        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, save_code=False,
                                  disable_git=True, x_save_requirements=False)
        config = {k: model.get(k) for k in ("checkpoint", "experiment", "stage", "step", "is_base")}
        config |= {"recipe": report.get("recipe"), "report": str(Path(report_path).resolve()),
                   "report_sha256": entry["report_sha256"], "report_version": entry["version"],
                   "previous_run_id": entry["previous_run_id"]}
        run = wandb.init(project=tracker.project, entity=tracker.entity, dir=str(base), id=entry["run_id"],
                         resume="allow", name=str(model.get("checkpoint") or entry["run_id"]),
                         group=run_id_for(report_path, tracker.project), job_type="evaluation", mode=mode,
                         config=config, settings=settings)
        try:
            run_dir = str(Path(run.dir).parent)
            started(run_dir)
            run.summary.update(flat)
            run.log({TABLE_KEY: wandb.Table(columns=["key", "value"], data=[[k, v] for k, v in flat.items()])})
        except BaseException:
            run.finish(exit_code=1)
            raise
        run.finish()
    return run_dir, len(flat)
