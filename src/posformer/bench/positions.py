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
from typing import Any

import torch

import posformer as pf
from posformer import positions
from posformer.bench.benchmark_options import PositionsOptions
from posformer.bench.options import PRECISIONS
from posformer.bench.runtime import Runtime
from posformer.bench.speed import time_phases, torch_threads
from posformer.experiments.mechanism_rows import MECHANISM_ROWS, row_base, with_mechanism
from posformer.utils.options import check_options

BASELINE = "none"


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
    FlexAttention for the encodings it takes (`flex_compatible`). A mechanism row (`experiments.mechanism_rows`)
    is its base encoding's model changed by the mechanism, with `length` as its training length."""
    extra: dict[str, Any] = {}
    if arch == "encoder_decoder":
        extra = dict(n_decoder_layers=layers, pad_token_id=0, decoder_start_token_id=0)
    cfg = pf.Config.preset(
        "llama",
        arch=arch,
        position=row_base(position),
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
    return with_mechanism(position, cfg, length)


def attention_of(position: str, attn: str) -> str:
    """The attention a model of encoding `position` runs when the benchmark asks for `attn`: "flex" where
    the encoding takes it, else "sdpa" (which the model itself turns to "eager" where SDPA cannot take
    the encoding's terms)."""
    return "flex" if attn == "flex" and positions.get(row_base(position)).flex_compatible() else "sdpa"


def _runs_as(position: str, attn: str) -> str:
    """The attention kernel the model of `position` really runs, for the report."""
    chosen = attention_of(position, attn)
    return chosen if chosen == "flex" or positions.get(row_base(position)).sdpa_compatible else "eager"


def _encodings(options: PositionsOptions) -> list[str]:
    """The encodings to measure, `none` first; ValueError naming a bad option or an unknown encoding."""
    check_options(options)
    encodings = default_rows(options.arch) if options.encodings is None else options.encodings
    check_rows(encodings, options.arch)
    return [BASELINE] + [name for name in dict.fromkeys(encodings) if name != BASELINE]


def default_rows(arch: str) -> list[str]:
    """Every registered encoding `arch` can use, and for a decoder the mechanism rows."""
    return positions.usable(arch) + (list(MECHANISM_ROWS) if arch == "decoder" else [])


def check_rows(rows: list[str], arch: str = "decoder") -> None:
    """A ValueError naming any row that is neither a registered encoding nor, for a decoder, a mechanism."""
    known = positions.names() + (list(MECHANISM_ROWS) if arch == "decoder" else [])
    unknown = sorted(set(rows) - set(known))
    if unknown:
        raise ValueError(f"unknown encoding(s) {unknown} for arch={arch!r}: expected names from {', '.join(known)}")


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


def run(options: PositionsOptions) -> dict[str, Any]:
    """Time each encoding's model (default: every registered encoding `arch` can use); return the setup and, per phase
    ("forward", "train"), for each encoding its `relative` time (median / median of `none`), `tok_s` and
    the timed seconds per round.

    device, precision: as `posformer.bench.speed.run`. attn "flex": FlexAttention for every encoding that
    takes it (training it needs CUDA: PyTorch has no FlexAttention backward on the CPU)."""
    names = _encodings(options)
    runtime = Runtime.of(options.device, options.precision)
    if options.attn == "flex" and options.train and runtime.device.type == "cpu":
        raise ValueError(
            "attn='flex' trains only on CUDA (PyTorch has no FlexAttention backward on the CPU): "
            "add --skip-train or --device cuda"
        )
    with torch_threads(options.threads) as threads:
        models = {}
        for name in names:
            torch.manual_seed(options.seed)
            cfg = positions_config(
                name,
                options.arch,
                options.d_model,
                options.layers,
                options.heads,
                options.vocab,
                options.d_ff,
                options.length,
                options.attn,
            )
            models[name] = pf.Transformer(cfg).to(runtime.device)
        ids = torch.randint(
            0, options.vocab, (options.batch, options.length), generator=torch.Generator().manual_seed(options.seed)
        )
        ids = ids.to(runtime.device)
        tokens = options.batch * options.length
        result: dict[str, Any] = {
            "torch": torch.__version__,
            "threads": threads,
            "device": runtime.name(),
            "precision": runtime.precision,
            "arch": options.arch,
            "batch": options.batch,
            "length": options.length,
            "tokens_per_iter": tokens,
            "warmup": options.warmup,
            "iters": options.iters,
            "shape": {
                "d_model": options.d_model,
                "layers": options.layers,
                "heads": options.heads,
                "vocab": options.vocab,
                "d_ff": options.d_ff,
            },
            "attn": {name: _runs_as(name, options.attn) for name in names},
        }
        inputs = {"input_ids": ids, **({"decoder_input_ids": ids} if options.arch == "encoder_decoder" else {})}
        for phase, times in time_phases(
            models, inputs, ids, options.warmup, options.iters, options.train, options.progress, runtime
        ).items():
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
