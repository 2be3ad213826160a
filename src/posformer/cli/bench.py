"""`posformer bench`: the speed benchmarks, each declared once; `--generation`, `--trainer`, `--qa`,
`--positions` or `--mlm` picks one.

Every benchmark prints its report and, with `--json PATH`, writes its results there. A missing
optional package (ImportError) exits with 1 and its message; a bad option value (ValueError)
is reported as a usage error of the benchmark's own parser.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

from posformer.checkpoints.atomic import write_json_atomic
from posformer.cli.arg_types import fraction, non_negative_int, open_fraction, positive_float, positive_int
from posformer.cli.command import Command, standalone_parser

BENCH_PROG = "posformer bench"


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each option; the description and epilog kept as written."""


def report(args: argparse.Namespace, result: dict[str, Any], format_report: Callable[[dict[str, Any]], str]) -> int:
    """Print the benchmark's report and write `--json`; returns the exit status."""
    print(format_report(result))
    if args.json:
        write_json_atomic(args.json, result)
        print(f"results written to {args.json}")
    return 0


def _threads_default() -> int:
    import torch

    return torch.get_num_threads()


def add_run_flags(
    parser: argparse.ArgumentParser, threads: int, compared: str, bars: str = "the progress bars"
) -> None:
    """--threads, --json and --no-progress: the flags every benchmark shares."""
    add = parser.add_argument
    add("--threads", type=positive_int, default=threads, help=f"torch.set_num_threads for {compared}")
    add("--json", metavar="PATH", help="also write the results as JSON to PATH (written atomically)")
    add("--no-progress", action="store_true", help=f"hide {bars}")


def add_runtime_flags(parser: argparse.ArgumentParser) -> None:
    """--device and --precision: where the models run and in what."""
    add = parser.add_argument
    add(
        "--device",
        default="cpu",
        help="where every model runs: cpu, cuda or cuda:N (timed after torch.cuda.synchronize)",
    )
    add(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="fp32, or bf16 autocast over float32 weights (as trainer.precision=bf16)",
    )


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


def add_llama_model_arguments(
    parser: argparse.ArgumentParser, batch: int, layers: int, layers_help: str, compared: str
) -> None:
    """The sizes of a llama-preset benchmark model, its timed iterations and the shared run flags."""
    add = parser.add_argument
    add("--batch", type=positive_int, default=batch, help="sequences per iteration")
    add("--length", type=positive_int, default=512, help="tokens per sequence")
    add("--d-model", type=positive_int, default=512, help="hidden size (d_model / hidden_size)")
    add("--layers", type=positive_int, default=layers, help=layers_help)
    add("--heads", type=positive_int, default=8, help="attention heads (key/value heads are the same number)")
    add("--vocab", type=positive_int, default=8192, help="vocabulary size")
    add("--d-ff", type=positive_int, default=1376, help="SwiGLU inner size (d_ff / intermediate_size)")
    add("--warmup", type=non_negative_int, default=1, help="untimed iterations per model before timing, per phase")
    add("--iters", type=positive_int, default=3, help="timed iterations per model, per phase; the median is reported")
    add("--skip-train", action="store_true", help="measure the forward pass only")
    add_runtime_flags(parser)
    add_run_flags(parser, _threads_default(), compared)


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
    add_run_flags(parser, _threads_default(), "both models")


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


def cmd_trainer(args: argparse.Namespace) -> int:
    from posformer.bench import trainer

    return report(
        args,
        trainer.run(
            batch=args.batch,
            seq_len=args.seq_len,
            d_model=args.d_model,
            layers=args.layers,
            heads=args.heads,
            d_ff=args.d_ff,
            vocab=args.vocab,
            steps=args.steps,
            warmup_steps=args.warmup_steps,
            repeats=args.repeats,
            threads=args.threads,
            lr=args.lr,
            lr_warmup=args.lr_warmup,
            seed=args.seed,
            progress=not args.no_progress,
        ),
        trainer.format_report,
    )


def add_trainer_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--batch", type=positive_int, default=8, help="sequences per step")
    add("--seq-len", type=positive_int, default=256, help="tokens per sequence")
    add("--d-model", type=positive_int, default=256, help="hidden size")
    add("--layers", type=positive_int, default=4, help="number of decoder layers")
    add("--heads", type=positive_int, default=4, help="attention heads")
    add("--d-ff", type=positive_int, default=688, help="SwiGLU inner size")
    add("--vocab", type=non_negative_int, default=8192, help="vocabulary size; 0: the text's character vocabulary")
    add("--steps", type=positive_int, default=10, help="timed steps per run")
    add("--warmup-steps", type=non_negative_int, default=2, help="untimed steps per run before timing")
    add("--repeats", type=positive_int, default=5, help="runs per loop, alternating; the median is reported")
    add("--lr", type=positive_float, default=3e-3, help="peak learning rate")
    add("--lr-warmup", type=non_negative_int, default=5, help="linear lr warm-up steps before the cosine decay")
    add("--seed", type=non_negative_int, default=0, help="seed of the initial weights and of the batch order")
    add_run_flags(parser, 2, "both loops", "the progress bar over the repeats")


