"""Load a checkpoint folder with transformers: the checkpoint's own dtype, spread over the GPUs by accelerate.

- **device** ``auto`` (default): every visible GPU through accelerate's
  ``device_map="auto"`` (a 70B checkpoint is split across them, and what does
  not fit spills to CPU memory); the CPU when there is no GPU.  ``cpu``,
  ``cuda`` or ``cuda:N`` put the whole model on one device; ``device_map``
  names another accelerate strategy (``balanced``, ``sequential``, ...) and
  ``max_memory`` caps what each device receives (e.g. ``0=20GiB,cpu=64GiB``).
- **dtype** ``auto`` (default): the dtype in the checkpoint's config
  (``torch_dtype``), float32 when it names none.  OpenCompass's HuggingFace
  wrapper loads float16 unless its config says otherwise; ``--dtype float16``
  reproduces that.
- **trust_remote_code**: off unless asked for; a checkpoint whose config maps
  its classes to code in the folder (``auto_map``: Qwen-1, Baichuan,
  InternLM-1) fails with a message that says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contam_assets import settings
from contam_assets.model.checkpoint import CheckpointError, check_complete

DEFAULT_TOKEN_BUDGET = 16384  # padded tokens per forward batch
_FALLBACK_MAX_LEN = 2048
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class LoadOptions:
    device: str = "auto"  # auto (every GPU via accelerate, else CPU) | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto (the checkpoint's own) | float32 | bfloat16 | float16
    token_budget: int = DEFAULT_TOKEN_BUDGET
    allow_hub: bool = False  # only when a user explicitly asks: treat a non-folder as a Hub id
    trust_remote_code: bool = False  # run the checkpoint folder's own modelling code (auto_map)
    device_map: str | None = None  # an accelerate strategy (auto, balanced, sequential, ...); overrides device
    max_memory: str | None = None  # per-device caps for the device map, "0=20GiB,1=20GiB,cpu=64GiB"
    offload_folder: str | None = None  # where accelerate may put weights that fit nowhere else
    generation_backend: str = "transformers"  # transformers | vllm (generation probes only; vllm_backend.py)


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    path: str
    device: str  # where inputs go (the device of the first layers)
    dtype: str
    max_len: int
    token_budget: int
    pad_id: int
    device_map: dict | None = None  # accelerate's placement (module -> device), when one was used
    trust_remote_code: bool = False
    generator: Any = None  # an optional generation backend (vLLM) used instead of model.generate

    def encode(self, text: str, max_length: int | None = None) -> tuple[list[int], list[tuple[int, int]] | None]:
        """Token ids with the tokenizer's own special tokens (as OpenCompass does) and char offsets.

        ``max_length``: OpenCompass's truncation, on the left (the tokenizer keeps its special tokens).
        """
        kwargs = {"truncation": True, "max_length": max_length} if max_length else {}
        try:
            enc = self.tokenizer(text, add_special_tokens=True, return_offsets_mapping=True, **kwargs)
            return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
        except (NotImplementedError, ValueError, TypeError):  # slow tokenizers have no offsets
            return list(self.tokenizer(text, add_special_tokens=True, **kwargs)["input_ids"]), None

    @property
    def end_id(self) -> int:
        """The token Skywork's eval_loss.py pads with (EOS, else the pad token)."""
        eos = self.tokenizer.eos_token_id
        return int(eos) if eos is not None else self.pad_id


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise CheckpointError(f"device {device!r} requested but CUDA is not available")
    return device


def resolve_dtype(dtype: str):
    """A torch dtype, or "auto" (transformers then reads the checkpoint's config)."""
    import torch

    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype == "auto":
        return "auto"
    if dtype not in table:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return table[dtype]


def parse_max_memory(text: str | None) -> dict | None:
    """``"0=20GiB,cpu=64GiB"`` -> ``{0: "20GiB", "cpu": "64GiB"}`` (accelerate's max_memory)."""
    if not text:
        return None
    out: dict = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not value.strip():
            raise ValueError(f"--max-memory wants DEVICE=SIZE items separated by commas, got {part!r}")
        key = key.strip()
        out[int(key) if key.isdigit() else key] = value.strip()
    return out


