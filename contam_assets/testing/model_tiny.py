"""Tiny real checkpoints for the model-side tests and benchmarks.

A byte-level BPE tokenizer trained locally with ``tokenizers`` and a 2-layer
GPT-2 from ``transformers``, saved as a real Hugging Face folder.  The trained
checkpoint memorises a planted set (GSM8K test items, HumanEval solutions, an
alternative HumanEval body, GSM8K answers in the few-shot prompt format) so
the probes have known answers.
"""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path

from contam_assets.testing import SHARED_DATA as SHARED

N_MEMBERS = 16  # the shortest GSM8K test items among the first 200 are trained on ("{question} {answer}")
RECITED = ("HumanEval/27", "HumanEval/34", "HumanEval/55")  # trained on prompt + canonical solution
ALTERNATIVE = {  # trained on prompt + a different correct body
    "HumanEval/23": "    count = 0\n    for _ in string:\n        count += 1\n    return count\n",
}
N_GSM_PROMPTED = 3  # GSM8K test items (that GSM-Hard changes) trained in the "Question: …\nAnswer: …" format


def jsonl(name: str) -> list[dict]:
    path = SHARED / name
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def humaneval() -> dict[str, dict]:
    return {r["task_id"]: r for r in jsonl("HumanEval.jsonl.gz")}


def _by_length(indices, rows) -> list[int]:
    return sorted(indices, key=lambda i: (len(rows[i]["question"]) + len(rows[i]["answer"]), i))


def member_indices() -> list[int]:
    test = jsonl("gsm8k_test.jsonl")
    return sorted(_by_length(range(200), test)[:N_MEMBERS])


def gsm_prompted_indices() -> list[int]:
    """Short test items whose GSM-Hard version has a different question and a different answer."""
    test, hard = jsonl("gsm8k_test.jsonl"), jsonl("gsmhard_v2.jsonl")
    eligible = []
    for i, (t, h) in enumerate(zip(test[:300], hard)):
        gold = float(t["answer"].split("####")[-1].replace(",", ""))
        if t["question"] != h["input"] and abs(gold - float(h["target"])) > 1e-6:
            eligible.append(i)
    return sorted(_by_length(eligible, test)[:N_GSM_PROMPTED])


def train_tokenizer(vocab_size: int = 1000):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [f"{r['question']} {r['answer']}" for r in jsonl("gsm8k_train.jsonl")[:1500]]
    corpus += [r["prompt"] + r["canonical_solution"] for r in humaneval().values()]
    corpus += [r["code"] for r in jsonl("mbpp.jsonl")[:300]]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>"
    )


