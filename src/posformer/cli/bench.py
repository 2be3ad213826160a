"""`posformer bench`: the speed benchmarks, each declared once; `--generation`, `--trainer`, `--qa`,
`--positions` or `--mlm` picks one.

Every benchmark prints its report and, with `--json PATH`, writes its results there. A missing
optional package (ImportError) exits with 1 and its message; a bad option value (ValueError)
is reported as a usage error of the benchmark's own parser.
"""

from __future__ import annotations

import argparse
import sys

from posformer.cli.arg_types import non_negative_int, positive_int
from posformer.cli.bench_flags import (
    BENCH_PROG,
    HelpFormatter,
    add_llama_model_arguments,
    add_run_flags,
    report,
    threads_default,
)
from posformer.cli.bench_training import MLM, QA, TRAINER
from posformer.cli.command import Command, standalone_parser


def cmd_speed(args: argparse.Namespace) -> int:
    from posformer.bench import speed

    return report(
        args,
        speed.run(
            batch=args.batch,
            length=args.length,
            d_model=args.d_model,
            layers=args.layers,
            heads=args.heads,
            vocab=args.vocab,
            d_ff=args.d_ff,
            warmup=args.warmup,
            iters=args.iters,
            threads=args.threads,
            train=not args.skip_train,
            progress=not args.no_progress,
            compile=args.compile,
            device=args.device,
            precision=args.precision,
        ),
        speed.format_report,
    )


def add_speed_arguments(parser: argparse.ArgumentParser) -> None:
    add_llama_model_arguments(parser, batch=8, layers=8, layers_help="number of decoder layers", compared="both models")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="run posformer's model under torch.compile (HF's stays eager); the compilation "
        "time is reported apart, not timed",
    )


SPEED = Command(
    "speed",
    help="forward and training tokens/s against Hugging Face LlamaForCausalLM and x-transformers",
    formatter_class=HelpFormatter,
    description="Measure forward and training throughput (tokens/s) of posformer's Transformer built from the "
    "'llama' preset against Hugging Face LlamaForCausalLM (attn_implementation='sdpa') on the identical "
    "config and, when it is installed, x-transformers' decoder of the same shape, on the same device in the "
    "same precision (default float32 on the CPU), in the same run. On a GPU: --device cuda --precision bf16; "
    "the report gives each model's TFLOP/s and, on a known GPU, its MFU.",
    epilog="Forward: torch.no_grad() forward in eval mode producing logits. Train: forward with labels, "
    "loss.backward() and an AdamW step, in train mode. Each iteration runs posformer, HF, x-transformers in "
    "turn; the median time per iteration gives tokens/s = batch * length / time. 'vs HF' is posformer tok/s "
    "divided by HF tok/s: above 1 posformer is faster, below 1 HF is faster. Model FLOPs per token follow PaLM "
    "(6N + 12*L*H*dh*T per trained token, posformer.bench.flops). The code: posformer.bench.speed. "
    "The other benchmarks: posformer bench --generation, --trainer, --qa, --positions, --mlm (each with --help).",
    add_arguments=add_speed_arguments,
    run=cmd_speed,
)


def cmd_generation(args: argparse.Namespace) -> int:
    from posformer.bench import generation

    return report(
        args,
        generation.run(
            batches=tuple(args.batch),
            new_tokens=args.new_tokens,
            prompt_length=args.prompt_length,
            d_model=args.d_model,
            layers=args.layers,
            heads=args.heads,
            vocab=args.vocab,
            warmup=args.warmup,
            iters=args.iters,
            threads=args.threads,
            progress=not args.no_progress,
        ),
        generation.format_report,
    )


def add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--batch", type=positive_int, nargs="+", default=[1, 8], help="batch sizes to measure, each in turn")
    add("--new-tokens", type=positive_int, default=128, help="tokens generated per sequence (no eos stop)")
    add("--prompt-length", type=positive_int, default=16, help="random prompt tokens per sequence")
    add("--d-model", type=positive_int, default=768, help="hidden size (n_embd)")
    add("--layers", type=positive_int, default=12, help="number of layers (n_layer)")
    add("--heads", type=positive_int, default=12, help="attention heads (n_head)")
    add("--vocab", type=positive_int, default=50257, help="vocabulary size")
    add(
        "--warmup",
        type=non_negative_int,
        default=1,
        help="untimed generate calls per model before timing, per batch size",
    )
    add(
        "--iters",
        type=positive_int,
        default=3,
        help="timed generate calls per model, per batch size; the median is reported",
    )
    add_run_flags(parser, threads_default(), "both models")