TRAINER = Command(
    "trainer",
    help="training tokens/s of posformer's Trainer against a plain PyTorch loop",
    formatter_class=HelpFormatter,
    description="Measure training tokens/s of posformer's Trainer against a plain hand-written PyTorch loop "
    "(AdamW, LambdaLR, zero_grad/forward/backward/clip/step) on the same model (identical initial "
    "weights), the same batches and the same number of steps, in float32 on the CPU, in the same run.",
    epilog="The trainer runs with its progress bar disabled and its metrics.jsonl log enabled. Timed: "
    "`--steps` whole iterations of each loop, after `--warmup-steps` untimed ones; the set-up and the last "
    "step (the trainer's checkpoint write) are not timed. Repeats alternate trainer and plain (ABAB); the "
    "median tokens/s of each is reported, and ratio = trainer / plain: above 1 the trainer is faster. The code: "
    "posformer.bench.trainer.",
    add_arguments=add_trainer_arguments,
    run=cmd_trainer,
)


def cmd_qa(args: argparse.Namespace) -> int:
    from posformer.bench.qa import seq2seq, span
    from posformer.bench.qa.compare import format_report

    options = dict(
        data=args.data,
        checkpoint=args.checkpoint,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        max_seq_length=args.max_seq_length,
        doc_stride=args.doc_stride,
        train_questions=args.train_questions,
        eval_questions=args.eval_questions,
        block=args.block,
        seed=args.seed,
        threads=args.threads,
        epochs=args.epochs,
        warmup_ratio=args.warmup_ratio,
    )
    if args.head == "seq2seq":
        return report(
            args,
            seq2seq.run(**options, max_answer_tokens=args.max_answer_tokens, keep_null=args.keep_null_windows),
            format_report,
        )
    return report(args, span.run(**options), format_report)


def add_qa_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--data",
        metavar="FILE",
        help="SQuAD v2 JSON file; None: the reconstructed dev set, or the shipped sample when it is missing",
    )
    add("--checkpoint", metavar="DIR", help="BERT-family checkpoint; None: the bundled all-MiniLM-L6-v2")
    add(
        "--head",
        choices=("span", "seq2seq"),
        default="span",
        help="span: posformer's span head against "
        "BertForQuestionAnswering; seq2seq: BERT2BERT warm-started from the checkpoint against HF's "
        "EncoderDecoderModel (posformer.bench.qa.seq2seq)",
    )
    add("--max-answer-tokens", type=positive_int, default=30, help="seq2seq: answer tokens generated at most")
    add(
        "--keep-null-windows",
        type=open_fraction,
        default=1.0,
        help='seq2seq: share of the training windows whose target is "" that are kept (1: all, as the seed job)',
    )
    add(
        "--train-questions",
        type=non_negative_int,
        default=2000,
        help="cap on the training questions (seeded sample; 0: all)",
    )
    add(
        "--eval-questions",
        type=non_negative_int,
        default=300,
        help="cap on the evaluation questions (seeded sample; 0: all)",
    )
    add("--steps", type=positive_int, default=60, help="optimizer steps of each model (the first is not timed)")
    add("--epochs", type=positive_float, help="train this many passes over the windows instead of --steps")
    add("--warmup-ratio", type=fraction, default=0.0, help="share of the steps for a linear lr warm-up")
    add("--batch-size", type=positive_int, default=16, help="windows per step")
    add("--lr", type=positive_float, default=1e-4, help="peak learning rate, decayed linearly to 0")
    add("--max-seq-length", type=positive_int, default=256, help="tokens per window (question + context part)")
    add("--doc-stride", type=positive_int, default=64, help="overlap of consecutive windows of a long context")
    add("--block", type=positive_int, default=5, help="steps each model runs before the other takes over")
    add("--threads", type=positive_int, default=2, help="torch.set_num_threads for both")
    add(
        "--seed",
        type=non_negative_int,
        default=0,
        help="seed of the head init, the question sample and the batch order",
    )
    add("--output", "--json", dest="json", metavar="PATH", help="also write the results as JSON (atomically)")


