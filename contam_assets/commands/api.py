"""``contam api``: serve the evaluation reports over HTTP (see contam_assets/web/api.py)."""

from __future__ import annotations

import os

from contam_assets.settings import add_flag


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
    add_flag(p, "api_fresh_s", "--fresh-s", dest="fresh_s",
             doc="a listing may be up to this many seconds old (0 = check the folder on every request)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=_run)


def _run(args) -> int:
    from contam_assets.cli import CliError

    if not 0 < args.port < 65536:
        raise CliError(f"--port must be 1..65535, got {args.port}")
    if args.fresh_s is not None and not 0 <= args.fresh_s <= 3600:
        raise CliError(f"--fresh-s must be between 0 and 3600, got {args.fresh_s}")
    if args.paths is not None:
        os.environ["API_PATHS"] = args.paths
    from contam_assets.web.api import serve

    try:
        serve(args.host, args.port, log_level=args.log_level, fresh_s=args.fresh_s)
    except ValueError as exc:  # fresh_s out of range
        raise CliError(str(exc)) from exc
    return 0
