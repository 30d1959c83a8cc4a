"""One forward pass per item and convention, summarised per item: the input of the PPL, bits-per-byte and Min-K% probes.

Each text is scored in OpenCompass's tokenization (special tokens, left
truncation: ``nll``, ``n_tokens``, Min-K%, bytes) and in Skywork's
(``add_special_tokens=False``: ``sk_*``, what Δ1 and Δ2 use).  When both give
the same ids (GPT-2-style tokenizers, which add nothing) the first pass is
reused; a tokenizer that prepends BOS costs a second, cheaper pass (no
vocabulary statistics).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

from contam_assets.model.batching import LogFn
from contam_assets.model.loader import LoadedModel
from contam_assets.model.membership import DEFAULT_K, min_k, min_k_plus_plus
from contam_assets.model.scoring import SKYWORK_MAX_TOKENS, encode_opencompass, encode_skywork, score_encoded


@dataclass(frozen=True)
class ItemScore:
    dataset: str  # e.g. gsm8k-test
    item: str  # row index within the set
    nll: float  # summed token cross-entropy, nats (OpenCompass tokenization)
    n_tokens: int  # non-pad tokens including the first (OpenCompass's denominator)
    n_predicted: int
    n_chars: int
    n_bytes: int
    mink: float | None
    minkpp: float | None
    truncated: bool
    sk_nll: float | None = None  # summed cross-entropy in Skywork's tokenization (no special tokens)
    sk_predicted: int = 0  # tokens predicted there (Skywork's denominator: tokens - 1)
    sk_tokens: int = 0
    sk_end_logprob: float | None = None  # log p(EOS | text): Skywork's batches add -this for shorter texts
    sk_cut: bool = False  # Skywork's character or token cap shortened the text
    same_tokens: bool = True  # both conventions tokenized the text identically

    @property
    def opencompass_ppl(self) -> float | None:
        """OpenCompass ``_get_ppl``: summed CE / number of non-pad tokens."""
        return self.nll / self.n_tokens if self.n_tokens else None

    def as_row(self) -> dict:
        return asdict(self)


def score_sets(
    lm: LoadedModel,
    sets: Mapping[str, Sequence[str]],
    k: float = DEFAULT_K,
    log: LogFn | None = None,
    skywork_max_tokens: int = SKYWORK_MAX_TOKENS,
) -> list[ItemScore]:
    """ItemScores for every text of every named set (Min-K% and Min-K%++ at ``k``), both conventions."""
    out: list[ItemScore] = []
    for name, texts in sets.items():
        texts = list(texts)
        oc_enc = [encode_opencompass(lm, t) for t in texts]
        sk_enc = [encode_skywork(lm, t, skywork_max_tokens) for t in texts]
        oc = score_encoded(lm, texts, oc_enc, vocab_stats=True, log=log, what=f"scoring {name}", end_token=lm.end_id)
        differ = [i for i in range(len(texts)) if sk_enc[i].ids != oc_enc[i].ids]
        sk = dict(enumerate(oc))
        if differ:
            again = score_encoded(lm, [texts[i] for i in differ], [sk_enc[i] for i in differ], log=log,
                                  what=f"scoring {name} (Skywork tokenization)", end_token=lm.end_id)
            sk.update(zip(differ, again))
        for i, s in enumerate(oc):
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
                    sk_nll=sk[i].nll,
                    sk_predicted=sk[i].n_predicted,
                    sk_tokens=sk[i].n_tokens,
                    sk_end_logprob=sk[i].end_logprob,
                    sk_cut=sk_enc[i].truncated,
                    same_tokens=i not in differ,
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
    baseline: list[ItemScore] = field(default_factory=list)  # the same sets under --baseline-checkpoint
    baseline_info: dict = field(default_factory=dict)
    k: float = DEFAULT_K
    skywork_batch_size: int = 1

    def datasets(self) -> list[str]:
        return sorted({it.dataset for it in self.items})


def by_dataset(items: Sequence[ItemScore]) -> dict[str, list[ItemScore]]:
    groups: dict[str, list[ItemScore]] = {}
    for it in items:
        groups.setdefault(it.dataset, []).append(it)
    return groups
