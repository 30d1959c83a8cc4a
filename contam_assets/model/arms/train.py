"""Train one arm: a small GPT-2-style model on the arm's stream, with real checkpoint folders.

Documents are joined with the end-of-text token and cut into blocks of
``block_size`` tokens; the blocks are read once, in stream order (the arm's
mix is already shuffled), ``batch_size`` blocks per step.  Every arm trained
with the same config therefore reads the same number of tokens per step, and
step ``n`` of one arm aligns with step ``n`` of another.

Written under ``<experiments_dir>/<experiment>/`` (docs/tables.md):
``checkpoints/<stage>/`` (``save_pretrained`` model + tokenizer and
``contam_checkpoint.json``), ``data/train.jsonl`` (written by the caller, see
:func:`write_train_jsonl`) and ``train_log.json`` (loss per step).  A
checkpoint folder appears atomically (written under ``.partial/``, then
renamed), so a sensor never sees half a folder.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

CHECKPOINT_META = "contam_checkpoint.json"
TRAIN_LOG = "train_log.json"


@dataclass(frozen=True)
class TrainConfig:
    # Defaults: the configuration of the demo in docs/arms.md (about 1 M parameters, 600 k tokens).
    budget_tokens: int = 600_000  # tokens read per arm (rounded down to whole steps)
    block_size: int = 256
    batch_size: int = 4
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    lr: float = 4e-3
    min_lr_ratio: float = 0.1  # cosine decay to lr * this
    warmup_steps: int = 50
    weight_decay: float = 0.1
    n_checkpoints: int = 4  # evenly spaced; the last one is the final step
    max_minutes: float = 0.0  # wall-clock cap (0 = none); a capped run saves where it stopped
    num_threads: int = 0  # torch threads (0 = every core)
    seed: int = 0

    @property
    def tokens_per_step(self) -> int:
        return self.block_size * self.batch_size

    @property
    def steps(self) -> int:
        return self.budget_tokens // self.tokens_per_step

    @property
    def effective_budget(self) -> int:
        """Tokens actually trained on: whole steps only."""
        return self.steps * self.tokens_per_step

    def checkpoint_steps(self) -> list[int]:
        n = max(1, min(self.n_checkpoints, self.steps))
        return sorted({max(1, round(self.steps * (i + 1) / n)) for i in range(n)})

    def validate(self) -> None:
        if self.steps < 1:
            raise ValueError(
                f"budget of {self.budget_tokens} tokens is less than one step "
                f"({self.batch_size} x {self.block_size} = {self.tokens_per_step} tokens)"
            )
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")


@dataclass
class TrainResult:
    experiment: str
    steps_done: int
    steps_planned: int
    tokens_seen: int
    wall_s: float
    losses: list[float]
    checkpoints: list[str] = field(default_factory=list)  # folders written
    stopped_early: bool = False
    stream_tokens: int = 0  # tokens of the whole stream (>= tokens trained on)


def experiment_name(arm: str, seed: int, default_seed: int = 0) -> str:
    """``full`` for the default seed, ``full-seed3`` for repeated seeds."""
    return arm if seed == default_seed else f"{arm}-seed{seed}"


def stage_name(step: int) -> str:
    return f"step-{step:06d}"


def write_train_jsonl(rows: Iterable[dict], path: Path) -> int:
    """Write the rows an experiment trains on (one JSON object per line, ``text`` first); returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".partial")
    n = 0
    with open(tmp, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def read_train_texts(path: Path) -> list[str]:
    texts = []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            try:
                texts.append(json.loads(line)["text"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{i + 1}: not a training row with a `text` ({exc})") from None
    return texts


def token_stream(texts: list[str], tokenizer, limit: int | None = None):
    """Token ids of the documents joined by end-of-text (one trailing end-of-text per document)."""
    import torch

    eos = tokenizer.eos_token_id
    out: list[int] = []
    backend = tokenizer.backend_tokenizer
    for start in range(0, len(texts), 1024):
        for enc in backend.encode_batch(texts[start : start + 1024], add_special_tokens=False):
            out.extend(enc.ids)
            out.append(eos)
        if limit is not None and len(out) >= limit:
            break
    return torch.tensor(out, dtype=torch.long)


def build_model(config: TrainConfig, tokenizer):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=config.block_size,
        n_embd=config.n_embd,
        n_layer=config.n_layer,
        n_head=config.n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return GPT2LMHeadModel(cfg)


def _lr_at(step: int, config: TrainConfig) -> float:
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    span = max(1, config.steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    floor = config.lr * config.min_lr_ratio
    return floor + (config.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def save_checkpoint(model, tokenizer, folder: Path, meta: dict) -> Path:
    """Write an HF checkpoint folder atomically (``<experiment>/.partial/<stage>``, then rename)."""
    folder = Path(folder)
    # Outside checkpoints/, so a sensor globbing <experiment>/checkpoints/* never sees a half-written folder.
    tmp = folder.parent.parent / ".partial" / folder.name
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    (tmp / CHECKPOINT_META).write_text(json.dumps(meta, indent=2))
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(tmp, folder)
    try:
        tmp.parent.rmdir()
    except OSError:
        pass
    return folder


def train_arm(
    texts: list[str],
    tokenizer,
    config: TrainConfig,
    experiment_dir: Path,
    experiment: str,
    recipe: str | None = None,
    log: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train on ``texts`` (in order) and write checkpoints under ``experiment_dir/checkpoints``."""
    import torch

    config.validate()
    log = log or (lambda msg: None)
    threads = config.num_threads or os.cpu_count() or 1
    torch.set_num_threads(max(1, threads))
    torch.manual_seed(config.seed)

    need = config.effective_budget
    stream = token_stream(texts, tokenizer, limit=need)
    if stream.numel() < need:
        raise ValueError(
            f"{experiment}: the stream holds {stream.numel()} tokens, fewer than the {need} the budget needs "
            f"({config.steps} steps x {config.tokens_per_step}); build the mix with at least this budget"
        )
    batches = stream[:need].view(config.steps, config.batch_size, config.block_size)

    experiment_dir = Path(experiment_dir)
    ckpt_root = experiment_dir / "checkpoints"
    if ckpt_root.exists():
        shutil.rmtree(ckpt_root)  # a re-run replaces the experiment's checkpoints, never mixes two runs
    ckpt_root.mkdir(parents=True)

    model = build_model(config, tokenizer)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr, betas=(0.9, 0.95),
    )
    save_tok = tokenizer
    save_tok.model_max_length = config.block_size
    n_params = sum(p.numel() for p in model.parameters())
    log(f"{experiment}: {n_params / 1e6:.2f}M parameters, {config.steps} steps x {config.tokens_per_step} tokens, "
        f"{threads} threads")

    wanted = set(config.checkpoint_steps())
    losses: list[float] = []
    written: list[str] = []
    start = time.monotonic()
    deadline = start + config.max_minutes * 60 if config.max_minutes > 0 else None
    stopped = False

    def checkpoint(step: int) -> None:
        model.eval()
        stage = stage_name(step)
        meta = {"experiment": experiment, "stage": stage, "step": step, "is_base": False, "recipe": recipe}
        written.append(str(save_checkpoint(model, save_tok, ckpt_root / stage, meta)))
        model.train()
        log(f"{experiment}: checkpoint {stage} (loss {losses[-1]:.3f}, {time.monotonic() - start:.0f}s)")

    for step in range(config.steps):
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, config)
        x = batches[step]
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        done = step + 1
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(f"{experiment}: loss became {losses[-1]} at step {done}; lower the learning rate")
        if done % max(1, config.steps // 20) == 0:
            log(f"{experiment}: step {done}/{config.steps} loss {losses[-1]:.3f}")
        if done in wanted:
            checkpoint(done)
        elif deadline is not None and time.monotonic() > deadline:
            stopped = True
            log(f"{experiment}: wall-clock cap of {config.max_minutes} min reached at step {done}/{config.steps}")
            checkpoint(done)
            break

    wall = time.monotonic() - start
    result = TrainResult(
        experiment=experiment,
        steps_done=len(losses),
        steps_planned=config.steps,
        tokens_seen=len(losses) * config.tokens_per_step,
        wall_s=wall,
        losses=losses,
        checkpoints=written,
        stopped_early=stopped,
        stream_tokens=int(stream.numel()),
    )
    (experiment_dir / TRAIN_LOG).write_text(
        json.dumps({"config": asdict(config), "recipe": recipe, "n_params": n_params, **asdict(result)}, indent=1)
    )
    return result
