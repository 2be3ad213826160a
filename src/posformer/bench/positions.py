"""Training and forward time of every registered position encoding, relative to `none` on the same model.

One model per encoding, identical in everything but `Config.position` (each encoding with its own
default parameters): the `llama` preset's shape at benchmark size, with `arch` decoder, encoder or
encoder-decoder. Every round times each model once, in turn, so that drift on a shared machine hits all
of them alike; an encoding's relative time is the median of its timed rounds divided by the median of
`none`'s. Above 1 the encoding costs that much more than no position information at all.

    posformer bench --positions --help
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

import torch

import posformer as pf
from posformer.bench.runtime import PRECISIONS, Runtime
from posformer.bench.speed import time_phases, torch_threads
from posformer.positions import registry

BASELINE = "none"
ARCHS = ("decoder", "encoder", "encoder_decoder")
ATTENTION = ("sdpa", "flex")


def positions_config(
    position: str,
    arch: str = "decoder",
    d_model: int = 512,
    layers: int = 4,
    heads: int = 8,
    vocab: int = 8192,
    d_ff: int = 1376,
    length: int = 512,
    attn: str = "sdpa",
) -> pf.Config:
    """The benchmark model with encoding `position`: the `llama` preset's parts (RMSNorm pre-norm, SwiGLU,
    no biases) at the given size, no dropout, SDPA wherever the encoding allows it; with attn "flex",
    FlexAttention for the encodings it takes (`flex_compatible`)."""
    extra: dict[str, Any] = {}
    if arch == "encoder_decoder":
        extra = dict(n_decoder_layers=layers, pad_token_id=0, decoder_start_token_id=0)
    return pf.Config.preset(
        "llama",
        arch=arch,
        position=position,
        vocab_size=vocab,
        d_model=d_model,
        n_layers=layers,
        n_heads=heads,
        n_kv_heads=heads,
        d_ff=d_ff,
        max_positions=max(length, 1024),
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        attn_impl=attention_of(position, attn),
        **extra,
    )


def attention_of(position: str, attn: str) -> str:
    """The attention a model of encoding `position` runs when the benchmark asks for `attn`: "flex" where
    the encoding takes it, else "sdpa" (which the model itself turns to "eager" where SDPA cannot take
    the encoding's terms)."""
    return "flex" if attn == "flex" and registry.get(position).flex_compatible() else "sdpa"


def _runs_as(position: str, attn: str) -> str:
    """The attention kernel the model of `position` really runs, for the report."""
    chosen = attention_of(position, attn)
    return chosen if chosen == "flex" or registry.get(position).sdpa_compatible else "eager"


def _check(encodings: Sequence[str], arch: str, attn: str, sizes: dict[str, int]) -> list[str]:
    """The encodings to measure, `none` first; ValueError naming a bad encoding, arch, attention or size."""
    if arch not in ARCHS:
        raise ValueError(f"arch={arch!r} is invalid: expected one of {', '.join(ARCHS)}")
    if attn not in ATTENTION:
        raise ValueError(f"attn={attn!r} is invalid: expected one of {', '.join(ATTENTION)}")
    for name, value in sizes.items():
        low = 0 if name == "warmup" else 1
        if value < low:
            raise ValueError(f"{name}={value} is invalid: expected an integer >= {low}")
    unknown = sorted(set(encodings) - set(registry.names()))
    if unknown:
        raise ValueError(f"unknown encoding(s) {unknown}: expected names from {', '.join(registry.names())}")
    return [BASELINE] + [name for name in dict.fromkeys(encodings) if name != BASELINE]


def _relative(times: dict[str, list[float]], tokens: int) -> dict[str, dict[str, Any]]:
    base = statistics.median(times[BASELINE])
    return {
        name: {
            "relative": statistics.median(seconds) / base,
            "tok_s": tokens / statistics.median(seconds),
            "seconds": seconds,
        }
        for name, seconds in times.items()
    }


def run(
    encodings: Sequence[str] | None = None,
    arch: str = "decoder",
    batch: int = 4,
    length: int = 512,
    d_model: int = 512,
    layers: int = 4,
    heads: int = 8,
    vocab: int = 8192,
    d_ff: int = 1376,
    warmup: int = 1,
    iters: int = 3,
    threads: int | None = None,
    train: bool = True,
    progress: bool = True,
    seed: int = 0,
    device: str = "cpu",
    precision: str = "fp32",
    attn: str = "sdpa",
) -> dict[str, Any]:
    """Time each encoding's model (default: every registered encoding `arch` can use); return the setup and, per phase
    ("forward", "train"), for each encoding its `relative` time (median / median of `none`), `tok_s` and
    the timed seconds per round.

    device, precision: as `posformer.bench.speed.run`. attn "flex": FlexAttention for every encoding that
    takes it (training it needs CUDA: PyTorch has no FlexAttention backward on the CPU)."""
    names = _check(
        registry.usable(arch) if encodings is None else encodings,
        arch,
        attn,
        dict(
            batch=batch,
            length=length,
            d_model=d_model,
            layers=layers,
            heads=heads,
            vocab=vocab,
            d_ff=d_ff,
            iters=iters,
            warmup=warmup,
        ),
    )
    runtime = Runtime.of(device, precision)
    if attn == "flex" and train and runtime.device.type == "cpu":
        raise ValueError(
            "attn='flex' trains only on CUDA (PyTorch has no FlexAttention backward on the CPU): "
            "add --skip-train or --device cuda"
        )
    with torch_threads(threads) as threads:
        models = {}
        for name in names:
            torch.manual_seed(seed)
            cfg = positions_config(name, arch, d_model, layers, heads, vocab, d_ff, length, attn)
            models[name] = pf.Transformer(cfg).to(runtime.device)
        ids = torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))
        ids = ids.to(runtime.device)
        tokens = batch * length
        result: dict[str, Any] = {
            "torch": torch.__version__,
            "threads": threads,
            "device": runtime.name(),
            "precision": precision,
            "arch": arch,
            "batch": batch,
            "length": length,
            "tokens_per_iter": tokens,
            "warmup": warmup,
            "iters": iters,
            "shape": {"d_model": d_model, "layers": layers, "heads": heads, "vocab": vocab, "d_ff": d_ff},
            "attn": {name: _runs_as(name, attn) for name in names},
        }
        inputs = {"input_ids": ids, **({"decoder_input_ids": ids} if arch == "encoder_decoder" else {})}
        for phase, times in time_phases(models, inputs, ids, warmup, iters, train, progress, runtime).items():
            result[phase] = _relative(times, tokens)
        return result


