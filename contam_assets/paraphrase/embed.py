"""Static embedders: a text's vector is the mean of its tokens' vectors, so any window of a
tokenized document is embedded from sums at its sentence bounds in O(dimensions), without running a
model again.

The default is WordLlama's ``l2_supercat_256`` (the 16 MB table shipped inside the ``wordllama``
wheel, with its tokenizer file): nothing is downloaded.  ``load_embedder(path)`` reads a local
model2vec folder instead (``model.safetensors`` with an ``embeddings`` table, ``tokenizer.json``).
docs/paraphrase.md gives the measured choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

DEFAULT = "wordllama"


class EmbedderError(ValueError):
    """An embedder cannot be loaded; the message says what is missing."""


@dataclass
class StaticEmbedder:
    name: str
    table: np.ndarray  # (vocabulary, dimensions) float32
    tokenizer: object  # tokenizers.Tokenizer

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
        ``(sums[j] - sums[i]) / (tokens[j] - tokens[i])``; the tokens between two cuts are summed in one
        ``np.add.reduceat`` (no running sum over every token)."""
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        ids = np.asarray(enc.ids, dtype=np.int64)
        starts = np.asarray([s for s, _ in enc.offsets], dtype=np.int64)
        tokens = np.searchsorted(starts, cuts)  # a token belongs to the window its first character is in
        sums = np.zeros((len(cuts), self.table.shape[1]), dtype=np.float32)
        n = len(ids)
        if n == 0:
            return sums, tokens
        idx = np.unique(np.concatenate(([0], tokens[tokens < n])))
        run = np.zeros((len(idx) + 1, self.table.shape[1]), dtype=np.float32)
        np.cumsum(np.add.reduceat(self.table[ids], idx, axis=0), axis=0, out=run[1:])  # run[k]: before idx[k]
        sums[:] = run[np.where(tokens >= n, len(idx), np.searchsorted(idx, tokens))]
        return sums, tokens


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
