"""An S3-protocol server on loopback for tests and benchmarks: moto's standalone server, as s3fs's own tests use.

moto keeps its buckets in process-wide state, not per server: a server started after another one in the same pytest
worker would see that one's buckets and objects. Each server here starts and stops with that state reset, so a test
sees only what it uploads.  moto and boto3 come with the dev extra; without them a server or client fails with
one line saying so."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from contam_assets.testing import dev_module


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
