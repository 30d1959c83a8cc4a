"""`contam review OUT --serve`: the review page (contam_assets/report/review_app.py) on uvicorn.

Its Apply button runs `contam apply OUT` in a child process: the same command, the same
code and the same Dagster runs as in a terminal.  (No `register` here: the subcommand is
`contam review`.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def apply_command(out: Path, dagster_home: str | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "contam_assets.cli", "apply", str(out)]
    return cmd + (["--dagster-home", dagster_home] if dagster_home else [])


def make_apply(out: Path, dagster_home: str | None = None):
    def apply() -> tuple[bool, str]:
        r = subprocess.run(apply_command(out, dagster_home), capture_output=True, text=True, timeout=3600)
        return r.returncode == 0, (r.stdout + r.stderr).strip()
    return apply


def serve(out: Path, host: str, port: int, reviewer: str, dagster_home: str | None = None) -> int:
    import uvicorn

    from contam_assets import runner
    from contam_assets.cli import CliError
    from contam_assets.report.review_app import ReviewConfig, create_app

    if not 0 < port < 65536:
        raise CliError(f"--port must be 1..65535, got {port}")
    settings = runner.recorded_settings(out)
    cfg = settings.detect_config()[0] if settings else None  # the preset's tokenizer and cleaning, as scanned
    config = ReviewConfig(out_dir=out, pool_dir=settings.pool_path if settings else None,
                          content_key=settings.content_key if settings else "text",
                          tokenizer=cfg.tokenizer if cfg else "cl100k",
                          unescape=cfg.unescape if cfg else True, reviewer=reviewer)
    app = create_app(config, make_apply(out, dagster_home))
    print(f"review page: http://{host}:{port}/  (Ctrl-C stops it)", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")
    return 0
