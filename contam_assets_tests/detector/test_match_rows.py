"""A match row's JSON columns, written directly by matches.py, are what json.dumps writes: the stored text of
`training_segments` and `answer_spans` does not change with the way it is made (rows of earlier scans and of
rescans are compared and merged as strings)."""

from __future__ import annotations

import json
import random

from contam_assets.detector.matches import _segments_json, _spans_json

# quotes, backslashes, control characters, non-ASCII, a lone surrogate (a broken line's text), U+2028
CHARS = ["a", '"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "中", "\ud800", "…", " ", "/", "\u2028", "😀"]


def test_segments_and_spans_json_equal_json_dumps():
    rng = random.Random(5)
    for _ in range(5000):
        segs = [{"kind": rng.choice(["context", "question", "answer", "passage"]),
                 "text": "".join(rng.choice(CHARS) for _ in range(rng.randint(0, 12)))} for _ in range(rng.randint(0, 5))]
        assert _segments_json(segs) == json.dumps(segs, ensure_ascii=False)
        spans = [(rng.randint(0, 10**6), rng.randint(0, 10**6)) for _ in range(rng.randint(1, 4))]
        assert _spans_json(spans) == json.dumps([[a, b] for a, b in spans])
    assert json.loads(_segments_json([{"kind": "answer", "text": 'x = "1"\n'}])) == [{"kind": "answer", "text": 'x = "1"\n'}]
