"""Planning a remote pool asks the store for its listing and nothing per object: the sizes and versions (ETags) come
from the listing (store/location.remember_listing), counted against the loopback S3-protocol server.  An unchanged
rerun of a six-shard pool sends no HEAD to a pool object; its one read of each is the door's sample (a range
request)."""

from __future__ import annotations

import logging
import re

from contam_assets.testing.pool_formats import contam, docs, tasks_dir, write_jsonl
from contam_assets.testing.s3_server import s3_bucket, upload_folder

BUCKET = "plan-bucket"
SHARDS = 6
REQUEST = re.compile(r"(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/[\d.]+\S*\" (\d+)")  # werkzeug colours some lines: no quote before


class _Requests(logging.Handler):
    """The requests the in-process server logged (werkzeug's access lines): (method, path, status)."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[str, str, int]] = []

    def emit(self, record):
        m = REQUEST.search(record.getMessage())
        if m:
            self.seen.append((m.group(1), m.group(2), int(m.group(3))))


def _count(seen, method, prefix):
    return sum(1 for m, p, _ in seen if m == method and p.split("?")[0].startswith(prefix))


def test_planning_sends_no_request_per_pool_object(tmp_path, shared_data):
    pool = tmp_path / "pool"
    for i in range(SHARDS):
        write_jsonl(pool / f"p{i}.jsonl", docs(shared_data, f"s{i}", 1, 40, 10 * i))
    handler = _Requests()
    log = logging.getLogger("werkzeug")
    log.addHandler(handler)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        with s3_bucket(BUCKET) as (env, client):
            upload_folder(client, pool, BUCKET, "pool")
            args = ["detect", "--pool", f"s3://{BUCKET}/pool", "--out", tmp_path / "out", "--benchmarks", shared_data,
                    "--tasks-dir", tasks_dir(tmp_path / "tasks")]
            extra = {**env, "DAGSTER_HOME": str(tmp_path / "home"), "CONTAM_DETECT_RUNS": "ranged"}
            first = contam(*args, env_extra=extra)
            assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
            in_first = list(handler.seen)
            handler.seen.clear()
            again = contam(*args, env_extra=extra)
            assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
            in_rerun = list(handler.seen)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    objects = f"/{BUCKET}/pool/"
    # the first run reads each object (a stream per stage that reads it), never a HEAD per object to plan it
    assert _count(in_first, "GET", objects) >= SHARDS, in_first
    assert _count(in_first, "HEAD", objects) <= 2 * SHARDS, [r for r in in_first if r[0] == "HEAD"]
    # the unchanged rerun: no HEAD per object (the listing's sizes and ETags plan it); the one read of each object
    # is the door's sample of its first lines, a range request (206)
    assert _count(in_rerun, "HEAD", objects) == 0, [r for r in in_rerun if r[0] == "HEAD"]
    reads = [r for r in in_rerun if r[0] == "GET" and r[1].startswith(objects)]
    assert len(reads) <= SHARDS and all(status == 206 for _, _, status in reads), reads
    listings = [p for m, p, _ in in_rerun if m == "GET" and "list-type=2" in p and "prefix=pool" in p]
    assert 1 <= len(listings) <= 8, listings
