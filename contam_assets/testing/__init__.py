"""What the test suite and the benchmarks both build on: planted pools, a loopback S3-protocol server, tiny models.

It is part of the product so that ``benchmarks/`` needs nothing from ``contam_assets_tests``; no other module of the
product imports it (``contam_assets_tests/docs/test_layout.py`` holds both rules).  Importing it needs no pytest.

- ``pool_formats``       pools in every format a reader is registered for, GSM8K items planted; ``contam`` in a subprocess
- ``bad_pool``           a pool with every kind of bad input and the exact accounting a run must report for each entry
- ``throughput_planted`` planted documents and the reduced-registry detector of the throughput and prefilter tests
- ``s3_server``          moto's S3-protocol server on loopback, emptied at start and stop; ``s3_server_process`` runs it in a process of its own and counts its requests and bytes (moto is a dev extra)
- ``model_tiny``         tiny real checkpoints (a trained BPE tokenizer, a 2-layer GPT-2 or Llama) with known answers
- ``experiments``        experiment folders, probe-metric rows and a running ``contam api`` (httpx is a dev extra)

The benchmark data folder is the shared_data setting (contam_assets/settings.py), else ``../shared/data`` beside
the repository.
"""

from __future__ import annotations

import importlib
import subprocess
from pathlib import Path
from types import ModuleType

from contam_assets import settings

SHARED_DATA = Path(settings.env_value("shared_data")
                   or Path(__file__).resolve().parents[2].parent / "shared" / "data").resolve()


def dev_module(name: str) -> ModuleType:
    """``import name``; when it is missing, one line naming the package and how to install it (the dev extra)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        missing = (e.name or name).split(".")[0]
        raise ModuleNotFoundError(f"{name} is not installed ({missing} comes with the dev extra: "
                                  f"pip install -e '.[dev]')", name=missing) from None


def stop_process(proc: subprocess.Popen, timeout: float = 30) -> None:
    """A child process ended: SIGTERM, then SIGKILL where it has not exited within ``timeout`` seconds; reaped."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
