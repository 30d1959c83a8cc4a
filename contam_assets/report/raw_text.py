"""The training document as it is in the pool, with the matched spans of a match row marked.

A match row locates its spans in tokens of the *cleaned* document (question_start ..
question_end, answer_start .. answer_end, passage_start .. passage_end, inclusive).
A reviewer needs the raw text (case, punctuation, code layout).  The map back:

1. the raw text is split at whitespace into chunks, with their character offsets;
   cleaning works chunk by chunk (lowercasing, punctuation to spaces and unescaping
   never cross whitespace), so the cleaned words of the chunks, in order, are the
   cleaned words of the document (this is checked; a document where it does not hold
   is shown unmarked, with the reason);
2. the cleaned words are tokenized again with the scan's tokenizer; each token's bytes
   fall on known words, each word on a known chunk;
3. a token span becomes the character span from the first to the last chunk it touches.

Marks are therefore whole chunks: ``foo(bar)`` is marked entirely when ``bar`` matched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from contam_assets.detector.text import CleanOptions, clean_words
from contam_assets.detector.tokenize import get_tokenizer
from contam_assets.report.inert import html_text
from contam_assets.store.pool import Document, StreamFailure, open_binary, parse_line, read_shard, shard_path
from contam_assets.store.readers import is_jsonl

_CHUNK = re.compile(r"\S+")
KINDS = ("question", "answer", "passage")


@dataclass
class RawDocument:
    """One training document's raw text and the character spans a match covers in it."""

    text: str | None
    spans: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, kind), character offsets
    note: str = ""  # why the text or the marks are missing, when they are

    def html(self, max_chars: int = 20_000) -> str:
        """The raw text, HTML-escaped, spans in <mark class="question|answer|passage">; long texts cut around the marks."""
        if self.text is None:
            return f'<span class="muted">{html_text(self.note)}</span>'
        text, spans, offset = self.text, sorted(self.spans), 0
        if len(text) > max_chars:
            first = spans[0][0] if spans else 0
            offset = max(0, first - max_chars // 4)
            text = text[offset : offset + max_chars]
        out, pos = [], 0
        for s, e, kind in spans:
            s, e = max(s - offset, pos), min(e - offset, len(text))
            if e <= s:
                continue
            out.append(html_text(text[pos:s]))
            out.append(f'<mark class="{kind}">{html_text(text[s:e])}</mark>')
            pos = e
        out.append(html_text(text[pos:]))
        head = "… " if offset else ""
        tail = " …" if offset + len(text) < len(self.text) else ""
        return head + "".join(out) + tail


def word_chunks(raw: str, options: CleanOptions) -> tuple[list[bytes], list[tuple[int, int]]]:
    """Cleaned words of `raw` and, for each, the (start, end) characters of the raw chunk it came from."""
    words: list[bytes] = []
    where: list[tuple[int, int]] = []
    for m in _CHUNK.finditer(raw):
        for w in clean_words(m.group(0), options):
            words.append(w)
            where.append((m.start(), m.end()))
    return words, where


def token_words(words: list[bytes], tokenizer: str) -> tuple[np.ndarray, np.ndarray]:
    """(first word, last word) of every token of the cleaned document `words` (-1 for a space-only token)."""
    tok = get_tokenizer(tokenizer)
    ids = tok.encode_words([words])[0]
    cleaned = b" ".join(words).decode("utf-8", "surrogatepass")
    _, off = tok.byte_spans(cleaned, ids)
    # bytes of the token stream: " w0 w1 ..." -> word k spans [starts[k], starts[k] + len(w_k))
    lens = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    starts = np.cumsum(np.concatenate([[1], lens[:-1] + 1])) if len(words) else np.zeros(0, dtype=np.int64)
    ends = starts + lens
    first = np.searchsorted(ends, off[:-1], side="right")  # first word ending after the token's first byte
    last = np.searchsorted(starts, off[1:], side="left") - 1  # last word starting before the token's end
    empty = first > last
    return np.where(empty, -1, first), np.where(empty, -1, last)


def match_spans(raw: str, match: dict, tokenizer: str = "cl100k", unescape: bool = True) -> RawDocument:
    """Character spans of `raw` covered by the match's question / answer / passage token spans."""
    options = CleanOptions(unescape=unescape)
    words, where = word_chunks(raw, options)
    if words != clean_words(raw, options):
        return RawDocument(raw, [], "cleaning is not chunk-local for this document: spans not marked")
    first, last = token_words(words, tokenizer)
    expected = match.get("doc_tokens")
    if expected is not None and int(expected) != len(first):
        return RawDocument(raw, [], f"the document has {len(first)} tokens now, {expected} when scanned: spans not marked")
    spans = []
    for kind in KINDS:
        s, e = match.get(f"{kind}_start"), match.get(f"{kind}_end")
        if s is None or e is None or len(first) == 0:
            continue
        s, e = max(0, int(s)), min(len(first) - 1, int(e))
        ws = [w for w in first[s : e + 1] if w >= 0]
        we = [w for w in last[s : e + 1] if w >= 0]
        if ws and we:
            spans.append((where[min(ws)][0], where[max(we)][1], kind))
    return RawDocument(raw, _non_overlapping(spans))


def _non_overlapping(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Answer over passage over question where they overlap (the answer is the narrowest evidence)."""
    rank = {"answer": 0, "passage": 1, "question": 2}
    out: list[tuple[int, int, str]] = []
    for s, e, kind in sorted(spans, key=lambda x: rank[x[2]]):
        pieces = [(s, e)]
        for os_, oe, _ in out:
            pieces = [p for a, b in pieces for p in ((a, min(b, os_)), (max(a, oe), b)) if p[1] > p[0]]
        out += [(a, b, kind) for a, b in pieces]
    return sorted(out)


def read_lines(pool_dir: Path, shard: str, lines: set[int], content_key: str = "text") -> dict[int, str | Exception]:
    """The raw text of the given lines of a pool shard (an exception where a line cannot be read)."""
    found: dict[int, str | Exception] = {}
    path = shard_path(pool_dir, shard)
    want = set(lines)
    if not is_jsonl(shard):  # a Parquet or Arrow unit: its rows through its reader
        try:
            for doc in read_shard(path, shard, content_key, 1 << 62):
                if getattr(doc, "line", -1) in want and not isinstance(doc, StreamFailure):
                    found[doc.line] = doc.text if isinstance(doc, Document) else ValueError(f"line {doc.line}: {doc.reason}")
                    if len(found) == len(want):
                        break
        except OSError as exc:
            found.update({i: exc for i in want - set(found)})
        for i in want - set(found):
            found[i] = LookupError(f"{shard} has no row {i} (the pool changed since the scan?)")
        return found
    try:
        with open_binary(path) as fh:
            for i, raw in enumerate(fh):
                if i in want:
                    doc = parse_line(raw, i, shard, content_key, 1 << 62)
                    found[i] = doc.text if isinstance(doc, Document) else ValueError(f"line {i}: {doc.reason}")
                    if len(found) == len(want):
                        break
    except (OSError, EOFError) as exc:
        for i in want - set(found):
            found[i] = exc
    for i in want - set(found):
        found[i] = LookupError(f"{shard} has no line {i} (the pool changed since the scan?)")
    return found


def raw_documents(pool_dir: Path | None, matches: list[dict], content_key: str = "text", tokenizer: str = "cl100k",
                  unescape: bool = True, max_shards: int | None = None) -> dict[str, RawDocument]:
    """RawDocument per match_id, reading each shard once (at most `max_shards` shards, in the order of `matches`:
    a shard is read up to its last wanted line, which on a pool of 1 GB shards is seconds per shard)."""
    out: dict[str, RawDocument] = {}
    by_shard: dict[str, list[dict]] = {}
    for m in matches:
        by_shard.setdefault(m["shard"], []).append(m)
    for k, (shard, rows) in enumerate(by_shard.items()):
        if not pool_dir:
            texts = {}
        elif max_shards is not None and k >= max_shards:
            texts = {int(m["line"]): LookupError(f"not read: the page reads at most {max_shards} shards") for m in rows}
        else:
            texts = read_lines(pool_dir, shard, {int(m["line"]) for m in rows}, content_key)
        for m in rows:
            t = texts.get(int(m["line"]), LookupError("no pool folder given"))
            if isinstance(t, Exception):
                out[m["match_id"]] = RawDocument(None, [], f"raw text unavailable ({t}); normalised text shown")
            else:
                out[m["match_id"]] = match_spans(t, m, tokenizer, unescape)
    return out
