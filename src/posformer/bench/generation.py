"""Greedy generation speed of posformer against Hugging Face `GPT2LMHeadModel.generate`, identical weights.

A random GPT-2 (by default GPT-2 small's shape: d_model 768, 12 layers, 12
heads, vocab 50257) is built by `transformers`, saved, and loaded into posformer
with `pf.from_hf`, so both models hold the same weights. Both decode greedily
with their KV cache, from the same random prompts, exactly `new_tokens` tokens
(no eos stop), with the same thread count. Iterations alternate between the
models (ABAB); the median time of the timed iterations gives
tokens/s = batch * new_tokens / time (the prompt pass included). The report
also says whether the two produced the same tokens.

    posformer bench --generation --help
"""

from __future__ import annotations

import statistics
import tempfile
from typing import Any, Callable

import torch

import posformer as pf
from posformer.bench.benchmark_options import GenerationOptions
from posformer.bench.speed import _transformers, measure_interleaved, torch_threads
from posformer.utils.options import check_options

NAMES = ("posformer", "hf")


def hf_gpt2(
    d_model: int = 768, layers: int = 12, heads: int = 12, vocab: int = 50257, positions: int = 1024, seed: int = 0
) -> Any:
    """A random Hugging Face `GPT2LMHeadModel` (SDPA attention, no dropout) in eval mode."""
    transformers = _transformers()
    config = transformers.GPT2Config(
        vocab_size=vocab,
        n_embd=d_model,
        n_layer=layers,
        n_head=heads,
        n_positions=positions,
        bos_token_id=vocab - 1,
        eos_token_id=vocab - 1,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        attn_implementation="sdpa",
    )
    torch.manual_seed(seed)
    return transformers.GPT2LMHeadModel(config).eval()


def _steps(
    models: dict[str, Any], ids: torch.Tensor, new_tokens: int, outputs: dict[str, torch.Tensor]
) -> dict[str, Callable[[], None]]:
    """One greedy generation of `new_tokens` per model; the last output of each lands in `outputs`."""

    def ours() -> None:
        outputs["posformer"] = models["posformer"].generate(ids, max_new_tokens=new_tokens, eos_token_id=[])

    def theirs() -> None:
        with torch.no_grad():
            outputs["hf"] = models["hf"].generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new_tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )

    return {"posformer": ours, "hf": theirs}


def run(options: GenerationOptions) -> dict[str, Any]:
    """Benchmark greedy generation per batch size; per batch: `posformer_tok_s`, `hf_tok_s`,
    `ratio` = posformer / HF, the timed seconds of each model and `same_tokens`."""
    check_options(options)
    if not options.batches:
        raise ValueError("batches=[] is invalid: expected one or more batch sizes")
    if options.prompt_length + options.new_tokens > 1024:
        raise ValueError(
            f"prompt_length + new_tokens = {options.prompt_length + options.new_tokens} exceeds GPT-2's 1024 positions"
        )
    transformers = _transformers()
    with torch_threads(options.threads) as threads:
        hf = hf_gpt2(options.d_model, options.layers, options.heads, options.vocab, seed=options.seed)
        with tempfile.TemporaryDirectory(prefix="posformer-bench-") as directory:
            hf.save_pretrained(directory, safe_serialization=True)
            models = {"posformer": pf.from_hf(directory).eval(), "hf": hf}
        result: dict[str, Any] = {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "threads": threads,
            "dtype": "float32",
            "new_tokens": options.new_tokens,
            "prompt_length": options.prompt_length,
            "warmup": options.warmup,
            "iters": options.iters,
            "params": models["posformer"].num_parameters(),
            "shape": {
                "d_model": options.d_model,
                "layers": options.layers,
                "heads": options.heads,
                "vocab": options.vocab,
            },
            "attn": {"posformer": models["posformer"].cfg.attn_impl, "hf": hf.config._attn_implementation},
            "batches": {},
        }
        generator = torch.Generator().manual_seed(options.seed)
        for batch in options.batches:
            ids = torch.randint(0, options.vocab, (batch, options.prompt_length), generator=generator)
            outputs: dict[str, torch.Tensor] = {}
            steps = _steps(models, ids, options.new_tokens, outputs)
            times = measure_interleaved(steps, options.warmup, options.iters, f"batch {batch}", options.progress)
            ours, theirs = (batch * options.new_tokens / statistics.median(times[name]) for name in NAMES)
            result["batches"][batch] = {
                "posformer_tok_s": ours,
                "hf_tok_s": theirs,
                "ratio": ours / theirs,
                "posformer_s": times["posformer"],
                "hf_s": times["hf"],
                "same_tokens": torch.equal(outputs["posformer"], outputs["hf"]),
            }
        return result


def format_report(result: dict[str, Any]) -> str:
    """A readable report of `run`'s result: versions, model shape and one row per batch size."""
    shape = result["shape"]
    lines = [
        f"torch {result['torch']}, transformers {result['transformers']}, threads {result['threads']}",
        f"model: random GPT-2, d_model={shape['d_model']}, layers={shape['layers']}, heads={shape['heads']}, "
        f"vocab={shape['vocab']}, {result['params']:,} parameters, {result['dtype']}, attention "
        f"posformer={result['attn']['posformer']} HF={result['attn']['hf']}",
        f"greedy, KV cache, prompt {result['prompt_length']} tokens, {result['new_tokens']} new tokens per sequence; "
        f"warmup {result['warmup']}, median of {result['iters']} timed iterations (ABAB)",
        "",
        f"{'batch':>5} {'posformer tok/s':>16} {'HF tok/s':>10} {'ratio':>7} {'same tokens':>12}",
    ]
    for batch, row in result["batches"].items():
        lines.append(
            f"{batch:>5} {row['posformer_tok_s']:>16,.1f} {row['hf_tok_s']:>10,.1f} {row['ratio']:>7.3f} "
            f"{'yes' if row['same_tokens'] else 'NO':>12}"
        )
    lines.append(
        "tok/s = batch * new tokens / median seconds per generate call; ratio = posformer / HF, "
        "> 1 means posformer is faster"
    )
    return "\n".join(lines)
