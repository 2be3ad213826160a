"""One memory measurement of `posformer bench --memory`, in a process of its own: the peak memory a no-grad forward
or a training step adds above the built model.

    python -m posformer.bench.memory_probe '{"model": "posformer", "encoding": "t5", "length": 4096, ...}'

model: "posformer", "whole" (posformer's with every bias computed in one piece, never in blocks), "hf", or
"checkpointed" / "hf checkpointed" (posformer's / Hugging Face's with activation checkpointing).

prints one JSON line: {"peak_mb": ..., "seconds": ...}, or {"error": "..."} when the step fails (out of memory). On
the CPU the peak is the process's resident high-water mark (`ru_maxrss`) after the step minus the one before it, so
the model's own memory is left out; on a GPU, torch's peak of allocated memory above what was allocated before.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

import torch
from torch import nn

import posformer as pf
from posformer.bench.positions import positions_config
from posformer.modules import bias_blocks

# posformer's encoding -> the Hugging Face model that has it, built from a config of the benchmark's shape
PEERS = ("t5", "alibi", "rope", "relative_key")


def hf_model(encoding: str, shape: dict[str, int], length: int) -> nn.Module:
    """The Hugging Face model with `encoding` at `shape`: T5's encoder (relative buckets), BLOOM (ALiBi), Llama
    (RoPE, SDPA) or BERT with relative_key, dropout off."""
    import transformers

    d_model, layers, heads, vocab, d_ff = (shape[k] for k in ("d_model", "layers", "heads", "vocab", "d_ff"))
    if encoding == "t5":
        config = transformers.T5Config(
            vocab_size=vocab, d_model=d_model, d_kv=d_model // heads, d_ff=d_ff, num_layers=layers,
            num_heads=heads, dropout_rate=0.0,
        )  # fmt: skip
        return transformers.T5EncoderModel(config)
    if encoding == "alibi":
        config = transformers.BloomConfig(
            vocab_size=vocab, hidden_size=d_model, n_layer=layers, n_head=heads, hidden_dropout=0.0,
            attention_dropout=0.0,
        )  # fmt: skip
        return transformers.BloomModel(config)
    if encoding == "rope":
        config = transformers.LlamaConfig(
            vocab_size=vocab, hidden_size=d_model, intermediate_size=d_ff, num_hidden_layers=layers,
            num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=length,
            attn_implementation="sdpa",
        )  # fmt: skip
        return transformers.LlamaModel(config)
    if encoding == "relative_key":
        config = transformers.BertConfig(
            vocab_size=vocab, hidden_size=d_model, num_hidden_layers=layers, num_attention_heads=heads,
            intermediate_size=d_ff, max_position_embeddings=length, position_embedding_type="relative_key",
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        )  # fmt: skip
        return transformers.BertModel(config)
    raise ValueError(f"encoding={encoding!r}: Hugging Face has no model of it here; expected one of {PEERS}")


def posformer_model(encoding: str, shape: dict[str, int], length: int) -> nn.Module:
    """posformer's decoder with `encoding`, the llama preset's parts at `shape` (as `bench --positions`)."""
    return pf.Transformer(positions_config(encoding, "decoder", length=length, **shape))


def peak_mb(device: torch.device) -> float:
    """The peak so far: resident MB on the CPU, allocated MB on a GPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """The peak MB that one forward (phase "forward", no grad) or training step (forward, backward, AdamW step)
    adds above the built model, and its seconds."""
    device = torch.device(spec.get("device", "cpu"))
    torch.set_num_threads(spec.get("threads") or torch.get_num_threads())
    torch.manual_seed(0)
    if spec["model"] == "whole":  # this process alone: every bias computed in one piece, as before the blocks
        bias_blocks.BIAS_BYTES[device.type] = (2**62, 2**62)
    build = hf_model if spec["model"] in ("hf", "hf checkpointed") else posformer_model
    model = build(spec["encoding"], spec["shape"], spec["length"]).to(device)
    if spec["model"] == "checkpointed":
        model.set_activation_checkpointing(True)
    elif spec["model"] == "hf checkpointed":
        model.gradient_checkpointing_enable()
    ids = torch.randint(0, spec["shape"]["vocab"], (spec.get("batch", 1), spec["length"]), device=device)
    train = spec["phase"] == "train"
    model.train(train)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4) if train else None
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device) / 2**20
    else:
        before = peak_mb(device)
    start = time.perf_counter()
    with torch.set_grad_enabled(train):
        out = model(input_ids=ids)
        if train:
            hidden = out.logits if hasattr(out, "logits") and out.logits is not None else out.last_hidden_state
            hidden.float().square().mean().backward()
            optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return {"peak_mb": peak_mb(device) - before, "seconds": time.perf_counter() - start}


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    try:
        result = measure(spec)
    except (torch.OutOfMemoryError, MemoryError) as err:
        result = {"error": f"out of memory ({type(err).__name__})"}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