QA = Command(
    "qa",
    help="SQuAD v2 fine-tuning of all-MiniLM-L6-v2 against BertForQuestionAnswering (--head seq2seq: "
    "BERT2BERT against EncoderDecoderModel)",
    formatter_class=HelpFormatter,
    description="Fine-tune all-MiniLM-L6-v2 for extractive SQuAD v2 QA twice in one run, with posformer "
    "(from_hf(dir, head='span_qa')) and with Hugging Face (BertForQuestionAnswering), from the same weights "
    "(the span head too), on the same tokenized windows in the same batch order, with the same AdamW, "
    "linear schedule, clipping, seed and number of steps, float32, dropout off in both, and one span loss "
    "over each window's real tokens (so both compute the same function and their losses agree step by "
    "step). Reports training tokens/s of each and the "
    "ratio posformer/HF, the final losses, and EM, F1, HasAns_f1 and NoAns_f1 of each on held-out articles "
    "(the same post-processing and the official SQuAD v2 metric). --head seq2seq does the same for "
    "generative QA: a BERT2BERT warm-started from the checkpoint (HF's EncoderDecoderModel."
    "from_encoder_decoder_pretrained, loaded into posformer with from_hf: the same tensors), "
    "teacher-forced on the seq2seq job's windows, evaluated by greedy generation (HF's generate for HF).",
    epilog="Timed: each training step (zero_grad, forward, backward, clip, AdamW, schedule, reading the loss) "
    "after the first; tokens are non-pad tokens. The models alternate in blocks of --block steps. Data: "
    "--data, default the SQuAD v2 dev file in ../shared/data/squad_v2 (or $POSFORMER_DATA_DIR), or the shipped "
    "sample when it is missing; split by article (20% held out), then capped by --train-questions / "
    "--eval-questions. The code: posformer.bench.qa.span (span), posformer.bench.qa.seq2seq (seq2seq), both "
    "through posformer.bench.qa.compare.",
    add_arguments=add_qa_arguments,
    run=cmd_qa,
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


def cmd_mlm(args: argparse.Namespace) -> int:
    from posformer.bench import mlm

    return report(
        args,
        mlm.run(
            batch=args.batch,
            length=args.length,
            d_model=args.d_model,
            layers=args.layers,
            heads=args.heads,
            d_ff=args.d_ff,
            vocab=args.vocab,
            mask_rate=args.mask_rate,
            warmup=args.warmup,
            iters=args.iters,
            threads=args.threads,
            seed=args.seed,
            progress=not args.no_progress,
            device=args.device,
            precision=args.precision,
        ),
        mlm.format_report,
    )


def add_mlm_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--batch", type=positive_int, default=16, help="sequences per step")
    add("--length", type=positive_int, default=256, help="tokens per sequence")
    add("--d-model", type=positive_int, default=384, help="hidden size (all-MiniLM-L6-v2's)")
    add("--layers", type=positive_int, default=6, help="encoder layers")
    add("--heads", type=positive_int, default=12, help="attention heads")
    add("--d-ff", type=positive_int, default=1536, help="feed-forward inner size")
    add("--vocab", type=positive_int, default=30522, help="vocabulary size (BERT's uncased)")
    add(
        "--mask-rate",
        type=open_fraction,
        default=0.15,
        help="share of positions that keep a label (BERT's 15%%); the others are -100",
    )
    add("--warmup", type=non_negative_int, default=1, help="untimed rounds before timing")
    add("--iters", type=positive_int, default=5, help="timed rounds (each runs every model once)")
    add("--seed", type=non_negative_int, default=0, help="seed of the weights, the tokens and the labels")
    add_runtime_flags(parser)
    add_run_flags(parser, 2, "every model")


MLM = Command(
    "mlm",
    help="masked-LM training of posformer (the loss alone, and with logits) against BertForMaskedLM",
    formatter_class=HelpFormatter,
    description="Time masked-LM training steps of Hugging Face BertForMaskedLM (SDPA, dropout off) and of "
    "posformer loaded from its weights with from_hf, on the same batch and labels, in the same run. "
    "posformer runs as the Trainer calls it (return_logits=False: the head projects only the labelled "
    "rows and no (B, T, V) logits are held) and with its logits, as HF always computes them.",
    epilog="Timed: zero_grad, forward with labels, backward and an AdamW step; the runs alternate (ABC ABC ...) "
    "and the median step gives tokens/s = batch * length / seconds. The first losses are printed: the same "
    "function, they agree up to float reordering. The code: posformer.bench.mlm.",
    add_arguments=add_mlm_arguments,
    run=cmd_mlm,
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
