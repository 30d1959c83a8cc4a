"""`contam review OUT --serve`: the review page (contam_assets/web/review_app.py) on uvicorn.

The socket is bound before anything else is done or printed: a busy port or an address
that is not this machine's is one line (exit 2), and the URL printed (with the server's
token, review_guard) is one that answers.  Its Apply button runs `contam apply OUT` in a
child process: the same command, the same code and the same Dagster runs as in a
terminal.  (No `register` here: the subcommand is `contam review`.)
"""

from __future__ import annotations

import errno
import socket
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


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or a CliError that says in one line why not."""
    from contam_assets.cli import CliError

    if not 0 < port < 65536:
        raise CliError(f"--port must be 1..65535, got {port}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET  # as uvicorn chooses: `localhost` is 127.0.0.1
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise CliError(f"--host {host!r} is not an address to listen on: {getattr(exc, 'strerror', None) or exc}") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does; a listening socket still refuses
    try:
        sock.bind(addr)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            from contam_assets import settings

            raise CliError(f"port {port} on {host} is in use: stop what holds it, or pick another with --port N "
                           f"(or {settings.var('review_port')})") from None
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def serve(out: Path, host: str, port: int, reviewer: str, dagster_home: str | None = None) -> int:
    sock = listen(host, port)
    import uvicorn

    from contam_assets import runner
    from contam_assets.web.review_app import ReviewConfig, create_app
    from contam_assets.web.review_guard import url_host

    settings = runner.recorded_settings(out)
    cfg = settings.detect_config()[0] if settings else None  # the preset's tokenizer and cleaning, as scanned
    config = ReviewConfig(out_dir=out, pool_dir=settings.pool_path if settings else None,
                          content_key=settings.content_key if settings else "text",
                          tokenizer=cfg.tokenizer if cfg else "cl100k",
                          unescape=cfg.unescape if cfg else True, reviewer=reviewer, host=host, port=port)
    app = create_app(config, make_apply(out, dagster_home))
    print(f"review page: http://{url_host(host)}:{port}/?token={app.state.token}  (Ctrl-C stops it)", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    return 0