def format_report(result: dict[str, Any]) -> str:
    """The table of `run`'s result: one row per encoding, its time relative to `none` in each phase."""
    shape = result["shape"]
    phases = [phase for phase in ("train", "forward") if phase in result]
    lines = [
        f"torch {result['torch']}, threads {result['threads']}, {result['device']}, "
        f"{PRECISIONS[result['precision']]}; {result['arch']}, llama parts "
        f"(rmsnorm pre-norm, swiglu), d_model={shape['d_model']}, layers={shape['layers']}, "
        f"heads={shape['heads']}, d_ff={shape['d_ff']}, vocab={shape['vocab']}",
        f"batch {result['batch']} x length {result['length']}; warmup {result['warmup']}, median of "
        f"{result['iters']} timed rounds, every encoding once per round",
        "",
        f"{'encoding':<20} {'attention':<10}"
        + "".join(f" {phase + ' x':>10} {phase + ' tok/s':>14}" for phase in phases),
    ]
    for name in result[phases[0]]:
        row = f"{name:<20} {result['attn'][name]:<10}"
        for phase in phases:
            cell = result[phase][name]
            row += f" {cell['relative']:>10.2f} {cell['tok_s']:>14,.0f}"
        lines.append(row)
    lines.append(f"x = median time / median time of {BASELINE!r} in the same run; above 1 the encoding is slower")
    return "\n".join(lines)
