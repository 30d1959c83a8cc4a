"""Optional vLLM backend for the generation probes (recitation, fresh-set gap).

Generation is where a large checkpoint spends its time (plain HF ``generate``
on a 7B runs for tens of minutes over HumanEval, MBPP and two GSM sets);
vLLM's paged attention and continuous batching cut that.  Scoring stays on
transformers: Min-K%++ needs the full-vocabulary distribution at every
position, which vLLM does not return.  Greedy decoding (temperature 0), the
same prompts, the same left truncation and stop strings as the transformers
path; vLLM shares the GPUs with the scoring model, so it gets a fraction of
their memory (``gpu_memory_utilization``, default 0.45).

vllm pins its own torch and needs a CUDA GPU; it is not a dependency of
contam-assets.  Asking for it where it is not installed is an error that
says so, never a silent fall-back.
"""

from __future__ import annotations

from typing import Sequence


class BackendUnavailable(ValueError):
    """The generation backend asked for cannot be used here."""


BACKENDS = ("transformers", "vllm")


def unavailable_reason() -> str | None:
    """Why vLLM cannot be used here (None = it can)."""
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install raising anything at import
        return (f"vllm is not installed ({type(exc).__name__}: {exc}); `pip install vllm` on a machine with a CUDA GPU "
                "(it pins its own torch), or use --generation-backend transformers")
    import torch

    if not torch.cuda.is_available():
        return "vllm is installed but there is no CUDA GPU; use --generation-backend transformers"
    return None


class VllmGenerator:
    """Greedy generation from token ids with a vLLM engine over the same checkpoint folder."""

    def __init__(self, path: str, dtype: str = "auto", trust_remote_code: bool = False, max_len: int | None = None,
                 tensor_parallel_size: int | None = None, gpu_memory_utilization: float = 0.45):
        reason = unavailable_reason()
        if reason:
            raise BackendUnavailable(reason)
        import torch
        from vllm import LLM

        self.llm = LLM(
            model=path,
            tokenizer=path,
            dtype=dtype,
            trust_remote_code=trust_remote_code,
            tensor_parallel_size=tensor_parallel_size or max(1, torch.cuda.device_count()),
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_len,
            seed=0,
        )

    def generate(self, prompt_ids: Sequence[Sequence[int]], max_new_tokens: int, stop: Sequence[str]) -> list[str]:
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop=[s for s in stop if s] or None,
                                skip_special_tokens=True)
        outputs = self.llm.generate([{"prompt_token_ids": list(ids)} for ids in prompt_ids], params, use_tqdm=False)
        return [out.outputs[0].text for out in outputs]
