"""Model-side resources: how checkpoints load (`checkpoint_loader`) and what the probes read (`probe_settings`)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from contam_assets import settings


class CheckpointLoader(dg.ConfigurableResource):
    """Loads checkpoint folders (every GPU through accelerate, the checkpoint's own dtype) and finds new ones."""

    device: str = "auto"  # auto (device_map over every GPU, else CPU) | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto (the checkpoint's own) | float32 | bfloat16 | float16
    device_map: str = ""  # an accelerate strategy instead of `device` (balanced, sequential, ...)
    max_memory: str = ""  # per-device caps for the device map, "0=20GiB,cpu=64GiB"
    trust_remote_code: bool = False  # run modelling code shipped in the folder
    generation_backend: str = "transformers"  # transformers | vllm (generation probes)
    token_budget: int = 16384  # padded tokens per forward batch (bounds memory)
    allow_hub: bool = False  # never download unless a user turns this on
    extra_checkpoints_dir: str = ""  # another folder the sensor watches
    settle_seconds: float = 30.0  # a folder changed more recently is still being written

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
        return cls(
            device=settings.env_value("device"),
            dtype=settings.env_value("dtype"),
            device_map=settings.env_value("device_map"),
            max_memory=settings.env_value("max_memory"),
            trust_remote_code=settings.env_value("trust_remote_code"),
            generation_backend=settings.env_value("generation_backend"),
            token_budget=settings.env_value("token_budget"),
            extra_checkpoints_dir=settings.env_value("checkpoints"),
            settle_seconds=settings.env_value("checkpoint_settle_s"),
        )


class ProbeSettings(dg.ConfigurableResource):
    """What the probes read and how far they go."""

    limit: int = 0  # first N items of every set (0 = full sets)
    ref_file: str = ""  # GSM8K reference set ("" = Skywork's mock file in the benchmark folder)
    fresh_file: str = ""  # fresh GSM-style JSONL for the gap ("" = skip the fresh-set gap)
    baseline_checkpoint: str = ""  # a model that never saw the data (calibration)
    skywork_batch_size: int = 1  # Skywork eval_loss.py batching to reproduce (1 = the loss as defined)
    mink_k: float = 0.2
    n_shot: int = 5
    shot_seed: int = 1234  # few-shot examples drawn per question (lm-evaluation-harness's seed)
    gsm_max_new_tokens: int = 256
    code_max_new_tokens: int = 384
    execute_code: bool = False  # run generated code (subprocess, limited) for pass@1
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
        return cls(
            limit=settings.env_value("probe_limit"),
            ref_file=settings.env_value("probe_ref"),
            fresh_file=settings.env_value("fresh_set"),
            baseline_checkpoint=settings.env_value("baseline_checkpoint"),
            execute_code=settings.env_value("probe_execute"),
        )


def model_resources() -> dict:
    return {"checkpoint_loader": CheckpointLoader.from_env(), "probe_settings": ProbeSettings.from_env()}
