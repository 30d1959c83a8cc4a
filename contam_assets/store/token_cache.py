"""Cached token stream of a shard, so a rescan does not tokenize the pool again.

Adding a task to the registry means every shard has to be scanned again (seed 003).
Reading, cleaning and BPE-encoding the text is most of a scan's cost, and none of it
depends on the reference set, so the first scan of a shard keeps its token ids:

    <root>/<shard>/<key>/tokens.bin   token ids of every usable document, back to back
                                      (uint32 for cl100k, uint64 for the word tokenizer)
    <root>/<shard>/<key>/docs.bin     int64: n_docs, then the lines (n_docs), the offsets (n_docs + 1),
                                      each document's check (`doc_check` of its line and its ids) and
                                      where its line starts in the decompressed shard (-1: not known)
    <root>/<shard>/<key>/meta.json    the read's counters, the key, the ids' dtype
    <root>/<shard>/<key>/rejects.jsonl  the shard's rejected lines, as <out>/rejected/<shard>.jsonl holds them
                                      (a stream written before it existed has none: see `exists`;
                                      the next writer of its key adds it)

`key` hashes everything the tokens depend on: the shard's fingerprint (so a changed
shard never reuses a stale stream), the tokenizer, every cleaning option, the content key
and the size limit that turns a document into a reject.  A stream is written into a
temporary folder and renamed into place, so a reader sees a whole stream or none; two
writers of the same key race harmlessly (both streams are identical, one rename wins).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xxhash

from contam_assets.detector.config import DetectConfig
from contam_assets.store.mirror import local_rel
from contam_assets.store.pool import Reject

# Bump when text.clean_text or tokenize.get_tokenizer change their output (2: each document's check value, and
# docs.bin + meta.json instead of an .npz: opening the zip was a sixth of loading a stream).
CACHE_VERSION = 2
REJECTS = "rejects.jsonl"


OFF = ("off", "none", "0", "false")
ON = ("on",)


def cache_root(setting: str, out_path: Path, remote_pool: bool = False) -> Path | None:
    """Where a run keeps its token streams (the ``token_cache`` setting, contam_assets/settings.py), None for none.

    '' (the default): ``<out>/token_cache`` for a local pool, none for a pool read from a store (``remote_pool``).
    A remote pool's streams would sit on the run's local disk (its work folder) and grow with the pool, about
    1.4 × its stored bytes, where everything else a run keeps stays near a few shards' worth (docs/pools.md); an
    added task then rescans from the text (with ``--prefilter``, only what the prefilter passes and the task can change).
    'on': ``<out>/token_cache`` whatever the pool; 'off': none; anything else: that folder."""
    value = (setting or "").strip()
    if value.lower() in OFF:
        return None
    if not value and remote_pool:
        return None
    if not value or value.lower() in ON:
        return Path(out_path) / "token_cache"
    return Path(value).expanduser().resolve()


def cache_key(shard_fingerprint: str, cfg: DetectConfig, content_key: str) -> str:
    # every cleaning option (markup too: a stream cleaned without it must not stand for one cleaned with it)
    parts = dict(version=CACHE_VERSION, shard=shard_fingerprint, tokenizer=cfg.tokenizer,
                 clean=dataclasses.asdict(cfg.clean_options), content_key=content_key, max_doc_bytes=cfg.max_doc_bytes)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def token_dtype(tokenizer: str) -> np.dtype:
    # cl100k ids are below 2**32; the word tokenizer's ids are 64-bit hashes.
    return np.dtype(np.uint64) if tokenizer == "word" else np.dtype(np.uint32)


def doc_check(raw: bytes, ids: bytes) -> int:
    """A cached document's check value: xxh3 of its token ids' bytes, seeded with xxh3 of its line (parse_line's
    ``raw``).  An incremental rescan recomputes it from the line it reads and the ids it loads: equal only when
    neither the line nor the ids changed since the stream was written."""
    return xxhash.xxh3_64_intdigest(ids, seed=xxhash.xxh3_64_intdigest(raw))


@dataclass
class TokenStream:
    """Token ids of one shard's usable documents (rejects are not in the stream)."""

    key: str
    lines: np.ndarray  # int64: 0-based line of each document in the shard
    offsets: np.ndarray  # int64: document i is tokens[offsets[i]:offsets[i+1]]
    tokens: np.ndarray  # uint32 / uint64, memory-mapped when loaded from disk
    meta: dict = field(default_factory=dict)  # read, rejected, bytes, reject_reasons, shard_fingerprint
    rejects: list[Reject] | None = None  # the shard's rejected lines (None: a stream written without them)
    checks: np.ndarray | None = None  # uint64 `doc_check` per document (None: a stream made by hand)
    starts: np.ndarray | None = None  # int64: where each document's line starts in the decompressed shard (-1: unknown)

    @property
    def n_docs(self) -> int:
        return len(self.lines)

    def doc(self, i: int) -> np.ndarray:
        """Token ids of document i as uint64 (what the scanner takes)."""
        return np.asarray(self.tokens[self.offsets[i] : self.offsets[i + 1]], dtype=np.uint64)

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def holds(self, i: int, raw: bytes) -> bool:
        """Document i's ids were made from ``raw`` (its line now) and are as they were written (`doc_check`)."""
        return self.checks is not None and doc_check(raw, self.tokens[self.offsets[i] : self.offsets[i + 1]].tobytes()) == int(self.checks[i])


