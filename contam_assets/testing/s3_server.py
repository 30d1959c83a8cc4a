"""An S3-protocol server on loopback for tests and benchmarks: moto's standalone server, as s3fs's own tests use.

moto keeps its buckets in process-wide state, not per server: a server started after another one in the same pytest
worker would see that one's buckets and objects. Each server here starts and stops with that state reset, so a test
sees only what it uploads.  moto and boto3 come with the dev extra; without them a server or client fails with
one line saying so.

``s3_server_process`` is the same server in a process of its own (fresh state, nothing to reset), behind a
middleware that counts each method and path's requests and bytes (``server_counts``): a benchmark reads what the
server sent and its CPU seconds (``cpu_seconds``) apart from the run's."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from contam_assets.testing import dev_module, stop_process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reset(endpoint: str) -> None:
    """moto's own reset call: every backend of this process emptied."""
    with urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=30):
        pass


@contextmanager
def s3_server(key: str = "contam-test-key", secret: str = "contam-test-secret") -> Iterator[dict]:
    """Yields the variables a client needs (endpoint, credentials, region) for a fresh, empty server."""
    ThreadedMotoServer = dev_module("moto.server").ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _reset(endpoint)
        yield {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    finally:
        try:
            _reset(endpoint)
        finally:
            server.stop()


def s3_client(env: dict):
    boto3 = dev_module("boto3")

    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")


@contextmanager
def s3_bucket(bucket: str, **server) -> Iterator[tuple[dict, object]]:
    """A loopback server (``s3_server``'s arguments) with ``bucket`` made: (its environment, a client)."""
    with s3_server(**server) as env:
        client = s3_client(env)
        client.create_bucket(Bucket=bucket)
        yield env, client


def upload_folder(client, folder: Path, bucket: str, prefix: str) -> None:
    """Every file under ``folder`` to ``s3://bucket/prefix/<its path under folder>``."""
    for f in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        client.upload_file(str(f), bucket, f"{prefix}/{f.relative_to(folder).as_posix()}")


# -- the same server in a process of its own, counting what it sends and takes ------------------------------------

COUNTS_PATH = "/_contam/counts"


class _Counting:
    """WSGI middleware: per (method, path) the requests, the response bytes sent and the request bytes taken; GET
    ``COUNTS_PATH`` answers them as JSON, [[method, path, requests, sent, taken], ...]."""

    def __init__(self, app):
        import threading

        self.app, self.lock, self.counts = app, threading.Lock(), {}

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == COUNTS_PATH:
            import json

            with self.lock:
                body = json.dumps([[*k, *v] for k, v in self.counts.items()]).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        key = (environ.get("REQUEST_METHOD", ""), path)
        taken = int(environ.get("CONTENT_LENGTH") or 0)
        with self.lock:
            c = self.counts.setdefault(key, [0, 0, 0])
            c[0], c[2] = c[0] + 1, c[2] + taken
        return self._counted(self.app(environ, start_response), c)

    def _counted(self, result, c):
        try:
            for chunk in result:
                with self.lock:
                    c[1] += len(chunk)
                yield chunk
        finally:
            close = getattr(result, "close", None)
            if close:
                close()


def _serve(port: int) -> None:
    """The server of ``s3_server_process``: moto's app behind ``_Counting``, threaded, on 127.0.0.1:``port``."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    app = _Counting(DomainDispatcherApplication(create_backend_app))
    make_server("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler).serve_forever()


@contextmanager
def s3_server_process(key: str = "contam-test-key", secret: str = "contam-test-secret") -> Iterator[tuple[dict, int]]:
    """``s3_server`` in a process of its own (a benchmark reads its CPU seconds from /proc/<pid>/stat and its
    counts with ``server_counts``): (the client's environment, the server's pid)."""
    import os
    import subprocess
    import sys
    import time

    dev_module("moto.server")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-c", f"from contam_assets.testing.s3_server import _serve; _serve({port})"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(endpoint + COUNTS_PATH, timeout=5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the S3-protocol server on port {port} did not start") from None
                time.sleep(0.1)
        yield ({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}, proc.pid)
    finally:
        stop_process(proc, timeout=30)


def server_counts(env: dict) -> list[tuple[str, str, int, int, int]]:
    """``s3_server_process``'s counts so far: (method, path, requests, bytes sent, bytes taken) per method and path."""
    import json

    with urllib.request.urlopen(env["AWS_ENDPOINT_URL"] + COUNTS_PATH, timeout=30) as r:
        return [tuple(row) for row in json.loads(r.read())]


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (/proc/<pid>/stat; Linux)."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
