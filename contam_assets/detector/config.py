"""Detector configuration and decon's presets.

Values follow decon's config/default.yaml and doc/repro/{olmo-web,olmo-synth}.yaml.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from contam_assets.detector.text import DEFAULT_PUNCTUATION, CleanOptions


@dataclass(frozen=True)
class DetectConfig:
    tokenizer: str = "cl100k"
    # question n-grams and sampling
    ngram_size: int = 5
    sample_every: int = 10
    question_max_consecutive_misses: int = 11
    # score threshold and length-adjusted bar
    threshold: float = 0.8
    decay_start: int = 20
    decay_end: int = 50
    # answers
    short_answer_token_threshold: int = 3
    short_answer_window: int = 50
    answer_ngram_size: int = 3
    min_long_answer_window: int = 100
    # passages
    min_passage_distance: int = 100
    passage_ngram_size: int = 4
    passage_max_consecutive_misses: int = 2
    # reference preprocessing
    eval_dedup: bool = True
    eval_min_token_length: int = 20
    eval_min_unique_words: int = 4
    index_passages: bool = True
    index_answers: bool = True
    # text cleaning
    punctuation: str = DEFAULT_PUNCTUATION
    unescape: bool = True  # beyond decon; False = exact decon parity
    # beyond decon: review and robustness
    report_floor: float = 0.5  # store every candidate scoring at least this, flagged or not
    candidate_question_floor: float = 0.5  # clusters below this question overlap are not scored at all
    max_doc_bytes: int = 8 * 1024 * 1024  # larger documents are rejected (counted, written to rejected/)
    # beyond decon: skip, before tokenizing, documents that provably hold no flagged match (prefilter.py).
    # Flags and removals are unchanged; near misses (stored, not flagged) of skipped documents are not kept.
    prefilter: bool = False

    @property
    def clean_options(self) -> CleanOptions:
        return CleanOptions(punctuation=self.punctuation, unescape=self.unescape)

    @property
    def min_doc_tokens(self) -> int:
        # decon rule: documents under ngram_size * 2 tokens are not scanned
        return self.ngram_size * 2

    @property
    def min_question_overlap(self) -> float:
        # decon rule: question overlap must reach (threshold - 0.2 - 0.1) / 0.7 before full scoring
        return max(0.0, (self.threshold - 0.2 - 0.1) / 0.7)

    def reference_key(self) -> dict:
        """Fields that change the reference set or the index (not scan-only knobs)."""
        keys = (
            "tokenizer", "ngram_size", "answer_ngram_size", "passage_ngram_size", "short_answer_token_threshold",
            "eval_dedup", "eval_min_token_length", "eval_min_unique_words", "index_passages", "index_answers",
            "punctuation", "unescape",
        )
        return {k: getattr(self, k) for k in keys}

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(dataclasses.asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    def replace(self, **kw) -> "DetectConfig":
        return dataclasses.replace(self, **kw)


PRESETS: dict[str, DetectConfig] = {
    "default": DetectConfig(),
    # doc/repro/olmo-web.yaml
    "olmo-web": DetectConfig(
        threshold=0.88, decay_start=25, decay_end=50, short_answer_token_threshold=1, short_answer_window=20,
        answer_ngram_size=2, min_long_answer_window=20, index_passages=False,
    ),
    # doc/repro/olmo-synth.yaml
    "olmo-synth": DetectConfig(
        threshold=0.78, decay_start=5, decay_end=26, short_answer_token_threshold=1, short_answer_window=50,
        answer_ngram_size=2, min_long_answer_window=50,
    ),
}


def preset(name: str, **overrides) -> DetectConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    cfg = PRESETS[name]
    overrides = {k: v for k, v in overrides.items() if v is not None}
    return cfg.replace(**overrides) if overrides else cfg
