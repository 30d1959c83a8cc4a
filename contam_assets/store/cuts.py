"""Span removal (`contam detect --removal span`): cut each matched span out of a document and keep the rest.

GPT-3 (Brown et al. 2020, appendix C) removed each colliding 13-gram with 200
characters on either side and kept the rest of the document.  Decon and seed 003
remove whole documents instead: a document with a hole where the evidence was is
harder to audit and may no longer read coherently.  Whole documents stay the
default; this is the policy beside it.  Every cut is listed (table ``cuts``, the
report), and the mix counts cut documents apart from written and dropped ones.

``cut_spans`` is the rule, a pure function of one raw JSONL line; ``SpanCutter``
feeds it the removable matches of one shard (the same decisions as ``removals``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import duckdb
import polars as pl

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.spans import char_spans
from contam_assets.store.tables import REMOVABLE_SQL, REMOVES

MARGIN = 200  # characters cut on either side of a matched span (GPT-3)
PREVIEW = 300  # characters of the removed text kept in the cuts table
CUT_SCHEMA = {"shard": pl.Utf8, "line": pl.Int32, "doc_id": pl.Utf8, "cut_start": pl.Int64, "cut_end": pl.Int64,
              "span_start": pl.Int64, "span_end": pl.Int64, "match_ids": pl.Utf8, "removed_text": pl.Utf8}


def cut_spans(raw: bytes, content_key: str, spans: list[tuple[int, int]], margin: int = MARGIN) -> tuple[bytes | None, list[dict]]:
    """(the line with every span cut out, the cuts) for one JSONL line.

    ``spans``: [start, end) characters of the line's ``content_key`` string.  Each span
    widens by ``margin`` on either side (clipped to the text); overlapping or touching
    cuts merge.  The pieces left are joined by a newline; every other key of the object
    is kept, in order.  The line is None when nothing but whitespace is left (the
    document is dropped).  A cut: cut_start, cut_end (characters removed), span_start,
    span_end (the matched characters inside it) and the removed text.
    Raises ValueError for a line that is not a JSON object with a string at ``content_key``.
    """
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a JSON line: {exc}") from exc
    if not isinstance(obj, dict) or not isinstance(obj.get(content_key), str):
        raise ValueError(f"no string at key {content_key!r}")
    text = obj[content_key]
    merged: list[list[int]] = []
    for s, e in sorted((max(0, s), min(len(text), e)) for s, e in spans if e > s):
        # GPT-3's rule: the matched span and `margin` characters on either side go
        a, b = max(0, s - margin), min(len(text), e + margin)
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
            merged[-1][2], merged[-1][3] = min(merged[-1][2], s), max(merged[-1][3], e)
        else:
            merged.append([a, b, s, e])
    cuts = [dict(cut_start=a, cut_end=b, span_start=s, span_end=e, removed_text=text[a:b]) for a, b, s, e in merged]
    pieces, pos = [], 0
    for a, b, _, _ in merged:
        pieces.append(text[pos:a])
        pos = b
    pieces.append(text[pos:])
    kept = "\n".join(p for p in pieces if p)
    if not kept.strip():
        return None, cuts
    obj[content_key] = kept
    return json.dumps(obj, ensure_ascii=False).encode("utf-8"), cuts


@dataclass
class SpanCutter:
    """Cuts the removable matches out of one shard's documents, as ``write_mix_shard`` copies it."""

    shard: str
    cfg: DetectConfig
    content_key: str
    matches: dict[int, list[dict]]  # line -> its removable match rows
    cuts: list[dict] = field(default_factory=list)
    whole: dict[int, str] = field(default_factory=dict)  # line -> why the whole document went instead

    @property
    def lines(self) -> set[int]:
        return set(self.matches)

    def __call__(self, line: int, raw: bytes) -> bytes | None:
        rows = self.matches[line]
        token_spans, ids = [], []
        for r in rows:
            for a, b in (("question_start", "question_end"), ("answer_start", "answer_end"), ("passage_start", "passage_end")):
                if r[a] is not None and r[b] is not None:
                    token_spans.append((int(r[a]), int(r[b])))
            ids.append(r["match_id"])
        if any(r["question_start"] is None for r in rows):
            self.whole[line] = "a paraphrase match has no token span"  # paraphrase rows: found by meaning, not tokens
            return None
        try:
            text = json.loads(raw.decode("utf-8"))[self.content_key]
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
            self.whole[line] = "unreadable line"
            return None
        spans = char_spans(text, self.cfg, token_spans, n_tokens=int(rows[0]["doc_tokens"]))
        if spans is None:
            self.whole[line] = "matched tokens do not map back to the text"
            return None
        new, cuts = cut_spans(raw, self.content_key, spans)
        for c in cuts:
            self.cuts.append(dict(shard=self.shard, line=line, doc_id=rows[0]["doc_id"], match_ids=",".join(sorted(ids)),
                                  **{k: v for k, v in c.items() if k != "removed_text"},
                                  removed_text=c["removed_text"][:PREVIEW]))
        if new is None:
            self.whole[line] = "nothing left after the cuts"
        return new

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.cuts, schema=CUT_SCHEMA) if self.cuts else pl.DataFrame(schema=CUT_SCHEMA)


def span_cutter(con: duckdb.DuckDBPyConnection, shard: str, cfg: DetectConfig, content_key: str) -> SpanCutter:
    """The cutter of ``shard``: every match whose document ``removals`` lists, by line."""
    rows = con.execute(f"""select line, match_id, doc_id, doc_tokens, question_start, question_end, answer_start, answer_end,
                                  passage_start, passage_end
                           from ({REMOVABLE_SQL}) r where r.shard = ? and {REMOVES} order by line, match_id""", [shard])
    cols = [d[0] for d in rows.description]
    by_line: dict[int, list[dict]] = {}
    for values in rows.fetchall():
        r = dict(zip(cols, values))
        by_line.setdefault(int(r["line"]), []).append(r)
    return SpanCutter(shard=shard, cfg=cfg, content_key=content_key, matches=by_line)
