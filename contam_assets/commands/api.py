"""``contam api``: serve the evaluation reports over HTTP (see contam_assets/evaluation/api.py)."""

from __future__ import annotations

import os


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "api",
        help="serve GET /api/evaluations over HTTP",
        description="Serve evaluation reports: GET /api/evaluations?output_dir=...&recipe=&experiment= and "
        "GET /api/evaluations/{experiment}?output_dir=...&stage=. output_dir must lie inside a root of "
        "API_PATHS (',' or ':' separated; unset = the current folder). Relative output_dir values resolve "
        "against the current folder. Schema at /openapi.json.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--paths", default=None, help="allowed roots, overriding API_PATHS (',' or ':' separated)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=_run)


def _run(args) -> int:
    from contam_assets.cli import CliError

    if not 0 < args.port < 65536:
        raise CliError(f"--port must be 1..65535, got {args.port}")
    if args.paths is not None:
        os.environ["API_PATHS"] = args.paths
    from contam_assets.evaluation.api import serve

    serve(args.host, args.port, log_level=args.log_level)
    return 0
