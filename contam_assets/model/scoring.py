"""Token log-probabilities of texts under a loaded model, in padded batches, in two tokenization conventions.

- **OpenCompass** (``gsm8k-*-ppl``, Min-K%, bits per byte): the tokenizer's own
  special tokens (a Llama tokenizer prepends ``<s>``) and, for a text longer
  than the context, OpenCompass's left truncation (``truncation_side='left'``:
  the end of the text is kept; the special tokens stay).
- **Skywork** (Δ1, Δ2; ``eval_loss.py``): ``add_special_tokens=False``, the
  text first cut to ``max_tokens // 3`` characters and the tokens to
  ``max_tokens`` (Skywork's default 4096), keeping the start; also kept: the
  log-probability of the pad token (EOS) after the text, which Skywork's
  batched loss adds for every text shorter than the longest of its batch.

Token ``t`` is scored from tokens ``< t``; the first token has no prediction.
Optionally the mean and standard deviation of ``log p`` over the vocabulary
are kept per position (Min-K%++).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from contam_assets.model.batching import LogFn, Progress, pack_batches, pad
from contam_assets.model.loader import LoadedModel

SKYWORK_MAX_TOKENS = 4096  # eval_loss.py --max-tokens default (texts are first cut to max_tokens // 3 characters)


@dataclass(frozen=True)
class Encoded:
    ids: list[int]
    span: tuple[int, int]  # characters of the text covered by the predicted tokens (ids[1:])
    truncated: bool  # tokens or characters were cut to fit


@dataclass
class TokenScores:
    n_tokens: int  # real (non-pad) tokens, special tokens included: OpenCompass's denominator
    logprobs: np.ndarray  # log p of tokens 1..n-1 (natural log)
    n_chars: int  # characters of the predicted span of the text
    n_bytes: int  # UTF-8 bytes of the predicted span
    truncated: bool = False
    mu: np.ndarray | None = None  # E_z[log p(z)] over the vocabulary, per predicted position
    sigma: np.ndarray | None = None  # std of log p(z) over the vocabulary
    end_logprob: float | None = None  # log p(end token | whole text), when asked for
    ids: tuple[int, ...] = ()

    @property
    def nll(self) -> float:
        return float(-self.logprobs.sum())

    @property
    def n_predicted(self) -> int:
        return int(self.logprobs.size)


def encode_opencompass(lm: LoadedModel, text: str) -> Encoded:
    """OpenCompass ``get_ppl``'s tokenization: special tokens added, truncated on the left to the context."""
    ids, offsets = lm.encode(text)
    truncated = len(ids) > lm.max_len
    if truncated:
        ids, offsets = lm.encode(text, max_length=lm.max_len)
    return Encoded(ids, _span(text, ids, offsets), truncated)


def encode_skywork(lm: LoadedModel, text: str, max_tokens: int = SKYWORK_MAX_TOKENS) -> Encoded:
    """Skywork ``eval_loss.py``'s tokenization: ``text[:max_tokens // 3]``, no special tokens, the start kept."""
    cut = text[: max_tokens // 3]
    ids = list(lm.tokenizer(cut, add_special_tokens=False)["input_ids"])
    keep = min(max_tokens, lm.max_len)
    return Encoded(ids[:keep], (0, len(cut)), len(cut) < len(text) or len(ids) > keep)


def _span(text: str, ids: list[int], offsets) -> tuple[int, int]:
    if not offsets or len(ids) < 2:
        return (0, len(text)) if not offsets else (len(text), len(text))
    # Predicted tokens are ids[1:]; a special token (BOS) carries an empty (0, 0) span and is never predicted.
    start = offsets[1][0]
    return (min(start, len(text)), len(text))


def score_texts(
    lm: LoadedModel,
    texts: Sequence[str],
    vocab_stats: bool = False,
    padding_side: str = "right",
    log: LogFn | None = None,
    what: str = "scoring",
) -> list[TokenScores]:
    """TokenScores for every text (OpenCompass convention), in input order."""
    return score_encoded(lm, texts, [encode_opencompass(lm, t) for t in texts], vocab_stats, padding_side, log, what)


def score_encoded(
    lm: LoadedModel,
    texts: Sequence[str],
    encoded: Sequence[Encoded],
    vocab_stats: bool = False,
    padding_side: str = "right",
    log: LogFn | None = None,
    what: str = "scoring",
    end_token: int | None = None,
) -> list[TokenScores]:
    """TokenScores of already tokenized texts; ``end_token``: also log p(end_token | text) per text."""
    import torch

    results: list[TokenScores | None] = [None] * len(texts)
    progress = Progress(what, len(texts), log)
    for batch in pack_batches([len(e.ids) for e in encoded], lm.token_budget):
        rows = [encoded[i].ids for i in batch]
        if max(len(r) for r in rows) == 0:
            for i in batch:
                empty = np.zeros(0) if vocab_stats else None
                results[i] = _scores(texts[i], encoded[i], np.zeros(0), empty, empty, None)
            progress.advance(len(batch))
            continue
        ids, mask, positions = pad([r if r else [lm.pad_id] for r in rows], lm.pad_id, padding_side)
        with torch.inference_mode():
            logits = lm.model(
                input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device), position_ids=positions.to(lm.device)
            ).logits
        width = ids.shape[1]
        for b, i in enumerate(batch):
            n = len(rows[b])
            start = width - n if padding_side == "left" else 0
            row_logits = logits[b, start : start + n - 1].float() if n > 1 else logits[b, :0].float()
            targets = ids[b, start + 1 : start + n].to(logits.device)
            logp, mu, sigma = _row_stats(row_logits, targets, vocab_stats)
            end = None
            if end_token is not None and n > 0:
                end = float(torch.log_softmax(logits[b, start + n - 1].float(), dim=-1)[end_token])
            results[i] = _scores(texts[i], encoded[i], logp, mu, sigma, end)
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


def _scores(text: str, enc: Encoded, logp, mu, sigma, end) -> TokenScores:
    piece = text[enc.span[0] : enc.span[1]]
    return TokenScores(
        n_tokens=len(enc.ids),
        logprobs=logp,
        n_chars=len(piece),
        n_bytes=len(piece.encode("utf-8")),
        truncated=enc.truncated,
        mu=mu,
        sigma=sigma,
        end_logprob=end,
        ids=tuple(enc.ids),
    )
