"""``arms_settings``: how the proxy arms are built and trained (the arms room of contam_assets/settings.py)."""

from __future__ import annotations

import dagster as dg

from contam_assets import settings
from contam_assets.model.arms.exposure import (
    DEFAULT_TARGET_WEIGHT_OTHER,
    DEFAULT_TARGET_WEIGHTS,
    TargetScale,
    parse_weights,
)
from contam_assets.model.arms.train import TrainConfig

_D = TrainConfig()  # one set of defaults for the CLI, the resource and the demo


class ArmsSettings(dg.ConfigurableResource):
    """Training budget, model size, seeds and mix weights of the arms (the same for every arm)."""

    budget_tokens: int = _D.budget_tokens  # tokens each arm trains on
    max_minutes: float = 0.0  # wall-clock cap per arm (0 = none)
    seed: int = 0  # data order and init; experiment `<arm>` at seed 0, `<arm>-seed<N>` otherwise
    vocab_size: int = 4096
    block_size: int = _D.block_size
    batch_size: int = _D.batch_size
    n_layer: int = _D.n_layer
    n_embd: int = _D.n_embd
    n_head: int = _D.n_head
    lr: float = _D.lr
    warmup_steps: int = _D.warmup_steps
    n_checkpoints: int = _D.n_checkpoints
    num_threads: int = 0  # torch threads (0 = every core)
    proxy_weights: str = ""  # "math=2,web=0.5": epochs per source of the proxy mix ("" = 1 for every source)
    target_weights: str = ""  # epochs per source of the production mix ("" = built-in defaults, see docs/arms.md)
    target_default_weight: float = DEFAULT_TARGET_WEIGHT_OTHER
    target_budget_tokens: float = 0.0  # production budget (0 = one pass over the production mix)
    tokenizer_max_chars: int = 50_000_000

    def train_config(self) -> TrainConfig:
        return TrainConfig(
            budget_tokens=self.budget_tokens, block_size=self.block_size, batch_size=self.batch_size,
            n_layer=self.n_layer, n_embd=self.n_embd, n_head=self.n_head, lr=self.lr,
            warmup_steps=self.warmup_steps, n_checkpoints=self.n_checkpoints, max_minutes=self.max_minutes, num_threads=self.num_threads,
            seed=self.seed,
        )

    def proxy_weight_map(self) -> dict[str, float]:
        return parse_weights(self.proxy_weights)

    def target_scale(self) -> TargetScale:
        weights = parse_weights(self.target_weights) if self.target_weights else dict(DEFAULT_TARGET_WEIGHTS)
        return TargetScale(weights=weights, default_weight=self.target_default_weight,
                           budget_tokens=self.target_budget_tokens)

    @classmethod
    def from_env(cls) -> "ArmsSettings":
        values = {field: settings.env_value("arms_" + name) for field, name in [
            ("budget_tokens", "budget_tokens"), ("max_minutes", "max_minutes"), ("seed", "seed"),
            ("num_threads", "threads")]}
        return cls(**{k: v for k, v in values.items() if v is not None})
