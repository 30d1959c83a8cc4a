"""Send an evaluation report to Weights & Biases, once per report stage folder and project.

With ``tracker: {enabled: true, project: P}`` in the evaluation config, a
report is sent as one wandb run (name ``<experiment>/<stage>``, job type
``evaluation``):

* every number of the report as a summary metric with its slash key
  (``scores/loss/gsm8k-test``, ``benchmarks/humaneval/value``,
  ``contamination/exact``, ``contamination/benchmarks/gsm8k-test/near``,
  ``contamination/flagged/0/index``; see ``report.flatten_numbers``);
* the same numbers as a ``wandb.Table`` (columns ``key``, ``value``) logged
  under ``report``.

Afterwards ``tracker.json`` beside ``report.json`` records, per project, that
it was sent (run id, mode, run folder, sha256 of the report sent).  A report
whose marker already names the project is not sent again.  The tracker never
writes into report.json, so it is not part of the report's identity.

Mode: ``tracker.mode``, else ``WANDB_MODE`` (``dryrun`` = offline, ``run`` =
online), else offline.  Offline runs are written under ``tracker.dir``
(default ``<experiments_dir>/wandb``); wandb's staging, cache and config
folders default to ``<dir>/.wandb-data`` for the duration of the send, so
nothing lands in the home folder.  ``WANDB_MODE=disabled`` sends nothing
and writes no marker.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from contam_assets.evaluation.config import TrackerConfig
from contam_assets.evaluation.report import dumps, flatten_numbers
from contam_assets.store.files import atomic_write_text

MARKER_FILE = "tracker.json"
TABLE_KEY = "report"


@dataclass(frozen=True)
class SendResult:
    sent: bool
    reason: str  # "sent", "disabled", "already sent", "WANDB_MODE=disabled"
    project: str = ""
    run_id: str | None = None
    run_dir: str | None = None
    metrics: int = 0


def marker_path(report_path: Path) -> Path:
    return Path(report_path).parent / MARKER_FILE


def read_marker(report_path: Path) -> dict:
    p = marker_path(report_path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise ValueError(f"tracker marker {p} is not valid JSON ({exc}); fix or delete it") from exc
    return data if isinstance(data, dict) else {}


def run_id_for(report_path: Path, project: str) -> str:
    """Stable run id for one stage folder and project (a retried send resumes the same run)."""
    digest = hashlib.sha256(f"{project}\0{Path(report_path).resolve().parent}".encode()).hexdigest()
    return f"eval-{digest[:16]}"


def resolve_mode(tracker: TrackerConfig) -> str:
    mode = tracker.mode or os.environ.get("WANDB_MODE") or "offline"
    return {"dryrun": "offline", "run": "online"}.get(mode, mode)


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
    """Send ``report`` unless the tracker is off or the marker says it was sent to this project."""
    if not tracker.enabled:
        return SendResult(False, "disabled")
    project = tracker.project
    marker = read_marker(report_path)
    sent = marker.get("wandb", {}).get(project)
    if sent:
        return SendResult(False, "already sent", project, sent.get("run_id"), sent.get("run_dir"))
    mode = resolve_mode(tracker)
    if mode == "disabled":
        return SendResult(False, "WANDB_MODE=disabled", project)
    base = Path(tracker.dir or default_dir)
    base.mkdir(parents=True, exist_ok=True)
    flat = flatten_numbers(report)
    model = report.get("model") or {}
    run_id = run_id_for(report_path, project)
    with _wandb_dirs(base):
        import wandb

        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, save_code=False,
                                  disable_git=True, x_save_requirements=False)
        config = {k: model.get(k) for k in ("checkpoint", "experiment", "stage", "step", "is_base")}
        config |= {"recipe": report.get("recipe"), "report": str(Path(report_path).resolve())}
        run = wandb.init(project=project, entity=tracker.entity, dir=str(base), id=run_id, resume="allow",
                         name=str(model.get("checkpoint") or run_id), job_type="evaluation", mode=mode,
                         config=config, settings=settings)
        try:
            run.summary.update(flat)
            run.log({TABLE_KEY: wandb.Table(columns=["key", "value"], data=[[k, v] for k, v in flat.items()])})
            run_dir = str(Path(run.dir).parent)
        except BaseException:
            run.finish(exit_code=1)
            raise
        run.finish()
    entry = {
        "run_id": run_id,
        "mode": mode,
        "entity": tracker.entity,
        "run_dir": run_dir,
        "metrics": len(flat),
        "report_sha256": hashlib.sha256(dumps(report).encode()).hexdigest(),
    }
    marker.setdefault("wandb", {})[project] = entry
    atomic_write_text(marker_path(report_path), json.dumps(marker, indent=2) + "\n")
    return SendResult(True, "sent", project, run_id, run_dir, len(flat))
