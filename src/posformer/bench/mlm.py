"""Masked-LM training steps of posformer against Hugging Face `BertForMaskedLM` on the same weights.

HF's model is built from a `BertConfig` and loaded into posformer with `from_hf` (the same tensors). Both
train on the same batch, a seeded share `mask_rate` of its positions keeping their label (the rest -100),
with the same AdamW. posformer runs twice: as the Trainer calls it, the loss alone (`return_logits=False`:
the head projects only the labelled rows, no (B, T, V) logits), and with its logits, as HF always does.
Steps alternate between the three (`measure_interleaved`); tokens/s = batch * length / median step time.

    posformer bench --mlm --help
"""

from __future__ import annotations

import statistics
import tempfile
from typing import Any

import torch

import posformer as pf
from posformer.bench.benchmark_options import MLMOptions
from posformer.bench.options import PRECISIONS
from posformer.bench.runtime import Runtime
from posformer.bench.speed import _transformers, measure_interleaved, torch_threads, train_step
from posformer.modules.heads import IGNORE_INDEX, loss_only
from posformer.utils.options import check_options

RUNS = {"posformer": "posformer, loss alone", "posformer_logits": "posformer, with logits", "hf": "HF"}


def hf_bert_model(d_model: int, layers: int, heads: int, d_ff: int, vocab: int, length: int) -> Any:
    """A freshly initialised HF `BertForMaskedLM` (SDPA attention, dropout off) of these sizes."""
    transformers = _transformers()
    config = transformers.BertConfig(
        vocab_size=vocab,
        hidden_size=d_model,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=d_ff,
        max_position_embeddings=max(length, 512),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation="sdpa",
    )
    return transformers.BertForMaskedLM(config)


def masked_labels(ids: torch.Tensor, mask_rate: float, generator: torch.Generator) -> torch.Tensor:
    """ids (B, T) -> labels (B, T): each position keeps its token with probability mask_rate, else -100."""
    keep = torch.rand(ids.shape, generator=generator) < mask_rate
    return ids.masked_fill(~keep, IGNORE_INDEX)


def run(options: MLMOptions) -> dict[str, Any]:
    """Time the training steps; return the setup, per run its tokens/s (`{key}_tok_s`) and step seconds
    (`{key}_s`), each run's first loss (`first_loss`: the same function, so equal up to float reordering) and the
    ratios to HF (`ratio`: the loss alone, `ratio_logits`: with logits)."""
    check_options(options)
    runtime = Runtime.of(options.device, options.precision)
    with torch_threads(options.threads) as threads:
        torch.manual_seed(options.seed)
        hf = hf_bert_model(options.d_model, options.layers, options.heads, options.d_ff, options.vocab, options.length)
        with tempfile.TemporaryDirectory() as directory:
            hf.save_pretrained(directory)
            ours = pf.from_hf(directory)
        generator = torch.Generator().manual_seed(options.seed)
        ids = torch.randint(0, options.vocab, (options.batch, options.length), generator=generator)
        labels = masked_labels(ids, options.mask_rate, generator)
        inputs = {"input_ids": ids.to(runtime.device), "labels": labels.to(runtime.device)}
        models = {"posformer": ours, "posformer_logits": ours, "hf": hf}  # posformer's runs: one model, two AdamWs
        arguments = {"posformer": loss_only(ours.cfg.head_kind), "posformer_logits": {}, "hf": {}}
        first_loss = {}
        for name, model in models.items():
            model.to(runtime.device).train()
            with torch.no_grad(), runtime.autocast():
                first_loss[name] = float(model(**inputs, **arguments[name]).loss)
        steps = {name: train_step(model, {**inputs, **arguments[name]}, runtime) for name, model in models.items()}
        times = measure_interleaved(steps, options.warmup, options.iters, "train", options.progress)
    tokens = options.batch * options.length
    result: dict[str, Any] = {
        "torch": torch.__version__,
        "transformers": _transformers().__version__,
        "threads": threads,
        "device": runtime.name(),
        "precision": runtime.precision,
        "batch": options.batch,
        "length": options.length,
        "d_model": options.d_model,
        "layers": options.layers,
        "heads": options.heads,
        "d_ff": options.d_ff,
        "vocab": options.vocab,
        "mask_rate": options.mask_rate,
        "labelled_tokens": int((labels != IGNORE_INDEX).sum()),
        "warmup": options.warmup,
        "iters": options.iters,
        "params": sum(p.numel() for p in ours.parameters()),
        "first_loss": first_loss,
    }
    for name, seconds in times.items():
        result[f"{name}_s"] = seconds
        result[f"{name}_tok_s"] = tokens / statistics.median(seconds)
    result["ratio"] = result["posformer_tok_s"] / result["hf_tok_s"]
    result["ratio_logits"] = result["posformer_logits_tok_s"] / result["hf_tok_s"]
    return result


def format_report(result: dict[str, Any]) -> str:
    """The setup, each run's tokens/s and first loss, and the ratios to HF."""
    lines = [
        f"torch {result['torch']}, transformers {result['transformers']}, threads {result['threads']}, "
        f"{result['device']}, {PRECISIONS[result['precision']]}",
        f"BERT masked LM: d_model={result['d_model']}, {result['layers']} layers, {result['heads']} heads, "
        f"d_ff={result['d_ff']}, vocab={result['vocab']}, {result['params']:,} parameters (HF's weights, "
        f"loaded with from_hf)",
        f"batch {result['batch']} x length {result['length']}; {result['labelled_tokens']} labelled tokens "
        f"(mask rate {result['mask_rate']:g}); warmup {result['warmup']}, median of {result['iters']} timed "
        f"training steps (the runs in turn)",
        "",
        f"{'run':<24} {'train tok/s':>12} {'vs HF':>8} {'first loss':>12}",
    ]
    ratios = {"posformer": result["ratio"], "posformer_logits": result["ratio_logits"], "hf": 1.0}
    for key, name in RUNS.items():
        lines.append(
            f"{name:<24} {result[f'{key}_tok_s']:>12,.0f} {ratios[key]:>8.3f} {result['first_loss'][key]:>12.6f}"
        )
    lines.append("vs HF = tok/s / HF tok/s; > 1 means faster. The loss alone is how the Trainer calls the model.")
    return "\n".join(lines)