def new_model(tokenizer, n_embd: int = 64, n_layer: int = 2, n_positions: int = 512, seed: int = 0):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    cfg = GPT2Config(
        vocab_size=len(tokenizer), n_positions=n_positions, n_embd=n_embd, n_layer=n_layer, n_head=4,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    return GPT2LMHeadModel(cfg)


def save(folder: Path, model, tokenizer, meta: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if meta is not None:
        (folder / "contam_checkpoint.json").write_text(json.dumps(meta))
    return folder


def train(model, sequences: list[list[int]], steps: int, lr: float = 5e-3, batch_size: int = 8, seed: int = 0) -> float:
    """Plain next-token training on token-id sequences; returns the last batch loss."""
    import torch

    # One thread: tiny matrices gain nothing from more, and lose a lot on a busy machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(model, sequences, steps, lr, batch_size, seed)
    finally:
        torch.set_num_threads(threads)


def _train(model, sequences, steps, lr, batch_size, seed) -> float:
    import torch

    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    loss = torch.tensor(float("nan"))
    for _ in range(steps):
        pick = torch.randint(len(sequences), (min(batch_size, len(sequences)),), generator=gen).tolist()
        rows = [sequences[i] for i in pick]
        width = max(len(r) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        labels = torch.full((len(rows), width), -100, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, r in enumerate(rows):
            ids[b, : len(r)] = torch.tensor(r)
            labels[b, : len(r)] = torch.tensor(r)
            mask[b, : len(r)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())


def planted_sequences(tokenizer) -> list[list[int]]:
    """Token ids the trained checkpoint learns; prompt and continuation are tokenized apart, as at inference."""
    enc = lambda s: tokenizer(s, add_special_tokens=True)["input_ids"]  # noqa: E731
    eos = [tokenizer.eos_token_id]
    test = jsonl("gsm8k_test.jsonl")
    seqs = [enc(f"{test[i]['question']} {test[i]['answer']}") for i in member_indices()]
    he = humaneval()
    # Generation needs exact recall, so these are repeated (sampled more often than the members).
    for tid in RECITED:
        seqs += 2 * [enc(he[tid]["prompt"]) + enc(he[tid]["canonical_solution"]) + enc("\n\ndef")]
    for tid, body in ALTERNATIVE.items():
        seqs += 2 * [enc(he[tid]["prompt"]) + enc(body) + enc("\n\ndef")]
    for i in gsm_prompted_indices():
        seqs += 4 * [enc(f"Question: {test[i]['question']}\nAnswer:") + enc(f" {test[i]['answer']}") + enc("\n\nQuestion:")]
    return [s[:512] + eos for s in seqs]


@lru_cache(maxsize=None)
def tokenizer_cached():
    return train_tokenizer()


def untrained_checkpoint(folder: Path, meta: dict | None = None) -> Path:
    tok = tokenizer_cached()
    return save(folder, new_model(tok), tok, meta)


_TRAINED: dict[str, Path] = {}


def trained_checkpoint(base: Path, steps: int = 300) -> Path:
    """The planted-set checkpoint, trained once per test session under ``base``."""
    key = str(base)
    if key not in _TRAINED:
        tok = tokenizer_cached()
        model = new_model(tok, n_embd=128, n_layer=2)
        loss = train(model, planted_sequences(tok), steps=steps)
        folder = save(base / "trained", model, tok, {"experiment": "planted", "stage": f"step-{steps:06d}", "step": steps, "is_base": False})
        (folder / "train_loss.txt").write_text(f"{loss}\n")
        _TRAINED[key] = folder
    return _TRAINED[key]


# --- a Llama-style checkpoint whose tokenizer prepends <s> (Skywork and OpenCompass conventions differ) ---


def train_llama_tokenizer(vocab_size: int = 800):
    """A BPE tokenizer with Llama's special tokens whose post-processor prepends ``<s>`` (as Llama's does)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [f"{r['question']} {r['answer']}" for r in jsonl("gsm8k_train.jsonl")[:1000]]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


@lru_cache(maxsize=None)
def llama_tokenizer_cached():
    return train_llama_tokenizer()


def llama_checkpoint(folder: Path, max_positions: int = 512, dtype: str | None = None, seed: int = 0) -> Path:
    """An untrained 2-layer Llama (no pad token, like Llama) saved as a real folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = llama_tokenizer_cached()
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=max_positions, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg)
    if dtype:
        model = model.to(getattr(torch, dtype))
    return save(folder, model, tok)


def trained_llama_checkpoint(folder: Path, steps: int = 120, max_positions: int = 1024) -> Path:
    """The tiny Llama after a little training on GSM8K train (with <s>, as Llamas are trained)."""
    from transformers import AutoModelForCausalLM

    path = llama_checkpoint(folder, max_positions=max_positions)
    tok = llama_tokenizer_cached()
    model = AutoModelForCausalLM.from_pretrained(path)
    seqs = [tok(f"{r['question']} {r['answer']}")["input_ids"][:256] for r in jsonl("gsm8k_train.jsonl")[1000:1400]]
    train(model, seqs, steps=steps, lr=3e-3)
    return save(path, model, tok)
