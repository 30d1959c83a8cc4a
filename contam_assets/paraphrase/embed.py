"""Static embedders: a text's vector is the mean of its tokens' vectors, so any window of a
tokenized document is embedded from sums at its sentence bounds in O(dimensions), without running a
model again.

The default is WordLlama's ``l2_supercat_256`` (the 16 MB table shipped inside the ``wordllama``
wheel, with its tokenizer file): nothing is downloaded.  ``load_embedder(path)`` reads a local
model2vec folder instead (``model.safetensors`` with an ``embeddings`` table, ``tokenizer.json``).
docs/paraphrase.md gives the measured choice.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path

import numpy as np

DEFAULT = "wordllama"
SEGMENT_CHUNK = 2048  # tokens gathered at a time (2 MB of vectors: they stay in the cache while they are summed)


class EmbedderError(ValueError):
    """An embedder cannot be loaded; the message says what is missing."""


@dataclass
class StaticEmbedder:
    name: str
    table: np.ndarray  # (vocabulary, dimensions) float32
    tokenizer: object  # tokenizers.Tokenizer
    pieces: "PieceTokens | None" = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.pieces is None and PieceTokens.fits(self.tokenizer):
            self.pieces = PieceTokens(self.tokenizer)

    def encode(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(token ids, each token's first character) of ``text``, as the tokenizer gives them."""
        if self.pieces is not None:
            return self.pieces.encode(text)
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        return np.asarray(enc.ids, dtype=np.int64), np.asarray([s for s, _ in enc.offsets], dtype=np.int64)

    def token_ids(self, texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(e.ids, dtype=np.int64) for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit vectors, one row per text (a text without tokens gets a zero row)."""
        out = np.zeros((len(texts), self.table.shape[1]), dtype=np.float32)
        for i, ids in enumerate(self.token_ids(texts)):
            if len(ids):
                out[i] = self.table[ids].mean(axis=0)
        return normalize(out)

    def prefix_sums(self, text: str, cuts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(sum of the token vectors before each cut, shape (len(cuts), d); tokens before each cut) of one
        text, ``cuts`` sorted character offsets.  A window from cut i to cut j has the vector
        ``(sums[j] - sums[i]) / (tokens[j] - tokens[i])``; the tokens between two cuts are summed by
        ``np.add.reduceat`` (no running sum over every token)."""
        ids, starts = self.encode(text)
        tokens = np.searchsorted(starts, cuts)  # a token belongs to the window its first character is in
        sums = np.zeros((len(cuts), self.table.shape[1]), dtype=np.float32)
        n = len(ids)
        if n == 0:
            return sums, tokens
        idx = np.unique(np.concatenate(([0], tokens[tokens < n])))
        run = np.zeros((len(idx) + 1, self.table.shape[1]), dtype=np.float32)
        np.cumsum(self._segment_sums(ids, idx), axis=0, out=run[1:])  # run[k]: before idx[k]
        sums[:] = run[np.where(tokens >= n, len(idx), np.searchsorted(idx, tokens))]
        return sums, tokens

    def _segment_sums(self, ids: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """``np.add.reduceat(table[ids], idx, axis=0)``, the token vectors gathered about SEGMENT_CHUNK tokens at a
        time (whole segments: each is summed row after row as reduceat does, so the sums are the same to the bit)."""
        n = len(ids)
        if n <= SEGMENT_CHUNK:
            return np.add.reduceat(self.table[ids], idx, axis=0)
        out = np.empty((len(idx), self.table.shape[1]), dtype=np.float32)
        cut = np.flatnonzero(np.diff(idx // SEGMENT_CHUNK)) + 1  # the first segment of each chunk
        first, last = np.concatenate(([0], cut)), np.append(cut, len(idx))
        start, stop = idx[first], np.append(idx[cut], n)
        buf = np.empty((int((stop - start).max()), self.table.shape[1]), dtype=np.float32)
        for a, b, s0, s1 in zip(first.tolist(), last.tolist(), start.tolist(), stop.tolist()):
            part = buf[:s1 - s0]
            np.take(self.table, ids[s0:s1], axis=0, out=part)
            np.add.reduceat(part, idx[a:b] - s0, axis=0, out=out[a:b])
        return out


_HEAD = re.compile(r" *[^ ]+| +")  # a text's first piece
_KEY = re.compile(r" ( *[^ ]+| *)")  # every other piece starts at a space: the rest of it is its key


class PieceTokens:
    """A Llama-style BPE tokenizer (a space is "▁", one "▁" put before the text, no pre-tokenizer: the whole text
    is one word to it), run once per distinct piece and kept.  A piece is a run of spaces and the characters up to
    the next space; where no token of the vocabulary holds "▁" after another character, no merge joins two
    pieces, so the tokens of a text are those of its pieces, side by side (``fits`` checks the tokenizer's form
    and vocabulary).  A piece after the first one is " " + its key, and the tokens of " " + key there are those
    of the key alone (the "▁" put before it is the space); the first piece is its own key.
    A text holding "▁" or a special token's text goes to the tokenizer whole.  Ids and offsets are the
    tokenizer's, to the character (``contam_assets_tests/paraphrase/test_paraphrase_speed.py``)."""

    LIMIT = 200_000  # keys kept (about 25 MB); past it the cache starts again

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.specials = tuple({"▁"} | {t.content for t in tokenizer.get_added_tokens_decoder().values()})
        self.lock = threading.Lock()  # the kept pieces grow while a text is read: one text at a time
        self.reset()

    @staticmethod
    def fits(tokenizer) -> bool:
        """Whether ``tokenizer`` has the form this reads (the Llama 2 tokenizer WordLlama ships)."""
        try:
            spec = json.loads(tokenizer.to_str())
        except Exception:  # pragma: no cover - not a tokenizers.Tokenizer
            return False
        norm = spec.get("normalizer") or {}
        want = [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]
        model = spec.get("model") or {}
        return (norm.get("type") == "Sequence" and norm.get("normalizers") == want and spec.get("pre_tokenizer") is None
                and model.get("type") == "BPE" and not model.get("dropout") and tokenizer.token_to_id("▁") is not None
                and not any(re.search("[^▁]▁", t) for t in model.get("vocab", {})))

    def reset(self) -> None:
        self.index: dict[str, int] = {}  # key -> its number; its tokens: ids[first[k]:first[k] + count[k]]
        self.first, self.count = np.zeros(1 << 12, dtype=np.int64), np.zeros(1 << 12, dtype=np.int64)
        self.ids, self.rel = np.zeros(1 << 14, dtype=np.int64), np.zeros(1 << 14, dtype=np.int64)
        self.n_tokens = 0

    def _add(self, keys: list[str]) -> None:
        """Tokenize new keys in one call: each after a word and a space, where its tokens are its own."""
        lens = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys)) + 1
        sep = 1 + np.cumsum(lens) - lens  # the space before each key in "x key0 key1 ..."
        enc = self.tok.encode("x " + " ".join(keys), add_special_tokens=False)
        ids = np.asarray(enc.ids, dtype=np.int64)
        starts = np.asarray([s for s, _ in enc.offsets], dtype=np.int64)
        key = np.searchsorted(sep, starts, side="right") - 1
        ids, starts, key = ids[key >= 0], starts[key >= 0], key[key >= 0]
        count = np.bincount(key, minlength=len(keys))
        n, t = len(self.index), self.n_tokens
        if n + len(keys) > len(self.first):
            self.first, self.count = np.resize(self.first, 2 * (n + len(keys))), np.resize(self.count, 2 * (n + len(keys)))
        if t + len(ids) > len(self.ids):
            self.ids, self.rel = np.resize(self.ids, 2 * (t + len(ids))), np.resize(self.rel, 2 * (t + len(ids)))
        self.first[n:n + len(keys)] = t + np.cumsum(count) - count
        self.count[n:n + len(keys)] = count
        self.ids[t:t + len(ids)] = ids
        self.rel[t:t + len(ids)] = starts - sep[key] - 1  # from the key's first character: -1 is the space
        self.n_tokens += len(ids)
        self.index.update(zip(keys, range(n, n + len(keys))))

    def encode(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """(ids, first character of each token) of ``text``."""
        if not text.strip(" ") or any(s in text for s in self.specials):
            enc = self.tok.encode(text, add_special_tokens=False)
            return np.asarray(enc.ids, dtype=np.int64), np.asarray([s for s, _ in enc.offsets], dtype=np.int64)
        with self.lock:
            return self._encode(text)

    def _encode(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        head = _HEAD.match(text)
        keys = [head.group(0)] + _KEY.findall(text, head.end())
        pid = np.fromiter(map(self.index.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
        if len(pid) and pid.min() < 0:
            new = list(dict.fromkeys(keys[k] for k in np.flatnonzero(pid < 0).tolist()))
            if len(self.index) + len(new) > self.LIMIT:
                self.reset()
                new = list(dict.fromkeys(keys))
            self._add(new)
            pid = np.fromiter(map(self.index.__getitem__, keys), dtype=np.int64, count=len(keys))
        size = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys)) + 1  # each piece's length
        size[0] -= 1  # the first piece is its key as it is
        at = np.cumsum(size) - size + 1  # each key's first character, after its piece's space
        at[0] = 0  # the first key's first token holds the "▁" put before the text: it starts at 0 too (below)
        count = self.count[pid]
        end = np.cumsum(count)
        take = np.repeat(self.first[pid] - (end - count), count) + np.arange(int(end[-1]))
        starts = self.rel[take] + np.repeat(at, count)
        starts[0] = max(0, starts[0])
        return self.ids[take], starts



def normalize(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


_LOADED: dict[str, StaticEmbedder] = {}


def load_embedder(spec: str = DEFAULT) -> StaticEmbedder:
    """The bundled WordLlama model (``wordllama`` or empty) or a model2vec folder by path; kept per process."""
    spec = spec or DEFAULT
    if spec not in _LOADED:
        _LOADED[spec] = _wordllama() if spec == DEFAULT else _model2vec(Path(spec))
    return _LOADED[spec]


def _wordllama() -> StaticEmbedder:
    from safetensors import safe_open
    from tokenizers import Tokenizer

    try:
        import wordllama
    except ImportError:  # pragma: no cover - a dependency of the project
        raise EmbedderError("the paraphrase part needs the wordllama package (pip install wordllama)") from None
    # the wheel's own files, read directly: WordLlama.load() looks for the tokenizer under another folder
    # name and then tries the Hub, which is unreachable offline
    root = Path(wordllama.__file__).parent
    weights, tok = root / "weights" / "l2_supercat_256.safetensors", root / "tokenizers" / "l2_supercat_tokenizer_config.json"
    if not weights.is_file() or not tok.is_file():
        raise EmbedderError(f"wordllama's bundled model is missing under {root}; reinstall wordllama")
    with safe_open(str(weights), framework="np", device="cpu") as f:
        table = f.get_tensor("embedding.weight").astype(np.float32)
    return StaticEmbedder("wordllama:l2_supercat_256", table, Tokenizer.from_file(str(tok)))


def _model2vec(path: Path) -> StaticEmbedder:
    from safetensors import safe_open
    from tokenizers import Tokenizer

    weights, tok = path / "model.safetensors", path / "tokenizer.json"
    if not weights.is_file() or not tok.is_file():
        raise EmbedderError(f"{path} is not a model2vec folder (needs model.safetensors and tokenizer.json)")
    with safe_open(str(weights), framework="np", device="cpu") as f:
        keys = list(f.keys())
        if "embeddings" not in keys:
            raise EmbedderError(f"{weights} has no 'embeddings' table (has: {', '.join(keys[:5])})")
        table = f.get_tensor("embeddings").astype(np.float32)
    tokenizer = Tokenizer.from_file(str(tok))
    if tokenizer.get_vocab_size() > table.shape[0]:
        raise EmbedderError(f"{path}: the tokenizer has {tokenizer.get_vocab_size()} tokens, the table {table.shape[0]} rows")
    return StaticEmbedder(f"model2vec:{path.name}", table, tokenizer)
