"""Greedy generation in left-padded batches under the token budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from contam_assets.model.batching import LogFn, Progress, pack_batches, pad
from contam_assets.model.loader import LoadedModel


@dataclass(frozen=True)
class Generation:
    text: str  # the continuation, cut before the first stop string
    prompt_truncated: bool  # the prompt lost tokens on the left to fit the context


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    cuts = [text.find(s) for s in stop if s and s in text]
    return text[: min(cuts)] if cuts else text


def generate_greedy(
    lm: LoadedModel,
    prompts: Sequence[str],
    max_new_tokens: int,
    stop: Sequence[str] = (),
    log: LogFn | None = None,
    what: str = "generating",
) -> list[Generation]:
    """Temperature-0 continuations of every prompt, in input order."""
    import torch

    max_new = max(1, min(int(max_new_tokens), lm.max_len - 1))
    room = lm.max_len - max_new
    encoded = []
    for p in prompts:
        ids = list(lm.tokenizer(p, add_special_tokens=True)["input_ids"]) or [lm.pad_id]
        encoded.append((ids[-room:], len(ids) > room))
    out: list[Generation | None] = [None] * len(prompts)
    progress = Progress(what, len(prompts), log)
    stop_kwargs = {"stop_strings": [s for s in stop if s], "tokenizer": lm.tokenizer} if any(stop) else {}
    for batch in pack_batches([len(encoded[i][0]) + max_new for i in range(len(prompts))], lm.token_budget):
        ids, mask, _ = pad([encoded[i][0] for i in batch], lm.pad_id, side="left")
        with torch.inference_mode():
            gen = lm.model.generate(
                input_ids=ids.to(lm.device),
                attention_mask=mask.to(lm.device),
                max_new_tokens=max_new,
                do_sample=False,
                pad_token_id=lm.pad_id,
                **stop_kwargs,
            )
        new_tokens = gen[:, ids.shape[1] :].cpu()
        for b, i in enumerate(batch):
            text = lm.tokenizer.decode(new_tokens[b], skip_special_tokens=True)
            out[i] = Generation(cut_at_stop(text, stop), encoded[i][1])
        progress.advance(len(batch))
    return out  # type: ignore[return-value]
