"""Model-side resources: how checkpoints load (`checkpoint_loader`) and what the probes read (`probe_settings`)."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() not in ("0", "false", "no", "")


class CheckpointLoader(dg.ConfigurableResource):
    """Loads checkpoint folders (every GPU through accelerate, the checkpoint's own dtype) and finds new ones."""

    device: str = "auto"  # CONTAM_DEVICE: auto (device_map over every GPU, else CPU) | cpu | cuda | cuda:N
    dtype: str = "auto"  # CONTAM_DTYPE: auto (the checkpoint's own) | float32 | bfloat16 | float16
    device_map: str = ""  # CONTAM_DEVICE_MAP: an accelerate strategy instead of `device` (balanced, sequential, ...)
    max_memory: str = ""  # CONTAM_MAX_MEMORY: per-device caps for the device map, "0=20GiB,cpu=64GiB"
    trust_remote_code: bool = False  # CONTAM_TRUST_REMOTE_CODE=1: run modelling code shipped in the folder
    generation_backend: str = "transformers"  # CONTAM_GENERATION_BACKEND: transformers | vllm (generation probes)
    token_budget: int = 16384  # CONTAM_TOKEN_BUDGET: padded tokens per forward batch (bounds memory)
    allow_hub: bool = False  # never download unless a user turns this on
    extra_checkpoints_dir: str = ""  # CONTAM_CHECKPOINTS: another folder the sensor watches
    settle_seconds: float = 30.0  # CONTAM_CHECKPOINT_SETTLE_S: a folder changed more recently is still being written

    def options(self):
        from contam_assets.model.loader import LoadOptions

        return LoadOptions(
            device=self.device, dtype=self.dtype, token_budget=self.token_budget, allow_hub=self.allow_hub,
            trust_remote_code=self.trust_remote_code, device_map=self.device_map or None,
            max_memory=self.max_memory or None, generation_backend=self.generation_backend,
        )

    def load(self, path: str | Path):
        from contam_assets.model.loader import load_checkpoint

        return load_checkpoint(path, self.options())

    @property
    def extra_path(self) -> Path | None:
        return Path(self.extra_checkpoints_dir).resolve() if self.extra_checkpoints_dir else None

    @classmethod
    def from_env(cls) -> "CheckpointLoader":
        env = os.environ
        return cls(
            device=env.get("CONTAM_DEVICE", "auto"),
            dtype=env.get("CONTAM_DTYPE", "auto"),
            device_map=env.get("CONTAM_DEVICE_MAP", ""),
            max_memory=env.get("CONTAM_MAX_MEMORY", ""),
            trust_remote_code=_env_bool("CONTAM_TRUST_REMOTE_CODE", False),
            generation_backend=env.get("CONTAM_GENERATION_BACKEND", "transformers"),
            token_budget=int(env.get("CONTAM_TOKEN_BUDGET", 16384)),
            extra_checkpoints_dir=env.get("CONTAM_CHECKPOINTS", ""),
            settle_seconds=float(env.get("CONTAM_CHECKPOINT_SETTLE_S", 30.0)),
        )


class ProbeSettings(dg.ConfigurableResource):
    """What the probes read and how far they go."""

    limit: int = 0  # CONTAM_PROBE_LIMIT: first N items of every set (0 = full sets)
    ref_file: str = ""  # CONTAM_PROBE_REF: GSM8K reference set ("" = Skywork's mock file in the benchmark folder)
    fresh_file: str = ""  # CONTAM_FRESH_SET: fresh GSM-style JSONL for the gap ("" = skip the fresh-set gap)
    baseline_checkpoint: str = ""  # CONTAM_BASELINE_CHECKPOINT: a model that never saw the data (calibration)
    skywork_batch_size: int = 1  # Skywork eval_loss.py batching to reproduce (1 = the loss as defined)
    mink_k: float = 0.2
    n_shot: int = 5
    shot_seed: int = 1234  # few-shot examples drawn per question (lm-evaluation-harness's seed)
    gsm_max_new_tokens: int = 256
    code_max_new_tokens: int = 384
    execute_code: bool = False  # CONTAM_PROBE_EXECUTE=1: run generated code (subprocess, limited) for pass@1
    exec_timeout_s: float = 10.0
    exec_memory_mb: int = 1024
    exec_workers: int = 2  # generated programs judged at a time

    def options(self, benchmarks_dir: Path | None, tasks_dir: Path | None):
        from contam_assets.model.probe_inputs import ProbeOptions

        return ProbeOptions(
            benchmarks_dir=benchmarks_dir,
            tasks_dir=tasks_dir,
            limit=self.limit or None,
            ref_file=self.ref_file or None,
            fresh_file=self.fresh_file or None,
            baseline_checkpoint=self.baseline_checkpoint or None,
            skywork_batch_size=self.skywork_batch_size,
            k=self.mink_k,
            n_shot=self.n_shot,
            shot_seed=self.shot_seed,
            gsm_max_new_tokens=self.gsm_max_new_tokens,
            code_max_new_tokens=self.code_max_new_tokens,
            execute=self.execute_code,
            exec_timeout_s=self.exec_timeout_s,
            exec_memory_mb=self.exec_memory_mb,
            exec_workers=self.exec_workers,
        )

    @classmethod
    def from_env(cls) -> "ProbeSettings":
        env = os.environ
        return cls(
            limit=int(env.get("CONTAM_PROBE_LIMIT", 0)),
            ref_file=env.get("CONTAM_PROBE_REF", ""),
            fresh_file=env.get("CONTAM_FRESH_SET", ""),
            baseline_checkpoint=env.get("CONTAM_BASELINE_CHECKPOINT", ""),
            execute_code=_env_bool("CONTAM_PROBE_EXECUTE", False),
        )


def model_resources() -> dict:
    return {"checkpoint_loader": CheckpointLoader.from_env(), "probe_settings": ProbeSettings.from_env()}
