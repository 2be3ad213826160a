"""Throughput of posformer's `llama` preset against Hugging Face `LlamaForCausalLM` (SDPA), same config,
and against x-transformers' decoder of the same shape when it is installed.

The models are built from one `Config` (the HF `LlamaConfig` is derived from it by
`hf_llama_config`, the x-transformers model by `XTransformersLM`), fed the same
token ids, run with the same thread count, device and precision (`Runtime`) and
trained with the same AdamW settings. Iterations alternate between the models (ABC ABC ...) so that drift on a
shared machine hits all alike; the median time of the timed iterations gives
tokens/s = batch * length / time.

    posformer bench --help
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
from torch import nn

import posformer as pf
from posformer.bench.benchmark_options import SpeedOptions
from posformer.bench.flops import forward_flops_per_token, train_flops_per_token
from posformer.bench.options import PRECISIONS
from posformer.bench.runtime import Runtime
from posformer.bench.x_transformers_peer import X_TRANSFORMERS_REQUIREMENT, XTransformersLM, x_transformers_available
from posformer.train.optim import adamw
from posformer.utils.options import check_options
from posformer.utils.progress import progress_bar
from posformer.utils.validation import check_int

HF_REQUIREMENT = "transformers==4.57.6"
ADAMW = {"lr": 1e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
PEERS = {"hf": "HF", "x_transformers": "x-transformers"}  # result key -> name in the report


def bench_config(
    d_model: int = 512, layers: int = 8, heads: int = 8, vocab: int = 8192, d_ff: int = 1376, length: int = 512
) -> pf.Config:
    """The `llama` preset at benchmark size: RoPE theta 10000, RMSNorm eps 1e-5, no biases, untied, no dropout."""
    return pf.Config.preset(
        "llama",
        vocab_size=vocab,
        d_model=d_model,
        n_layers=layers,
        n_heads=heads,
        n_kv_heads=heads,
        d_ff=d_ff,
        max_positions=max(length, 4096),
        position_params={"theta": 10000.0},
        norm_eps=1e-5,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        attn_impl="sdpa",
    )


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as err:
        raise ImportError(
            f"this benchmark compares against Hugging Face transformers, which is not installed: "
            f"pip install {HF_REQUIREMENT}"
        ) from err
    return transformers


def hf_llama_config(cfg: pf.Config) -> Any:
    """The Hugging Face `LlamaConfig` describing the same model as `cfg` (a decoder with rope, rmsnorm, swiglu)."""
    transformers = _transformers()
    return transformers.LlamaConfig(
        hidden_size=cfg.d_model,
        intermediate_size=cfg.ff_dim,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim,
        vocab_size=cfg.vocab_size,
        rms_norm_eps=cfg.norm_eps,
        rope_theta=float(cfg.position_params["theta"]),
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=cfg.tie_embeddings,
        attention_bias=cfg.qkv_bias,
        mlp_bias=cfg.ffn_bias,
        attention_dropout=cfg.attention_dropout,
        hidden_act="silu",
        use_cache=False,
        bos_token_id=cfg.bos_token_id,
        eos_token_id=cfg.eos_token_id,
        attn_implementation="sdpa",
    )


def measure_interleaved(
    steps: dict[str, Callable[[], None]], warmup: int, iters: int, desc: str, progress: bool
) -> dict[str, list[float]]:
    """Run the steps in turn (ABAB) warmup + iters times; the seconds of the timed iterations per step."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    for i in progress_bar(range(warmup + iters), desc=desc, unit="iter", disable=not progress):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            elapsed = time.perf_counter() - start
            if i >= warmup:
                times[name].append(elapsed)
    return times


@contextmanager
def torch_threads(threads: int | None) -> Iterator[int]:
    """torch.set_num_threads(threads) inside the block (None: the current count), restored after it;
    yields the count. ValueError for a count below 1."""
    previous = torch.get_num_threads()
    threads = previous if threads is None else threads
    if threads < 1:
        raise ValueError(f"threads={threads} is invalid: expected an integer >= 1")
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(previous)


def time_phases(
    models: dict[str, nn.Module],
    inputs: dict[str, torch.Tensor],
    labels: torch.Tensor,
    warmup: int,
    iters: int,
    train: bool,
    progress: bool,
    runtime: Runtime | None = None,
) -> dict[str, dict[str, list[float]]]:
    """The timed seconds of each model, interleaved, per phase: "forward" (eval mode, no grad, `inputs`)
    and, with `train`, "train" (train mode, `inputs` with `labels`, backward and an AdamW step). The models
    and tensors are on `runtime`'s device (default: the CPU in fp32); each step runs in its precision and
    waits for the device before its time is taken."""
    runtime = runtime or Runtime(torch.device("cpu"))
    for model in models.values():
        model.eval()
    steps = {name: _forward_step(model, inputs, runtime) for name, model in models.items()}
    times = {"forward": measure_interleaved(steps, warmup, iters, "forward", progress)}
    if train:
        for model in models.values():
            model.train()
        steps = {name: train_step(model, {**inputs, "labels": labels}, runtime) for name, model in models.items()}
        times["train"] = measure_interleaved(steps, warmup, iters, "train", progress)
    return times