def stream_dir(root: Path, shard: str, key: str) -> Path:
    return Path(root) / local_rel(shard) / key


def _whole(d: Path) -> bool:
    """The folder holds every file of a stream (a prune's rmtree beside a reader or writer may have left part)."""
    return all((d / name).is_file() for name in ("docs.bin", "meta.json", "tokens.bin"))


def exists(root: Path, shard: str, key: str, with_rejects: bool = False) -> bool:
    """A stream is cached for (shard, key); ``with_rejects``: one that holds the shard's rejected lines too (what a
    first scan of the shard from its stream needs: the mix leaves those lines out)."""
    d = stream_dir(root, shard, key)
    return _whole(d) and (not with_rejects or (d / REJECTS).is_file())


def _read_rejects(path: Path) -> list[Reject] | None:
    if not path.is_file():
        return None
    out = []
    for line in path.read_text(encoding="ascii").split("\n")[:-1]:
        r = json.loads(line)
        raw = base64.b64decode(r["raw"]) if r["encoding"] == "base64" else r["raw"].encode("utf-8")
        out.append(Reject(line=int(r["line"]), reason=r["reason"], raw=raw))
    return out


def load(root: Path, shard: str, key: str) -> TokenStream | None:
    """The cached stream for (shard, key), or None when there is none (or it is damaged)."""
    d = stream_dir(root, shard, key)
    docs, bin_path = d / "docs.bin", d / "tokens.bin"
    if not docs.is_file() or not bin_path.is_file():
        return None
    try:
        meta = json.loads((d / "meta.json").read_bytes())
        table = np.fromfile(docs, dtype=np.int64)
        n_docs = int(table[0]) if len(table) else -1
        if n_docs < 0 or len(table) != 4 * n_docs + 2:
            return None
        lines, offsets = table[1 : n_docs + 1], table[n_docs + 1 : 2 * n_docs + 2]
        checks, starts = table[2 * n_docs + 2 : 3 * n_docs + 2].view(np.uint64), table[3 * n_docs + 2 :]
        dtype = np.dtype(meta["dtype"])
        n = int(offsets[-1])
        if offsets[0] != 0 or np.any(offsets[1:] < offsets[:-1]) or bin_path.stat().st_size != n * dtype.itemsize \
                or meta.get("key") != key:
            return None
        # a plain view of the mapping: a slice of a memmap object costs a Python hook per document
        tokens = np.asarray(np.memmap(bin_path, dtype=dtype, mode="r", shape=(n,))) if n else np.zeros(0, dtype=dtype)
        rejects = _read_rejects(d / REJECTS)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if rejects is not None and len(rejects) != meta.get("rejected"):
        return None
    return TokenStream(key=key, lines=lines, offsets=offsets, tokens=tokens, meta=meta, rejects=rejects, checks=checks,
                       starts=starts)


