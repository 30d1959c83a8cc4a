"""``contam api`` stops within a second of SIGTERM, whatever its clients and files are doing."""

from __future__ import annotations

import copy
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from contam_assets.evaluation.checkpoint_report import SCHEMA, dumps
from contam_assets.testing.experiments import HOST, api_server, free_port

REPORT = {"schema": SCHEMA, "model": {"checkpoint": "big/s1", "experiment": "big", "stage": "s1", "step": 1,
                                      "is_base": False},
          "recipe": "r", "scores": {"loss": 0.5}, "probes": {}, "benchmarks": {}, "contamination": None}


def _connect(port: int, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect: a small window
    s.connect((HOST, port))
    return s


def test_sigterm_stops_the_server_within_a_second(tmp_path):
    out = tmp_path / "output"
    big = copy.deepcopy(REPORT)
    big["recipe"] = "x" * (6 * 1024 * 1024)  # a 6 MB listing: more than the socket buffers hold
    (out / "big" / "eval" / "s1").mkdir(parents=True)
    (out / "big" / "eval" / "s1" / "report.json").write_text(dumps(big))
    (out / "fifo" / "eval" / "s1").mkdir(parents=True)
    os.mkfifo(out / "fifo" / "eval" / "s1" / "report.json")  # nobody ever writes to it
    with api_server(tmp_path, str(tmp_path)) as (client, proc):
        port = int(str(client.base_url).rsplit(":", 1)[1].strip("/"))
        assert client.get("/api/evaluations", params={"output_dir": "output"}).status_code == 200  # index built
        slowloris = _connect(port)
        slowloris.sendall(b"GET /api/evaluations?output_dir=output HTTP/1.1\r\nHost: x\r\n")  # never finished
        reader = _connect(port, rcvbuf=4096)
        reader.sendall(b"GET /api/evaluations?output_dir=output HTTP/1.1\r\nHost: x\r\n\r\n")  # never read
        time.sleep(1.0)  # the reader's response is now stuck in flow control
        # the server still answers everyone else
        assert client.get("/api/evaluations/fifo", params={"output_dir": "output"}).status_code == 422
        assert client.get("/openapi.json").status_code == 200
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        finally:
            elapsed = time.monotonic() - t0
            slowloris.close()
            reader.close()
        assert elapsed < 1.0, f"stopped {elapsed:.2f}s after SIGTERM"
        assert proc.returncode == 128 + signal.SIGTERM, proc.returncode
        try:
            httpx.get(f"http://{HOST}:{port}/openapi.json", timeout=2)
            raise AssertionError("the server still answers")
        except httpx.ConnectError:
            pass


HANGING_APP = """
import os, sys
from fastapi import FastAPI
from contam_assets.web.http_common import serve
app = FastAPI()

@app.get("/hang")
{define} hang():  # a blocking open of a FIFO nobody writes to
    os.open(sys.argv[1], os.O_RDONLY)

serve(app, "127.0.0.1", int(sys.argv[2]), log_level="warning")
"""


@pytest.mark.parametrize("define", ["def", "async def"], ids=["worker_thread_stuck", "event_loop_stuck"])
def test_sigterm_ends_a_server_whose_request_is_stuck_in_a_system_call(tmp_path, define):
    """Any app served by ``webapp.serve``: a stuck worker thread (uvicorn's own graceful shutdown would
    wait for it forever without a timeout) or a stuck event loop (only the watchdog can end it)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", HANGING_APP.format(define=define), str(fifo), str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://{HOST}:{port}/openapi.json", timeout=2)
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
                time.sleep(0.2)
        stuck = _connect(port)
        stuck.sendall(b"GET /hang HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.5)
        assert proc.poll() is None
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        elapsed = time.monotonic() - t0
        stuck.close()
        assert elapsed < 1.0, f"stopped {elapsed:.2f}s after SIGTERM"
        assert proc.returncode == 128 + signal.SIGTERM, proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
