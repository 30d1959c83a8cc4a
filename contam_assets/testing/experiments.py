"""Builders shared by the evaluation and API tests and benchmarks/api_load.py: experiment folders, DuckDB rows and
a running ``contam api`` (httpx, a dev extra, is imported where the server is asked)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from contam_assets import settings, store
from contam_assets.testing import dev_module, stop_process

HOST = "127.0.0.1"


def write_jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(r if isinstance(r, str) else json.dumps(r))
            f.write("\n")
    return path


def add_checkpoint(experiments: Path, experiment: str, stage: str, step: int | None, is_base: bool = False,
                   recipe: str | None = None) -> Path:
    folder = experiments / experiment / "checkpoints" / stage
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"experiment": experiment, "stage": stage, "step": step, "is_base": is_base, "recipe": recipe}
    (folder / "contam_checkpoint.json").write_text(json.dumps(meta))
    return folder


def write_probe_metrics(db_path: Path, rows: list[tuple[str, str, str, float | None]]) -> None:
    """Rows (checkpoint, probe, metric, value) in the model side's long table."""
    with store.connect(db_path) as con:
        con.execute(
            "create table if not exists probe_metrics(checkpoint varchar, probe varchar, metric varchar, "
            "value double, computed_at timestamp)"
        )
        con.executemany("insert into probe_metrics values (?, ?, ?, ?, now())", rows)


def gsm8k_rows(shared_data: Path) -> list[dict]:
    with open(shared_data / "gsm8k_test.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start_api(cwd: Path, api_paths: str, log_level: str = "warning", fresh_s: float | None = 0.0
              ) -> tuple[subprocess.Popen, str]:
    """``contam api`` in a subprocess on a free loopback port; returns once it answers /openapi.json.

    ``fresh_s`` sets the api_fresh_s setting's variable (0: every listing re-checks the folder; None: the default).
    """
    httpx = dev_module("httpx")
    port = free_port()
    env = dict(os.environ, API_PATHS=api_paths)
    env.pop(settings.var("api_fresh_s"), None)
    if fresh_s is not None:
        env[settings.var("api_fresh_s")] = str(fresh_s)
    proc = subprocess.Popen(
        [sys.executable, "-m", "contam_assets.cli", "api", "--host", HOST, "--port", str(port), "--log-level", log_level],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = f"http://{HOST}:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/openapi.json", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"server did not start: {proc.stdout.read()}")
        time.sleep(0.2)


@contextlib.contextmanager
def api_server(cwd: Path, api_paths: str, fresh_s: float | None = 0.0):
    """A running ``contam api`` and an httpx client on it; terminated (then killed) afterwards."""
    httpx = dev_module("httpx")
    proc, url = start_api(cwd, api_paths, fresh_s=fresh_s)
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            yield client, proc
    finally:
        stop_process(proc, timeout=20)