class StreamWriter:
    """Collects documents' token ids while a shard is tokenized; `commit` publishes them atomically."""

    def __init__(self, root: Path, shard: str, key: str, tokenizer: str):
        self.root, self.shard, self.key = Path(root), shard, key
        self.dtype = token_dtype(tokenizer)
        self.tmp = Path(root) / local_rel(shard) / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.tmp / "tokens.bin", "wb")
        self._lines: list[int] = []
        self._lengths: list[int] = []
        self._checks: list[int] = []
        self._starts: list[int] = []

    def add(self, line: int, tokens: np.ndarray, raw: bytes, start: int = -1) -> None:
        """Document at ``line`` (``raw``: its line as parse_line gave it; ``start``: where the line starts in the
        decompressed shard, Document.offset) with its token ids."""
        ids = np.asarray(tokens, dtype=self.dtype).tobytes()
        self._fh.write(ids)
        self._lines.append(line)
        self._lengths.append(len(tokens))
        self._checks.append(doc_check(raw, ids))
        self._starts.append(start)

    def commit(self, meta: dict, rejects: list[Reject]) -> Path:
        self._fh.close()
        with open(self.tmp / REJECTS, "w", encoding="ascii") as fh:  # JSON escapes every non-ASCII character
            fh.write("".join(json.dumps(r.to_json()) + "\n" for r in rejects))
        offsets = np.zeros(len(self._lengths) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum(self._lengths, dtype=np.int64)
        meta = dict(meta, key=self.key, dtype=self.dtype.str, version=CACHE_VERSION)
        (self.tmp / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        np.concatenate([[len(self._lines)], np.asarray(self._lines, dtype=np.int64), offsets,
                        np.asarray(self._checks, dtype=np.uint64).view(np.int64),
                        np.asarray(self._starts, dtype=np.int64)]).astype(np.int64).tofile(self.tmp / "docs.bin")
        final = stream_dir(self.root, self.shard, self.key)
        try:
            os.rename(self.tmp, final)
        except OSError:
            if load(self.root, self.shard, self.key) is None:  # a folder left half removed or damaged: replace it
                shutil.rmtree(final, ignore_errors=True)
                try:
                    os.rename(self.tmp, final)
                except OSError:
                    shutil.rmtree(self.tmp, ignore_errors=True)
            else:
                # another process published the same key first; its stream is identical.  A stream written before
                # streams kept their rejects gets this one's, in one rename (a reader sees the whole file or none)
                self._hand_rejects(final, len(rejects))
                shutil.rmtree(self.tmp, ignore_errors=True)
        prune(self.root, self.shard, keep=self.key)
        return final

    def _hand_rejects(self, final: Path, n_rejects: int) -> None:
        if (final / REJECTS).is_file():
            return
        try:
            if json.loads((final / "meta.json").read_bytes()).get("rejected") != n_rejects:
                return  # not the stream these rejects belong with: left as it was
            os.replace(self.tmp / REJECTS, final / REJECTS)
        except (OSError, ValueError, KeyError):
            pass  # left as it was: not used for a first scan (see `exists`)

    def abort(self) -> None:
        if not self._fh.closed:
            self._fh.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def discard(root: Path, shard: str, key: str) -> None:
    """Drop the stream (shard, key): one found stale, so the rescan that follows publishes its own under the key."""
    shutil.rmtree(stream_dir(root, shard, key), ignore_errors=True)


def prune(root: Path, shard: str, keep: str) -> None:
    """Drop streams of older versions of the shard (other keys)."""
    d = Path(root) / local_rel(shard)
    if not d.is_dir():
        return
    for p in d.iterdir():
        if p.is_dir() and p.name != keep and not p.name.startswith(".tmp-"):
            shutil.rmtree(p, ignore_errors=True)
