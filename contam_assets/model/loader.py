"""Load a checkpoint folder with transformers: CUDA + bf16 when available, else CPU float32."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contam_assets.model.checkpoint import CheckpointError, check_complete

DEFAULT_TOKEN_BUDGET = 16384  # padded tokens per forward batch
_FALLBACK_MAX_LEN = 2048


@dataclass(frozen=True)
class LoadOptions:
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto (bf16 on CUDA, float32 on CPU) | float32 | bfloat16 | float16
    token_budget: int = DEFAULT_TOKEN_BUDGET
    allow_hub: bool = False  # only when a user explicitly asks: treat a non-folder as a Hub id


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    path: str
    device: str
    dtype: str
    max_len: int
    token_budget: int
    pad_id: int

    def encode(self, text: str) -> tuple[list[int], list[tuple[int, int]] | None]:
        """Token ids (with the tokenizer's own special tokens, as OpenCompass does) and char offsets."""
        try:
            enc = self.tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)
            return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
        except (NotImplementedError, ValueError, TypeError):  # slow tokenizers have no offsets
            return list(self.tokenizer(text, add_special_tokens=True)["input_ids"]), None


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise CheckpointError(f"device {device!r} requested but CUDA is not available")
    return device


def resolve_dtype(dtype: str, device: str):
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise ValueError(f"unknown dtype {dtype!r}; use one of auto, {', '.join(table)}")
    return table[dtype]


def load_checkpoint(path: str | Path, options: LoadOptions = LoadOptions()) -> LoadedModel:
    """Load model and tokenizer from a local folder (or, with allow_hub, a Hub id)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = Path(path).is_dir()
    if local or not options.allow_hub:
        check_complete(path)
    device = resolve_device(options.device)
    dtype = resolve_dtype(options.dtype, device)
    source = str(Path(path).resolve()) if local else str(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local or not options.allow_hub)
        model = AutoModelForCausalLM.from_pretrained(source, local_files_only=local or not options.allow_hub, dtype=dtype)
    except Exception as exc:  # transformers raises many types; the partition needs one clear message
        raise CheckpointError(f"checkpoint folder {path} failed to load: {type(exc).__name__}: {exc}") from exc
    model.to(device)
    model.eval()
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        path=source,
        device=device,
        dtype=str(dtype).replace("torch.", ""),
        max_len=_max_len(model, tokenizer),
        token_budget=max(1, int(options.token_budget)),
        pad_id=_pad_id(tokenizer),
    )


def _max_len(model, tokenizer) -> int:
    cfg = model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(cfg, name, None)
        if isinstance(value, int) and value > 0:
            return value
    tok_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < 1_000_000:
        return tok_max
    return _FALLBACK_MAX_LEN


def _pad_id(tokenizer) -> int:
    # Padding positions are always masked out, so any valid id works; prefer the declared one.
    for tid in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if tid is not None:
            return int(tid)
    return 0
