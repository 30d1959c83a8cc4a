"""Greedy generation in left-padded batches under the token budget (or by the optional vLLM backend).

A prompt longer than the room left for the answer loses tokens on the left
(as OpenCompass truncates); the answer is cut before the first stop string.
"""

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
        cut = len(ids) > room
        if cut:  # the tokenizer truncates on the left (set at load) and keeps its special tokens, as OpenCompass
            ids = list(lm.tokenizer(p, add_special_tokens=True, truncation=True, max_length=room)["input_ids"])
        encoded.append((ids, cut))
    out: list[Generation | None] = [None] * len(prompts)
    progress = Progress(what, len(prompts), log)
    if lm.generator is not None:  # vLLM: chunks only so that progress gets logged
        for start in range(0, len(prompts), 64):
            chunk = range(start, min(start + 64, len(prompts)))
            texts = lm.generator.generate([encoded[i][0] for i in chunk], max_new, stop)
            for i, text in zip(chunk, texts):
                out[i] = Generation(cut_at_stop(text, stop), encoded[i][1])
            progress.advance(len(chunk))
        return out  # type: ignore[return-value]
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
