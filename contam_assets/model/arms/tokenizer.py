"""The arms' tokenizer: byte-level BPE trained locally with ``tokenizers`` on the natural pool.

One tokenizer is trained once and shared by every arm (seed 003: all arms
share model, tokenizer and batch size).  It is saved as a
``PreTrainedTokenizerFast`` folder, so ``AutoTokenizer.from_pretrained`` loads
it from the checkpoint folders without any download.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

EOS = "<|endoftext|>"
META_FILE = "contam_arms_tokenizer.json"


def train_tokenizer(texts: Iterable[str], vocab_size: int = 4096, min_frequency: int = 2):
    """Train byte-level BPE on ``texts``; returns a ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 300:
        raise ValueError(f"vocab_size {vocab_size} is too small for byte-level BPE (256 bytes + merges + specials)")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, bos_token=EOS, unk_token=EOS, pad_token=EOS,
        clean_up_tokenization_spaces=False,
    )


def save_tokenizer(tokenizer, folder: Path, meta: dict | None = None) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(folder))
    (folder / META_FILE).write_text(json.dumps(meta or {}, indent=2, sort_keys=True))
    return folder


def load_tokenizer(folder: Path):
    from transformers import PreTrainedTokenizerFast

    folder = Path(folder)
    if not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(f"no trained arms tokenizer in {folder} (tokenizer.json missing)")
    return PreTrainedTokenizerFast.from_pretrained(str(folder))


def tokenizer_meta(folder: Path) -> dict:
    path = Path(folder) / META_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def token_counter(tokenizer):
    """``texts -> token counts`` as the trainer sees them (document tokens + one end-of-text)."""
    backend = tokenizer.backend_tokenizer

    def count(texts: list[str]) -> list[int]:
        if not texts:
            return []
        return [len(e.ids) + 1 for e in backend.encode_batch(texts, add_special_tokens=False)]

    return count
