"""Token log-probabilities of texts under a loaded model, in padded batches.

Every text is tokenized with the tokenizer's own special tokens (as
OpenCompass does) and truncated to the model's context.  Token ``t`` is
scored from tokens ``< t``; the first token has no prediction.  Optionally the
mean and standard deviation of ``log p`` over the vocabulary are kept per
position (Min-K%++).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from contam_assets.model.batching import LogFn, Progress, pack_batches, pad
from contam_assets.model.loader import LoadedModel


@dataclass
class TokenScores:
    n_tokens: int  # real (non-pad) tokens, special tokens included: OpenCompass's denominator
    logprobs: np.ndarray  # log p of tokens 1..n-1 (natural log)
    n_chars: int  # characters of the predicted span of the text
    n_bytes: int  # UTF-8 bytes of the predicted span
    truncated: bool = False
    mu: np.ndarray | None = None  # E_z[log p(z)] over the vocabulary, per predicted position
    sigma: np.ndarray | None = None  # std of log p(z) over the vocabulary

    @property
    def nll(self) -> float:
        return float(-self.logprobs.sum())

    @property
    def n_predicted(self) -> int:
        return int(self.logprobs.size)


def score_texts(
    lm: LoadedModel,
    texts: Sequence[str],
    vocab_stats: bool = False,
    padding_side: str = "right",
    log: LogFn | None = None,
    what: str = "scoring",
) -> list[TokenScores]:
    """TokenScores for every text, in input order."""
    import torch

    encoded = [_encode(lm, t) for t in texts]
    results: list[TokenScores | None] = [None] * len(texts)
    progress = Progress(what, len(texts), log)
    lengths = [len(ids) for ids, _, _ in encoded]
    for batch in pack_batches(lengths, lm.token_budget):
        rows = [encoded[i][0] for i in batch]
        if max(len(r) for r in rows) == 0:
            for i in batch:
                empty = np.zeros(0) if vocab_stats else None
                results[i] = _scores(texts[i], encoded[i], np.zeros(0), empty, empty)
            progress.advance(len(batch))
            continue
        rows_nonempty = [r if r else [lm.pad_id] for r in rows]
        ids, mask, positions = pad(rows_nonempty, lm.pad_id, padding_side)
        with torch.inference_mode():
            logits = lm.model(
                input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device), position_ids=positions.to(lm.device)
            ).logits
        width = ids.shape[1]
        for b, i in enumerate(batch):
            n = len(rows[b])
            start = width - n if padding_side == "left" else 0
            row_logits = logits[b, start : start + n - 1].float() if n > 1 else logits[b, :0].float()
            targets = ids[b, start + 1 : start + n].to(lm.device)
            logp, mu, sigma = _row_stats(row_logits, targets, vocab_stats)
            results[i] = _scores(texts[i], encoded[i], logp, mu, sigma)
        progress.advance(len(batch))
    return results  # type: ignore[return-value]


def _row_stats(row_logits, targets, vocab_stats: bool):
    import torch

    logp_all = torch.log_softmax(row_logits, dim=-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if not vocab_stats:
        return logp.double().cpu().numpy(), None, None
    p = logp_all.exp()
    mu = (p * logp_all).sum(-1)
    sigma = (p * (logp_all - mu.unsqueeze(-1)).square()).sum(-1).sqrt()  # two-pass: no cancellation
    return logp.double().cpu().numpy(), mu.double().cpu().numpy(), sigma.double().cpu().numpy()


def _encode(lm: LoadedModel, text: str) -> tuple[list[int], tuple[int, int], bool]:
    """(ids, predicted char span, truncated)."""
    ids, offsets = lm.encode(text)
    truncated = len(ids) > lm.max_len
    if truncated:
        ids = ids[: lm.max_len]
        offsets = offsets[: lm.max_len] if offsets else None
    if offsets and ids:
        # The first token is never predicted: its characters do not count.
        # Special tokens (BOS) carry an empty (0, 0) span.
        start = offsets[0][1]
        end = max(o[1] for o in offsets) if truncated else len(text)
        span = (min(start, end), end)
    else:
        span = (0, len(text))  # slow tokenizer: no offsets, count the whole text
    return ids, span, truncated


def _scores(text: str, encoded, logp, mu, sigma) -> TokenScores:
    ids, (start, end), truncated = encoded
    piece = text[start:end]
    return TokenScores(
        n_tokens=len(ids),
        logprobs=logp,
        n_chars=len(piece),
        n_bytes=len(piece.encode("utf-8")),
        truncated=truncated,
        mu=mu,
        sigma=sigma,
    )
