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
    # beyond decon: the parts of the `thorough` preset (docs/detector.md "Beyond decon"), each off in decon's
    # presets and each switchable on its own (THOROUGH_PARTS, `contam detect --markup` ...)
    markup: bool = False  # decode HTML/XML references and remove tags before cleaning, on both sides (text.py)
    dense_short_questions: bool = False  # questions under ngram_size + sample_every - 1 tokens: every position (short.py)
    question_only: bool = False  # a long question found whole without its answer is held for review (rules.py)
    question_only_min_tokens: int = 20  # question tokens the rule needs
    question_only_overlap: float = 0.95  # question overlap the rule needs ("near 1.0")
    answer_suites: bool = False  # derived `<task>_answer` suites where answers are long, held for review (reference.py)
    answer_suite_min_words: int = 10  # median answer words a task needs for an answer suite; answers shorter are left out
    dump_min_items: int = 0  # > 0: a document holding this many distinct instances of one task is a dump (rules.py)
    near_duplicates: bool = False  # datasketch MinHash LSH candidates on document windows, verified exactly (neardup.py)
    reference_overlap: bool = False  # MinHash LSH over the reference set itself: twins of every instance (overlap.py)

    @property
    def clean_options(self) -> CleanOptions:
        return CleanOptions(punctuation=self.punctuation, unescape=self.unescape, markup=self.markup)

    @property
    def thorough_parts(self) -> list[str]:
        """The THOROUGH_PARTS this config has switched on."""
        return [name for name, kw in THOROUGH_PARTS.items() if all(getattr(self, k) == v for k, v in kw.items())]

    @property
    def short_question_tokens(self) -> int:
        # decon rule: every `sample_every`-th n-gram is looked up, so a question of fewer than
        # ngram_size + sample_every - 1 tokens (under sample_every n-grams) can be stepped over
        return self.ngram_size + self.sample_every - 1

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
        out = {k: getattr(self, k) for k in keys}
        # thorough fields join the key only when switched on, so decon's presets keep their digests
        for k in ("markup", "answer_suites", "answer_suite_min_words", "reference_overlap"):
            if getattr(self, k) != _DEFAULTS[k] and (k != "answer_suite_min_words" or self.answer_suites):
                out[k] = getattr(self, k)
        return out

    def digest(self) -> str:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k not in _THOROUGH_FIELDS or v != _DEFAULTS[k]}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    def replace(self, **kw) -> "DetectConfig":
        return dataclasses.replace(self, **kw)


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(DetectConfig)}
_THOROUGH_FIELDS = ("markup", "dense_short_questions", "question_only", "question_only_min_tokens", "question_only_overlap",
                    "answer_suites", "answer_suite_min_words", "dump_min_items", "near_duplicates", "reference_overlap")
# The parts of `thorough`, by the name a user switches each on with (contam detect --markup, CONTAM_PARTS=markup,...)
THOROUGH_PARTS: dict[str, dict] = {
    "markup": {"markup": True},
    "short_questions": {"dense_short_questions": True},
    "question_only": {"question_only": True},
    "answer_suites": {"answer_suites": True},
    "dumps": {"dump_min_items": 3},
    "near_duplicates": {"near_duplicates": True},
    "reference_overlap": {"reference_overlap": True},
}


def with_parts(cfg: DetectConfig, parts) -> DetectConfig:
    """``cfg`` with the named THOROUGH_PARTS switched on (an unknown name is an error that lists the known ones)."""
    kw: dict = {}
    for name in parts:
        if name not in THOROUGH_PARTS:
            raise ValueError(f"unknown detector part {name!r}; choose from {', '.join(THOROUGH_PARTS)}")
        kw.update(THOROUGH_PARTS[name])
    return cfg.replace(**kw) if kw else cfg


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
# beyond decon: decon's default with every part of THOROUGH_PARTS (docs/detector.md, docs/quality.md)
PRESETS["thorough"] = with_parts(PRESETS["default"], THOROUGH_PARTS)


def preset(name: str, **overrides) -> DetectConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    cfg = PRESETS[name]
    overrides = {k: v for k, v in overrides.items() if v is not None}
    return cfg.replace(**overrides) if overrides else cfg