def compile_seconds(
    model: nn.Module, inputs: dict[str, torch.Tensor], labels: torch.Tensor, train: bool, runtime: Runtime
) -> dict[str, float]:
    """Compile a `torch.compile`d model for each phase by running it once: the seconds of that first call,
    "forward" (eval, no grad) and, with `train`, "train" (train mode, forward and backward)."""
    seconds = {}
    model.eval()
    start = time.perf_counter()
    _forward_step(model, inputs, runtime)()
    seconds["forward"] = time.perf_counter() - start
    if train:
        model.train()
        start = time.perf_counter()
        with runtime.autocast():
            loss = model(**inputs, labels=labels).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
        runtime.synchronize()
        seconds["train"] = time.perf_counter() - start
    return seconds


def ratio_key(peer: str) -> str:
    """Where a result row keeps posformer's ratio to `peer`: "ratio" for HF, "ratio_{peer}" for the others."""
    return "ratio" if peer == "hf" else f"ratio_{peer}"


def _summary(
    times: dict[str, list[float]], tokens: int, flops_per_token: float, peak_tflops: float | None
) -> dict[str, Any]:
    """tok/s, timed seconds and model TFLOP/s per model (`{key}_tok_s`, `{key}_s`, `{key}_tflops`), with a
    known peak the model FLOPs utilisation (`{key}_mfu`, a fraction), and posformer's ratio to each peer:
    `ratio` against HF, `ratio_x_transformers` against x-transformers."""
    row: dict[str, Any] = {}
    for key, seconds in times.items():
        row[f"{key}_tok_s"], row[f"{key}_s"] = tokens / statistics.median(seconds), seconds
        row[f"{key}_tflops"] = row[f"{key}_tok_s"] * flops_per_token / 1e12
        if peak_tflops:
            row[f"{key}_mfu"] = row[f"{key}_tflops"] / peak_tflops
    for key in PEERS:
        if key in times:
            row[ratio_key(key)] = row["posformer_tok_s"] / row[f"{key}_tok_s"]
    return row


def _forward_step(model: nn.Module, inputs: dict[str, torch.Tensor], runtime: Runtime) -> Callable[[], None]:
    """A no-grad forward of `model(**inputs)` in the runtime's precision, finished on its device."""

    def step() -> None:
        with torch.no_grad(), runtime.autocast():
            model(**inputs)
        runtime.synchronize()

    return step


def train_step(model: nn.Module, inputs: dict[str, Any], runtime: Runtime) -> Callable[[], None]:
    """One AdamW step on `model(**inputs).loss` (inputs hold the labels), the forward in the runtime's
    precision, finished on its device."""
    optimizer = adamw(model.parameters(), **ADAMW)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with runtime.autocast():
            loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        runtime.synchronize()

    return step


def run(options: SpeedOptions) -> dict[str, Any]:
    """Benchmark the models; return the setup and, per phase ("forward", "train"), the tokens/s of each
    model (`posformer_tok_s`, `hf_tok_s`, `x_transformers_tok_s`), their model TFLOP/s and, on a GPU of
    known peak, MFU (`bench.flops`), `ratio` = posformer / HF, `ratio_x_transformers` = posformer /
    x-transformers and the timed seconds per iteration. x-transformers takes part when it is installed
    (`x_transformers_available`).

    compile: posformer's model runs under `torch.compile` (default mode), HF's stays eager; the seconds
    its compilation took per phase are reported apart (`compile_s`), outside the timed iterations.
    device, precision: where every model runs ("cpu", "cuda") and in what ("fp32", or "bf16" autocast
    over float32 weights, as `Trainer(precision="bf16")`)."""
    check_options(options)
    check_int("length", options.length, minimum=2)  # a training step predicts at least one next token
    runtime = Runtime.of(options.device, options.precision)
    transformers = _transformers()
    cfg = bench_config(options.d_model, options.layers, options.heads, options.vocab, options.d_ff, options.length)
    with torch_threads(options.threads) as threads:
        torch.manual_seed(options.seed)
        models = {
            "posformer": pf.Transformer(cfg).float(),
            "hf": transformers.LlamaForCausalLM(hf_llama_config(cfg)).float(),
        }
        if x_transformers_available():
            models["x_transformers"] = XTransformersLM(cfg).float()
        params = {name: sum(p.numel() for p in model.parameters()) for name, model in models.items()}
        if params["posformer"] != params["hf"]:
            raise RuntimeError(f"the two models differ in size ({params}): the comparison would not be fair")
        attn = models["hf"].config._attn_implementation
        if attn != "sdpa":
            raise RuntimeError(f"Hugging Face model uses attention {attn!r}, expected 'sdpa'")
        models = {name: model.to(runtime.device) for name, model in models.items()}
        generator = torch.Generator().manual_seed(options.seed)
        ids = torch.randint(0, cfg.vocab_size, (options.batch, options.length), generator=generator).to(runtime.device)
        tokens = options.batch * options.length
        flops = {
            "forward": forward_flops_per_token(cfg, models["posformer"], options.length),
            "train": train_flops_per_token(cfg, models["posformer"], options.length),
        }
        result: dict[str, Any] = {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "threads": threads,
            "device": runtime.name(),
            "precision": runtime.precision,
            "peak_tflops": runtime.peak_tflops(),
            "batch": options.batch,
            "length": options.length,
            "tokens_per_iter": tokens,
            "warmup": options.warmup,
            "iters": options.iters,
            "params": params["posformer"],
            "flops_per_token": flops,
            "config": cfg.to_dict(),
            "compile": options.compile,
            "peer_params": {key: params[key] for key in PEERS if key in params},
        }
        if options.compile:
            models["posformer"] = torch.compile(models["posformer"])
            result["compile_s"] = compile_seconds(models["posformer"], {"input_ids": ids}, ids, options.train, runtime)
        phases = time_phases(
            models, {"input_ids": ids}, ids, options.warmup, options.iters, options.train, options.progress, runtime
        )
        for phase, times in phases.items():
            result[phase] = _summary(times, tokens, flops[phase], result["peak_tflops"])
        return result


