"""decon's YAML config files, read into contam-assets settings.

Every key of decon's ``config/default.yaml`` (src/common/detection_config.rs) is
understood: the paths (evals_dir, training_dir, report_output_dir, cleaned_output_dir),
``purify``, ``content_key`` (dots name nested fields), ``tokenizer_str`` and every
detection knob (named by ``detector.config.KNOBS``).  Keys decon accepts that change
nothing here (threads, caches, server windows) are accepted and listed; any other key
is reported as unknown, as a line of the run's output, never silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from contam_assets.detector.config import DECON_MODE, KNOBS, ConfigError, parse_knob

# decon keys with their meaning elsewhere in our settings
PATH_KEYS = ("evals_dir", "training_dir", "report_output_dir", "cleaned_output_dir")
# decon keys that tune decon's own execution (threads, caches, its server) and change no result
NO_EFFECT_KEYS = ("hash_seed", "ngram_bucket_lru_cache", "worker_threads", "verbose", "window_size_increment",
                  "num_windows", "window_step_size", "exact_override")
# tokenizers decon knows (tiktoken encodings and uniseg); any other name is decon's character-level fallback
DECON_TOKENIZERS = ("r50k", "p50k", "p50k_edit", "cl100k", "o200k", "uniseg")
DECON_TO_FIELD = {k.decon: k.field for k in KNOBS if k.decon}


@dataclass
class DeconConfig:
    path: Path
    overrides: dict = field(default_factory=dict)  # DetectConfig field -> value (decon mode included)
    paths: dict = field(default_factory=dict)  # evals_dir / training_dir / report_output_dir / cleaned_output_dir
    content_key: str = "text"
    purify: bool = False
    unknown: list[str] = field(default_factory=list)  # keys decon's Config does not have either
    no_effect: list[str] = field(default_factory=list)  # keys accepted that change nothing here
    notes: list[str] = field(default_factory=list)  # what we did with a value (a tokenizer fallback, …)

    def messages(self) -> list[str]:
        out = list(self.notes)
        if self.no_effect:
            out.append(f"{self.path.name}: accepted, no effect here: {', '.join(self.no_effect)}")
        if self.unknown:
            out.append(f"{self.path.name}: unknown key(s), ignored as decon ignores them: {', '.join(self.unknown)}")
        return out


def tokenizer_for(name: str) -> tuple[str, str | None]:
    """Our tokenizer for decon's ``tokenizer_str``, and a note when it is decon's fallback."""
    if name == "cl100k":
        return "cl100k", None
    if name in DECON_TOKENIZERS:
        raise ConfigError(f"tokenizer_str {name!r} is not supported (contam-assets ships cl100k only, offline); "
                          f"use tokenizer_str: cl100k")
    # decon: an unknown tokenizer name falls back to character-level (byte) tokens, with a warning
    return "bytes", (f"tokenizer_str {name!r} is not a tokenizer decon knows: decon then tokenizes byte by byte, "
                     f"and so do we (tokenizer 'bytes')")


def load_decon_config(path: str | Path) -> DeconConfig:
    """Read a decon config file; ConfigError (with the key and the fix) for what cannot be used."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read decon config {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a decon config is a mapping of keys to values")
    out = DeconConfig(path=path, overrides=dict(DECON_MODE))
    for key, value in raw.items():
        key = str(key)
        if key in PATH_KEYS:
            if value not in (None, ""):
                out.paths[key] = str(value)
        elif key == "purify":
            out.purify = bool(parse_knob("eval_dedup", value))  # any boolean knob parses the same
        elif key == "content_key":
            if not isinstance(value, str) or not value:
                raise ConfigError(f"{path}: content_key must be a non-empty string")
            out.content_key = value
        elif key == "mode":
            if value != "simple":
                raise ConfigError(f"{path}: mode {value!r} is not supported (decon's only mode is 'simple')")
        elif key == "tokenizer_str":
            tok, note = tokenizer_for(str(value))
            out.overrides["tokenizer"] = tok
            if note:
                out.notes.append(note)
        elif key in DECON_TO_FIELD:
            name = DECON_TO_FIELD[key]
            try:
                out.overrides[name] = parse_knob(name, value)
            except ConfigError as exc:
                raise ConfigError(f"{path}: {key}: {exc}") from None
        elif key in NO_EFFECT_KEYS:
            out.no_effect.append(key)
        else:
            out.unknown.append(key)
    return out
