"""One forward pass per item, summarised per item: the input of the PPL, bits-per-byte and Min-K% probes."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

from contam_assets.model.batching import LogFn
from contam_assets.model.loader import LoadedModel
from contam_assets.model.membership import DEFAULT_K, min_k, min_k_plus_plus
from contam_assets.model.scoring import score_texts


@dataclass(frozen=True)
class ItemScore:
    dataset: str  # e.g. gsm8k-test
    item: str  # row index within the set
    nll: float  # summed token cross-entropy, nats
    n_tokens: int  # non-pad tokens including the first (OpenCompass's denominator)
    n_predicted: int
    n_chars: int
    n_bytes: int
    mink: float | None
    minkpp: float | None
    truncated: bool

    @property
    def opencompass_ppl(self) -> float | None:
        """OpenCompass ``_get_ppl``: summed CE / number of non-pad tokens."""
        return self.nll / self.n_tokens if self.n_tokens else None

    def as_row(self) -> dict:
        return asdict(self)


def score_sets(
    lm: LoadedModel, sets: Mapping[str, Sequence[str]], k: float = DEFAULT_K, log: LogFn | None = None
) -> list[ItemScore]:
    """ItemScores for every text of every named set (Min-K% and Min-K%++ at ``k``)."""
    out: list[ItemScore] = []
    for name, texts in sets.items():
        scores = score_texts(lm, list(texts), vocab_stats=True, log=log, what=f"scoring {name}")
        for i, s in enumerate(scores):
            out.append(
                ItemScore(
                    dataset=name,
                    item=str(i),
                    nll=s.nll,
                    n_tokens=s.n_tokens,
                    n_predicted=s.n_predicted,
                    n_chars=s.n_chars,
                    n_bytes=s.n_bytes,
                    mink=min_k(s.logprobs, k),
                    minkpp=min_k_plus_plus(s.logprobs, s.mu, s.sigma, k) if s.mu is not None else None,
                    truncated=s.truncated,
                )
            )
    return out


@dataclass
class ScoredSets:
    """ItemScores of every set that could be scored, and why the others were not."""

    items: list[ItemScore]
    skipped: dict[str, str]
    bad_rows: dict[str, int]
    device: str = ""
    dtype: str = ""

    def datasets(self) -> list[str]:
        return sorted({it.dataset for it in self.items})


def by_dataset(items: Sequence[ItemScore]) -> dict[str, list[ItemScore]]:
    groups: dict[str, list[ItemScore]] = {}
    for it in items:
        groups.setdefault(it.dataset, []).append(it)
    return groups