def placement(options: LoadOptions) -> tuple[str, dict]:
    """(input device, from_pretrained kwargs for where the weights go)."""
    import torch

    if options.device_map:
        mapping = {"device_map": options.device_map}
    elif options.device == "auto" and torch.cuda.is_available():
        mapping = {"device_map": "auto"}
    else:
        device = resolve_device(options.device)
        return device, ({"device_map": {"": device}} if device != "cpu" else {})
    if options.max_memory:
        mapping["max_memory"] = parse_max_memory(options.max_memory)
    if options.offload_folder:
        mapping["offload_folder"] = options.offload_folder
    return "map", mapping


def remote_code_classes(folder: str | Path) -> dict:
    """The config's ``auto_map`` (classes defined by code in the folder); empty for standard architectures."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    auto_map = config.get("auto_map") if isinstance(config, dict) else None
    return auto_map if isinstance(auto_map, dict) else {}


def load_checkpoint(path: str | Path, options: LoadOptions = LoadOptions()) -> LoadedModel:
    """Load model and tokenizer from a local folder (or, with allow_hub, a Hub id)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from contam_assets.model.vllm_backend import BACKENDS, BackendUnavailable, unavailable_reason

    if options.generation_backend not in BACKENDS:
        raise ValueError(f"unknown generation backend {options.generation_backend!r}; use one of {', '.join(BACKENDS)}")
    if options.generation_backend == "vllm" and unavailable_reason():
        raise BackendUnavailable(unavailable_reason())
    local = Path(path).is_dir()
    if local or not options.allow_hub:
        check_complete(path)
        custom = remote_code_classes(path)
        if custom and not options.trust_remote_code:
            raise CheckpointError(
                f"checkpoint folder {path} defines its model in its own code ({', '.join(sorted(custom))} in "
                f"config.json auto_map); rerun with --trust-remote-code ({settings.var('trust_remote_code')}=1) if you trust it"
            )
    device, where = placement(options)
    dtype = resolve_dtype(options.dtype)
    source = str(Path(path).resolve()) if local else str(path)
    only_local = local or not options.allow_hub
    trust = options.trust_remote_code
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=only_local, trust_remote_code=trust)
        model = AutoModelForCausalLM.from_pretrained(
            source, local_files_only=only_local, dtype=dtype, trust_remote_code=trust, **where
        )
    except Exception as exc:  # transformers raises many types; the partition needs one clear message
        raise CheckpointError(f"checkpoint folder {path} failed to load: {type(exc).__name__}: {exc}") from exc
    device_map = getattr(model, "hf_device_map", None)
    if device == "map":
        device = _input_device(model, device_map)
    elif not where:
        model.to(device)
    model.eval()
    tokenizer.truncation_side = "left"  # OpenCompass: a text longer than the context keeps its end
    lm = LoadedModel(
        model=model,
        tokenizer=tokenizer,
        path=source,
        device=device,
        dtype=str(next(model.parameters()).dtype).replace("torch.", ""),
        max_len=_max_len(model, tokenizer),
        token_budget=max(1, int(options.token_budget)),
        pad_id=_pad_id(tokenizer),
        device_map=dict(device_map) if device_map else None,
        trust_remote_code=trust,
    )
    if options.generation_backend == "vllm":
        from contam_assets.model.vllm_backend import VllmGenerator

        lm.generator = VllmGenerator(source, options.dtype, trust, lm.max_len)
    return lm


def _input_device(model, device_map: dict | None) -> str:
    """Inputs go where the input embedding sits (accelerate's hooks move activations between devices); its
    weight says so unless it was offloaded (``meta``), then the map's first accelerator. Map values are GPU
    indices, names or ``torch.device`` objects, depending on the transformers version."""
    weight = getattr(model.get_input_embeddings(), "weight", None)
    if weight is not None and weight.device.type != "meta":
        return str(weight.device)
    for where in (device_map or {}).values():
        if isinstance(where, int):
            return f"cuda:{where}"
        where = str(where)
        if where.startswith(("cuda", "mps", "xpu")):
            return where
    return "cpu"


def describe(lm: LoadedModel) -> str:
    """One line for the run log: device(s), dtype, context."""
    if lm.device_map:
        devices = sorted({f"cuda:{d}" if isinstance(d, int) else str(d) for d in lm.device_map.values()})
        where = f"device_map over {', '.join(devices)} ({len(lm.device_map)} modules)"
    else:
        where = lm.device
    return f"{lm.path}: {where}, {lm.dtype}, context {lm.max_len} tokens"


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
