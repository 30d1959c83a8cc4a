"""Every fast path of the scan equals its plain reference implementation on random input.

* clean_text (bytes.translate / split fast path) == clean_text_reference (str.translate + regex);
* the cl100k word cache == tiktoken's encode_ordinary of " " + cleaned text;
* batched n-gram hashing and exact key lookup == per-document hashing and searchsorted.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from contam_assets.detector.text import (
    DEFAULT_PUNCTUATION,
    MAX_WORD_CHARS,
    CleanOptions,
    clean_text,
    clean_text_reference,
    clean_words,
)

WHITESPACE = [chr(c) for c in range(0x3001) if chr(c).isspace()]
PIECES = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    + list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
    + [chr(c) for c in range(32)] + ["\x7f"]
    + WHITESPACE + ["\u200b", "\u180e", "\ufeff"]
    + list("\u201c\u201d\u2018\u2019\u2014\u2013\u00ab\u00bb\u2026")
    + list("\u00c9\u00e9\u0130\u00df\u03a3\u03c3\u03c2\u0391\u1e9e\u2126\u212a\u0149\ufb01")
    + list("\u4e2d\u6587\u3042\uac00") + ["\U0001F600", "\u0301", "\u00a0", "\ud800", "\udfff"]
    + ["\\uD83D\\uDE00", "\ud83d\ude00", "\\n", "\\t", "\\\"", "\\'", "\\\\", "\\/", "\\u00e9", "\\u0041", "\\uD83D", "\\x41", "\\", "\\u12"]
    + ["<|endoftext|>", "<|fim_prefix|>", " ", "  ", "\n\n", "\r\n"]
)


def random_text(rng: random.Random, n: int | None = None) -> str:
    n = n if n is not None else rng.randint(0, 80)
    parts = []
    for _ in range(n):
        r = rng.random()
        if r < 0.05:
            parts.append(rng.choice("abcxyz0123") * rng.randint(MAX_WORD_CHARS - 3, 3 * MAX_WORD_CHARS + 5))
        elif r < 0.45:
            parts.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCDE") for _ in range(rng.randint(1, 9))) + " ")
        else:
            parts.append(rng.choice(PIECES))
    return "".join(parts)


def random_options(rng: random.Random) -> CleanOptions:
    if rng.random() < 0.6:
        return CleanOptions(unescape=rng.random() < 0.7)
    extra = "".join(rng.choice(PIECES[:120] + ["A", "\u00c9", "\u00e9", " ", "\t", "\\", "\u0130"]) for _ in range(rng.randint(0, 6)))
    base = DEFAULT_PUNCTUATION if rng.random() < 0.5 else "".join(rng.sample(DEFAULT_PUNCTUATION, 8))
    return CleanOptions(punctuation=base + extra, unescape=rng.random() < 0.5)


def test_clean_text_fast_path_equals_reference_on_random_input():
    rng = random.Random(6)
    for _ in range(6000):
        text = random_text(rng)
        opts = random_options(rng)
        want = clean_text_reference(text, opts)
        assert clean_text(text, opts) == want, (text, opts)
        assert clean_words(text, opts) == [w.encode("utf-8", "surrogatepass") for w in want.split(" ") if w]


@pytest.mark.parametrize("text", [
    "", "   ", "ABC", "Hello, World!", "caf\u00e9 \u201cquoted\u201d \u2014 dash", "a\x1cb\x1fc", "x" * 1000,
    "tab\tand\nnew\\nline \\\"q\\\" \\u00e9\\u0301", "\u0130stanbul \u03a3\u039f\u03a3", "\ud800 lone",
])
def test_clean_text_fast_path_equals_reference_on_edge_cases(text):
    for opts in (CleanOptions(), CleanOptions(unescape=False), CleanOptions(punctuation="A\u00c9 \t")):
        assert clean_text(text, opts) == clean_text_reference(text, opts)


def test_cl100k_word_cache_equals_tiktoken_on_random_and_real_text(shared_data):
    from contam_assets.detector.config import DetectConfig
    from contam_assets.detector.tokenize import _WordCache, get_tokenizer
    from contam_assets.testing.throughput_planted import build_detector, planted_documents

    tok = get_tokenizer("cl100k")
    rng = random.Random(7)
    texts = []
    for _ in range(1500):
        raw = random_text(rng)
        texts.append(clean_text(raw, random_options(rng)))  # cleaned form: the cache path
        if rng.random() < 0.2:
            texts.append(raw)  # not cleaned: must fall back to tiktoken on the whole text
    records, _, _ = build_detector(shared_data, DetectConfig())
    texts += [clean_text(t) for _, t in planted_documents(records, shared_data, n=120, seed=11)]
    texts += [" leading", "trailing ", "two  spaces", "", "x", "<|endoftext|> special", "a\u00a0b"]
    for cache_size, batch in ((1 << 17, tok._encode_word_batch), (50, tok._encode_word_batch), (1 << 17, None)):
        # misses encoded in one call or one by one; a tiny cache starts over mid-batch
        tok.cache = _WordCache(tok._encode_word, max_words=cache_size, encode_batch=batch)
        for i in range(0, len(texts), 97):  # several batches, so later ones hit the cache
            batch = texts[i : i + 97]
            got = tok.encode_many(batch)
            for t, g in zip(batch, got):
                want = tok.encode_reference(t)
                assert g.dtype == np.uint64 and np.array_equal(g, want), t
        assert tok.encode(texts[0]).tolist() == tok.encode_reference(texts[0]).tolist()
    tok.cache = _WordCache(tok._encode_word, encode_batch=tok._encode_word_batch)


def test_count_non_space_lookup_table_equals_isin():
    from contam_assets.detector.tokenize import get_tokenizer

    tok = get_tokenizer("cl100k")
    spaces = tok._spaces()
    rng = np.random.default_rng(3)
    for _ in range(300):
        ids = rng.integers(0, 100300, size=int(rng.integers(0, 60))).astype(np.uint64)  # some ids past the vocabulary
        if len(ids):
            ids[::3] = rng.choice(spaces, size=len(ids[::3]))
        assert tok.count_non_space(ids) == int(len(ids) - np.isin(ids, spaces).sum())


def test_batched_scan_equals_per_document_scan(shared_data):
    from contam_assets.detector.config import DetectConfig
    from contam_assets.detector.scan import scan_many, scan_tokens
    from contam_assets.detector.tokenize import get_tokenizer
    from contam_assets.testing.throughput_planted import build_detector, planted_documents
    from contam_assets_tests.detector.test_prefilter_recall import adversarial_documents

    for cfg in (DetectConfig(), DetectConfig(report_floor=0.0, candidate_question_floor=0.0), DetectConfig(threshold=0.3)):
        records, index, _ = build_detector(shared_data, DetectConfig())
        tok = get_tokenizer(cfg.tokenizer)
        texts = [t for _, t in planted_documents(records, shared_data, n=120, seed=3)] + adversarial_documents(records, n=120, seed=5)
        tokens = tok.encode_many([clean_text(t) for t in texts])
        got = scan_many(index, tokens, cfg)
        want = [scan_tokens(index, t, cfg) for t in tokens]
        assert got == want
        assert sum(map(len, want)) > 20


def _parse_line_reference(raw: bytes, line: int, shard: str, content_key: str, max_doc_bytes: int):
    from contam_assets.store.pool import Reject, parse_line_plain

    body = raw.rstrip(b"\r\n")
    if len(body) > max_doc_bytes:
        return Reject(line, f"too_large ({len(body)} bytes > {max_doc_bytes})", body)
    if not body.strip():
        return Reject(line, "empty_line", body)
    return parse_line_plain(body, line, shard, content_key)


def test_parse_line_fast_path_equals_the_json_module():
    import json

    from contam_assets.store.pool import parse_line

    rng = random.Random(5)
    values = ["plain text", "", "   ", "\u3000\u00a0", "caf\u00e9 \\n", 7, 2**70, -2**63, 1.5, 1e300, True, None,
              [1, 2], {"a": 2**80}, "\ud83d\ude00 emoji", "x" * 300]
    raw_values = [b'NaN', b'Infinity', b'-Infinity', b'1e999', b'123456789012345678901234567890', b'"\\ud800"',
                  b'"\\udc00\\ud800"', b'"a\\u0000b"', b'"tab\\tnew\\nline"', b'"\xff"', b'"\xc3\xa9"', b'18446744073709551615']
    lines = [b"", b"   ", b"\t\r\n", b"\xef\xbb\xbf{\"text\": \"x\"}", b"[1, 2]", b'"just a string"', b'{"text": "a",}',
             b'{"text": "dup", "text": "last"}', b'{"text": "x"} trailing', b"{" * 50 + b"}" * 50, b'{"text": "\x01"}',
             b'{"id": 1, "text": "ok"}\r\n', b'{"text": "x"}' + b" " * 10]
    for _ in range(3000):
        obj = {}
        for k in rng.sample(["text", "id", "source", "other", "body"], rng.randint(0, 4)):
            obj[k] = rng.choice(values)
        line = json.dumps(obj, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
        if rng.random() < 0.3:  # splice a raw JSON value the dumper would not write
            key = rng.choice(["text", "id", "source"])
            line = b'{"' + key.encode() + b'": ' + rng.choice(raw_values) + (b', "text": "t"}' if key != "text" else b"}")
        lines.append(line)
    for i, line in enumerate(lines):
        for key, limit in (("text", 1 << 20), ("body", 1 << 20), ("text", 40)):
            assert parse_line(line, i, "s.jsonl", key, limit) == _parse_line_reference(line, i, "s.jsonl", key, limit), line


def test_word_batch_encoding_equals_one_call_per_word():
    from contam_assets.detector.tokenize import get_tokenizer

    tok = get_tokenizer("cl100k")
    rng = random.Random(8)
    alphabet = list("abcxyzABC0123456789") + ["\u00e9", "\u4e2d", "\U0001F600", "\ud800", "\udc00", "\ud83d\ude00", "<|endoftext|>", "'s", "\u0301"]
    for _ in range(300):
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(rng.randint(0, 40))]
        if rng.random() < 0.5:
            words = [w.encode("utf-8", "surrogatepass") for w in words]
        flat, lens = tok._encode_word_batch(words)
        want = [tok._encode_word(w) for w in words]
        assert lens.tolist() == [len(t) for t in want] and flat.tolist() == [t for ts in want for t in ts], words