def format_report(result: dict[str, Any]) -> str:
    """A readable report of `run`'s result: versions, config and the throughput table."""
    cfg = result["config"]
    lines = [
        f"torch {result['torch']}, transformers {result['transformers']}, threads {result['threads']}, "
        f"{result['device']}, {PRECISIONS[result['precision']]}",
        f"config: llama preset, d_model={cfg['d_model']}, n_layers={cfg['n_layers']}, n_heads={cfg['n_heads']}, "
        f"n_kv_heads={cfg['n_kv_heads']}, d_ff={cfg['d_ff']}, vocab={cfg['vocab_size']}, "
        f"rope theta={cfg['position_params']['theta']:g}, rms eps={cfg['norm_eps']:g}, "
        f"no biases, untied embeddings, {result['params']:,} parameters",
        f"batch {result['batch']} x length {result['length']} = {result['tokens_per_iter']} tokens/iter; "
        f"warmup {result['warmup']}, median of {result['iters']} timed iterations (the models in turn)",
    ]
    if result["compile"]:
        lines.append(
            "posformer under torch.compile (HF eager); compilation took "
            + ", ".join(f"{seconds:.1f} s ({phase})" for phase, seconds in result["compile_s"].items())
            + ", not timed"
        )
    lines += [
        "",
    ]
    peers = list(result["peer_params"])
    if "x_transformers" in peers:
        lines.append(
            f"x-transformers: the same shape, {result['peer_params']['x_transformers']:,} parameters "
            f"(its SwiGLU projection keeps a bias)"
        )
    else:
        lines.append(f"x-transformers: not installed, not measured (pip install {X_TRANSFORMERS_REQUIREMENT})")
    lines.append(
        f"{'phase':<8} {'posformer tok/s':>16}"
        + "".join(f" {PEERS[k] + ' tok/s':>20}" for k in peers)
        + "".join(f" {'vs ' + PEERS[k]:>18}" for k in peers)
    )
    for phase in ("forward", "train"):
        if phase in result:
            row = result[phase]
            ratios = [row[ratio_key(k)] for k in peers]
            lines.append(
                f"{phase:<8} {row['posformer_tok_s']:>16,.0f}"
                + "".join(f" {row[f'{k}_tok_s']:>20,.0f}" for k in peers)
                + "".join(f" {ratio:>18.3f}" for ratio in ratios)
            )
    lines.append("vs X = posformer tok/s / X tok/s; > 1 means posformer is faster")
    return "\n".join(lines + _flops_lines(result, ["posformer", *peers]))


def _flops_lines(result: dict[str, Any], keys: list[str]) -> list[str]:
    """The model TFLOP/s of each model per phase and, with a known peak, its MFU."""
    peak = result["peak_tflops"]
    names = {"posformer": "posformer", **PEERS}
    lines = [
        "",
        "model TFLOP/s (PaLM's count: 6N + 12·L·H·dh·T per trained token, a third of it forward)"
        + (f", MFU against the {peak:g} TFLOP/s dense bf16 peak" if peak else ""),
    ]
    for phase in ("forward", "train"):
        if phase in result:
            row = result[phase]
            lines.append(
                f"{phase:<8}"
                + "".join(
                    f"  {names[k]} {row[f'{k}_tflops']:.2f}" + (f" ({row[f'{k}_mfu']:.1%})" if peak else "")
                    for k in keys
                )
            )
    return lines
