"""Detector configuration, every knob named once, and decon's presets.

Values follow decon's config/default.yaml and doc/repro/{olmo-web,olmo-synth}.yaml.
`KNOBS` lists each knob with its unit, decon's name and the CLI flag: the CLI, the
Dagster resource, decon config files and the report's settings table all read it,
so a knob is spelled the same everywhere.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass

from contam_assets.detector.text import DEFAULT_PUNCTUATION, CleanOptions
from contam_assets.detector.tokenize import TOKENIZERS

DEDUP_BY = ("content", "fingerprint")


class ConfigError(ValueError):
    """A knob has a value the detector cannot run with; the message says how to fix it."""


@dataclass(frozen=True)
class DetectConfig:
    tokenizer: str = "cl100k"
    # question n-grams and sampling
    ngram_size: int = 5
    sample_every: int = 10
    question_max_consecutive_misses: int = 11
    # score threshold and length-adjusted bar (None: no perfect-match region / no end of interpolation)
    threshold: float = 0.8
    decay_start: int | None = 20
    decay_end: int | None = 50
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
    # beyond decon: the reference set (seed 003); decon mode turns all three off / to decon's rule
    derived_suites: bool = True  # `<task>_solution` suites of code tasks, held for review
    same_answer_rule: bool = True  # a suite whose answers are all one string is indexed on its question alone
    dedup_by: str = "content"  # content: sha256 of passage+question+answer; fingerprint: the record's field (decon)
    # beyond decon: review and robustness
    report_floor: float = 0.5  # store every candidate scoring at least this, flagged or not
    candidate_question_floor: float = 0.5  # clusters below this question overlap are not scored at all
    max_doc_bytes: int = 8 * 1024 * 1024  # larger documents are rejected (counted, written to rejected/)
    # beyond decon: skip, before tokenizing, documents that provably hold no match row (prefilter.py):
    # flags, removals and stored near misses are unchanged.
    prefilter: bool = False
    # beyond decon: the parts of the `thorough` preset (docs/detector.md "Beyond decon"), each off in decon's
    # presets and each switchable on its own (THOROUGH_PARTS, `contam detect --markup` ...)
    markup: bool = False  # decode HTML/XML references and remove tags before cleaning, on both sides (text.py)
    dense_short_questions: bool = False  # questions under ngram_size + sample_every - 1 tokens: every position (short.py)
    question_only: bool = False  # a long question found whole without its answer is held for review (rules.py)
    question_only_min_tokens: int = 20  # question tokens the rule needs
    question_only_overlap: float = 0.95  # question overlap the rule needs ("near 1.0")
    question_only_short_min_tokens: int = 8  # a shorter question than question_only_min_tokens, held when distinctive:
    question_only_short_min_idf: float = 0.65  # its n-grams' mean idf at least this share of ln(N) (detector/thorough.py)
    answer_suites: bool = False  # derived `<task>_answer` suites where answers are long, held for review (reference.py)
    answer_suite_min_words: int = 10  # median answer words a task needs for an answer suite; answers shorter are left out
    dump_min_items: int = 0  # > 0: a document holding this many distinct instances of one task is a dump (rules.py)
    near_duplicates: bool = False  # datasketch MinHash LSH candidates on document windows, verified exactly (neardup.py)
    reference_overlap: bool = False  # MinHash LSH over the reference set itself: twins of every instance (overlap.py)
    # beyond decon, beyond thorough: rewordings found by meaning and verified (contam_assets/paraphrase, docs/paraphrase.md)
    paraphrase: bool = False
    paraphrase_model: str = ""  # empty: WordLlama's bundled model; else a local model2vec folder
    paraphrase_min_similarity: float = 0.65  # cosine similarity a window needs before the verifier looks at it
    paraphrase_remove: str = ""  # tasks (comma-separated, or "all") whose paraphrase rows remove; others are held
    paraphrase_kinds: str = "math"  # paraphrase rules: "math" (math, code signature, other), plus "mc", "code" ("all")
    # items translated into another language, found by a multilingual encoder and anchors, held (docs/crosslingual.md)
    crosslingual: bool = False

    def __post_init__(self):
        problems = validate(self)
        if problems:
            raise ConfigError("; ".join(problems))
        # one spelling per meaning ("MC", "mc,math", "math,mc" alike; "all" spelled out), so equal meanings share a digest
        object.__setattr__(self, "paraphrase_kinds", ",".join(sorted(paraphrase_kinds(self))))

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
            "punctuation", "unescape", "derived_suites", "same_answer_rule", "dedup_by",
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


def validate(cfg: DetectConfig) -> list[str]:
    """What is wrong with a configuration, each with the fix (decon's validate_config, and more)."""
    out = []
    if cfg.tokenizer not in TOKENIZERS:
        out.append(f"tokenizer {cfg.tokenizer!r} is not supported; choose one of {', '.join(TOKENIZERS)}")
    for name in ("ngram_size", "sample_every", "answer_ngram_size", "passage_ngram_size", "question_max_consecutive_misses"):
        if getattr(cfg, name) < 1:
            out.append(f"{name} must be at least 1, got {getattr(cfg, name)}")
    if not 0.0 < cfg.threshold <= 1.0:
        out.append(f"threshold must lie in (0, 1], got {cfg.threshold}")
    if cfg.decay_start is not None and cfg.decay_end is not None and cfg.decay_end < cfg.decay_start:
        out.append(f"decay_end ({cfg.decay_end}) must be at least decay_start ({cfg.decay_start}); "
                   f"raise decay_end or lower decay_start")
    for name in ("short_answer_window", "min_long_answer_window", "min_passage_distance", "eval_min_token_length",
                 "eval_min_unique_words", "short_answer_token_threshold", "passage_max_consecutive_misses"):
        if getattr(cfg, name) < 0:
            out.append(f"{name} must not be negative, got {getattr(cfg, name)}")
    if not -1.0 <= cfg.paraphrase_min_similarity <= 1.0:
        out.append(f"paraphrase_min_similarity must lie in [-1, 1], got {cfg.paraphrase_min_similarity}")
    bad = [t for t in paraphrase_removes(cfg) if not re.fullmatch(r"[A-Za-z0-9_.\-]+", t)]
    if bad:
        out.append(f"paraphrase_remove takes task names separated by commas (or all), got {bad[0]!r}")
    if cfg.paraphrase_remove.strip() and not cfg.paraphrase:
        out.append("paraphrase_remove needs the paraphrase part: add --paraphrase (or --preset paraphrase)")
    bad = sorted(set(_kind_names(cfg)) - set(PARAPHRASE_KINDS) - {"all"})
    if bad or not _kind_names(cfg):
        out.append(f"paraphrase_kinds takes {', '.join(PARAPHRASE_KINDS)} separated by commas (or all), "
                   f"got {cfg.paraphrase_kinds!r}")
    if paraphrase_kinds(cfg) != {"math"} and not cfg.paraphrase:
        out.append("paraphrase_kinds needs the paraphrase part: add --paraphrase (or --preset paraphrase)")
    if cfg.dedup_by not in DEDUP_BY:
        out.append(f"dedup_by must be one of {', '.join(DEDUP_BY)}, got {cfg.dedup_by!r}")
    return out


def paraphrase_removes(cfg: DetectConfig) -> set[str]:
    """The tasks whose paraphrase rows remove their document (``{"all"}``: every task); the others' are held."""
    return {t.strip() for t in cfg.paraphrase_remove.split(",") if t.strip()}


PARAPHRASE_KINDS = ("math", "mc", "code")  # math: the rules every item has (math, code signature, other)


def _kind_names(cfg: DetectConfig) -> list[str]:
    return [t.strip().lower() for t in str(cfg.paraphrase_kinds).split(",") if t.strip()]


def paraphrase_kinds(cfg: DetectConfig) -> frozenset[str]:
    """The paraphrase rules switched on: always ``math`` (with the code-signature and generic rules), and
    ``mc`` (multiple choice: word gate, margin and coverage) and ``code`` (a task renamed and rewritten) when named."""
    names = set(_kind_names(cfg))
    return frozenset(PARAPHRASE_KINDS) if "all" in names else frozenset(names | {"math"})


@dataclass(frozen=True)
class Knob:
    field: str  # DetectConfig field
    flag: str  # `contam detect` flag
    decon: str | None  # decon's config key (and, with dashes, its CLI flag); None: beyond decon
    help: str  # unit and meaning


KNOBS: tuple[Knob, ...] = (
    Knob("tokenizer", "--tokenizer", "tokenizer_str", "cl100k (decon's default), word (whitespace words), "
         "bytes (decon's character-level fallback for tokenizer names it does not know)"),
    Knob("ngram_size", "--ngram-size", "ngram_size", "tokens per question n-gram"),
    Knob("sample_every", "--sample-every", "sample_every_m_tokens", "look up every Nth question n-gram of a document"),
    Knob("question_max_consecutive_misses", "--question-max-misses", "question_max_consecutive_misses",
         "n-grams a cluster expansion may miss in a row before it drops a candidate"),
    Knob("threshold", "--threshold", "contamination_score_threshold", "combined score that flags a document (0-1)"),
    Knob("decay_start", "--decay-start", "perfect_match_decay_start",
         "instance length (tokens) up to which only a perfect score flags; 'none' turns it off"),
    Knob("decay_end", "--decay-end", "perfect_match_decay_end",
         "instance length (tokens) from which the plain threshold applies; 'none' turns it off"),
    Knob("short_answer_token_threshold", "--short-answer-tokens", "short_answer_token_threshold",
         "answers of at most this many tokens must appear exactly"),
    Knob("short_answer_window", "--short-answer-window", "short_answer_window_length",
         "tokens after the question searched for a short answer"),
    Knob("answer_ngram_size", "--answer-ngram-size", "answer_ngram_size", "tokens per long-answer n-gram"),
    Knob("min_long_answer_window", "--min-long-answer-window", "min_long_answer_window",
         "tokens after the question searched for a long answer (at least twice its length)"),
    Knob("min_passage_distance", "--min-passage-distance", "min_passage_distance",
         "tokens before the question searched for the passage (at least twice its length)"),
    Knob("passage_ngram_size", "--passage-ngram-size", "passage_ngram_size", "tokens per passage n-gram"),
    Knob("passage_max_consecutive_misses", "--passage-max-misses", "passage_max_consecutive_misses",
         "n-grams the passage walk may miss in a row"),
    Knob("eval_dedup", "--eval-dedup", "eval_dedup", "drop duplicate reference records (true/false)"),
    Knob("eval_min_token_length", "--min-tokens", "eval_min_token_length",
         "reference records under this many non-space tokens are not indexed (0 = off)"),
    Knob("eval_min_unique_words", "--min-unique-words", "eval_min_unique_word_count",
         "reference records under this many distinct words are not indexed (0 = off)"),
    Knob("index_passages", "--index-passages", "index_passages", "index and score passages (true/false)"),
    Knob("index_answers", "--index-answers", "index_answers", "index and score answers (true/false)"),
    Knob("punctuation", "--punctuation", "punctuation_chars", "characters replaced by spaces before tokenizing"),
    Knob("unescape", "--unescape", None, "undo JSON/Python string escapes first (true/false; false = decon)"),
    Knob("derived_suites", "--derived-suites", None, "add the <task>_solution suites of code tasks (true/false)"),
    Knob("same_answer_rule", "--same-answer-rule", None, "index a suite whose answers are all one string on its questions"),
    Knob("dedup_by", "--dedup-by", None, "content (sha256 of the texts) or fingerprint (the record's field, decon)"),
    Knob("report_floor", "--report-floor", None, "store every candidate scoring at least this, flagged or not"),
    Knob("max_doc_bytes", "--max-doc-bytes", None, "documents larger than this many bytes are rejected"),
    Knob("prefilter", "--prefilter", None, "skip, untokenized, documents that provably hold no match row (true/false)"),
    Knob("paraphrase_remove", "--paraphrase-remove", None, "tasks (comma-separated, or all) whose paraphrase rows "
         "remove their document instead of holding it for review (with --paraphrase)"),
    Knob("paraphrase_kinds", "--paraphrase-kinds", None, "paraphrase rules (with --paraphrase): math (the default), "
         "or add mc (multiple choice reworded) and code (a task renamed and rewritten): math,mc,code or all; "
         "slower (docs/paraphrase.md)"),
)
KNOB_BY_FIELD = {k.field: k for k in KNOBS}


def parse_knob(field: str, value) -> object:
    """A knob value from text (CLI, environment, YAML) as the field's type; ConfigError when it is not one."""
    default = getattr(DetectConfig(), field)
    if isinstance(value, str):
        v = value.strip()
        if field in ("decay_start", "decay_end") and v.lower() in ("none", "null", "off", ""):
            return None
        if isinstance(default, bool):
            if v.lower() in ("1", "true", "yes", "on"):
                return True
            if v.lower() in ("0", "false", "no", "off"):
                return False
            raise ConfigError(f"{field} takes true or false, got {value!r}")
        if isinstance(default, int):
            try:
                return int(v)
            except ValueError:
                raise ConfigError(f"{field} takes a whole number, got {value!r}") from None
        if isinstance(default, float):
            try:
                return float(v)
            except ValueError:
                raise ConfigError(f"{field} takes a number, got {value!r}") from None
        return value
    if value is None and field in ("decay_start", "decay_end"):
        return None
    if isinstance(default, bool) and not isinstance(value, bool):
        raise ConfigError(f"{field} takes true or false, got {value!r}")
    if isinstance(default, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(default, int) and not isinstance(default, bool) and (isinstance(value, bool) or not isinstance(value, int)):
        if not (field in ("decay_start", "decay_end") and value is None):
            raise ConfigError(f"{field} takes a whole number, got {value!r}")
    return value
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(DetectConfig)}
_THOROUGH_FIELDS = ("markup", "dense_short_questions", "question_only", "question_only_min_tokens", "question_only_overlap",
                    "question_only_short_min_tokens", "question_only_short_min_idf",
                    "answer_suites", "answer_suite_min_words", "dump_min_items", "near_duplicates", "reference_overlap",
                    "paraphrase", "paraphrase_model", "paraphrase_min_similarity", "paraphrase_remove", "paraphrase_kinds",
                    "crosslingual")
# The parts of `thorough`, by the name a user switches each on with (contam detect --markup, or the parts setting)
THOROUGH_PARTS: dict[str, dict] = {
    "markup": {"markup": True},
    "short_questions": {"dense_short_questions": True},
    "question_only": {"question_only": True},
    "answer_suites": {"answer_suites": True},
    "dumps": {"dump_min_items": 3},
    "near_duplicates": {"near_duplicates": True},
    "reference_overlap": {"reference_overlap": True},
}
# Parts beyond `thorough` (not in its preset, so its figures stay comparable), switched on by name the same way
EXTRA_PARTS: dict[str, dict] = {
    "paraphrase": {"paraphrase": True},  # contam_assets/paraphrase (docs/paraphrase.md)
    "crosslingual": {"crosslingual": True},  # contam_assets/paraphrase/crosslingual.py (docs/crosslingual.md)
}


def with_parts(cfg: DetectConfig, parts) -> DetectConfig:
    """``cfg`` with the named THOROUGH_PARTS switched on (an unknown name is an error that lists the known ones)."""
    kw: dict = {}
    known = THOROUGH_PARTS | EXTRA_PARTS
    for name in parts:
        if name not in known:
            raise ConfigError(f"unknown detector part {name!r}; choose from {', '.join(known)}")
        kw.update(known[name])
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
# beyond thorough: thorough with rewordings found by meaning (docs/paraphrase.md)
PRESETS["paraphrase"] = with_parts(PRESETS["thorough"], ["paraphrase"])
# beyond paraphrase: with translations of the items in other languages (docs/crosslingual.md)
PRESETS["crosslingual"] = with_parts(PRESETS["paraphrase"], ["crosslingual"])

# decon mode: clean and build the reference set exactly as decon does (docs/decon.md)
DECON_MODE = dict(unescape=False, derived_suites=False, same_answer_rule=False, dedup_by="fingerprint")


def preset(name: str, **overrides) -> DetectConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    cfg = PRESETS[name]
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(DetectConfig)})
    if unknown:
        raise ConfigError(f"unknown detector setting(s) {unknown}")
    overrides = {k: v for k, v in overrides.items() if v is not None or k in ("decay_start", "decay_end")}
    return cfg.replace(**overrides) if overrides else cfg


def settings_rows(cfg: DetectConfig, origins: dict[str, str] | None = None) -> list[dict]:
    """One row per knob: name, value, decon's name, where the value came from (the report's settings table)."""
    origins = origins or {}
    return [dict(name=k.field, value=json.dumps(getattr(cfg, k.field), ensure_ascii=False), decon_name=k.decon,
                 origin=origins.get(k.field, "preset")) for k in KNOBS]