GENERATION = Command(
    "generation",
    help="greedy generation tokens/s against GPT2LMHeadModel.generate",
    formatter_class=HelpFormatter,
    description="Measure greedy generation throughput (new tokens/s, KV cache) of posformer against Hugging "
    "Face GPT2LMHeadModel.generate (attn_implementation='sdpa') on identical random weights loaded with "
    "pf.from_hf, in float32 on the CPU, in the same run.",
    epilog="Each iteration runs posformer then HF (ABAB); the median time per generate call gives "
    "tokens/s = batch * new tokens / time. The ratio is posformer tok/s divided by HF tok/s: above 1 "
    "posformer is faster. 'same tokens' says whether both generated identical ids. The code: "
    "posformer.bench.generation.",
    add_arguments=add_generation_arguments,
    run=cmd_generation,
)


def cmd_positions(args: argparse.Namespace) -> int:
    from posformer.bench import positions

    return report(
        args,
        positions.run(
            encodings=args.encodings,
            arch=args.arch,
            batch=args.batch,
            length=args.length,
            d_model=args.d_model,
            layers=args.layers,
            heads=args.heads,
            vocab=args.vocab,
            d_ff=args.d_ff,
            warmup=args.warmup,
            iters=args.iters,
            threads=args.threads,
            train=not args.skip_train,
            progress=not args.no_progress,
            device=args.device,
            precision=args.precision,
            attn=args.attn,
        ),
        positions.format_report,
    )


def add_positions_arguments(parser: argparse.ArgumentParser) -> None:
    from posformer.bench.positions import ARCHS, ATTENTION
    from posformer.positions import registry

    add = parser.add_argument
    add(
        "--encodings",
        nargs="+",
        metavar="NAME",
        help="encodings to measure (none is always measured, as the "
        f"baseline); default: every registered one that --arch can use ({', '.join(registry.names())})",
    )
    add("--arch", choices=ARCHS, default="decoder", help="the stack(s) every model has")
    add(
        "--attn",
        choices=ATTENTION,
        default="sdpa",
        help="sdpa: SDPA wherever the encoding allows it, else "
        "eager; flex: FlexAttention (score_mod) for the encodings it takes, the rest as sdpa (training it "
        "needs CUDA)",
    )
    add_llama_model_arguments(parser, batch=4, layers=4, layers_help="layers per stack", compared="every model")


POSITIONS = Command(
    "positions",
    help="training and forward time of every position encoding relative to none",
    formatter_class=HelpFormatter,
    description="Measure the training-step and forward time of one model per registered position encoding, "
    "identical in everything else (the llama preset's parts at the given size, each encoding with its "
    "default parameters, same seed, same device and precision, SDPA wherever the encoding allows it or "
    "FlexAttention with --attn flex), relative to the model with position='none', in the same run.",
    epilog="Forward: torch.no_grad() forward in eval mode. Train: forward with labels, loss.backward() and an "
    "AdamW step. Every round runs each encoding's model once, in turn (interleaved), so that load on a "
    "shared machine hits all of them alike; x = median time / median time of none. The code: "
    "posformer.bench.positions.",
    add_arguments=add_positions_arguments,
    run=cmd_positions,
)


# no flag: SPEED
BENCHMARKS = {"--generation": GENERATION, "--trainer": TRAINER, "--qa": QA, "--positions": POSITIONS, "--mlm": MLM}


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the benchmark that `args.rest` picks, parsed by that benchmark's own parser."""
    chosen = [flag for flag in BENCHMARKS if flag in args.rest]
    if len(chosen) > 1:
        raise ValueError(f"give at most one of {' and '.join(BENCHMARKS)}")
    benchmark = BENCHMARKS[chosen[0]] if chosen else SPEED
    parser = standalone_parser(benchmark, prog=" ".join([BENCH_PROG, *chosen]))
    options = parser.parse_args([arg for arg in args.rest if arg not in chosen])
    try:
        return options.run(options)
    except ImportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except ValueError as err:
        parser.error(str(err))


COMMAND = Command(
    "bench",
    help="speed benchmark against Hugging Face (run `posformer bench --help`; "
    "`posformer bench --generation --help` for generation speed, "
    "`posformer bench --trainer --help` for the trainer's, "
    "`posformer bench --qa --help` for extractive QA training, "
    "`posformer bench --positions --help` for the cost of each position encoding, "
    "`posformer bench --mlm --help` for masked-LM training)",
    run=cmd_bench,
    passes_on=True,
)
