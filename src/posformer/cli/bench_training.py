"""The training benchmarks of `posformer bench`: `--trainer` (the Trainer against a plain loop), `--qa` (QA
fine-tuning against Hugging Face) and `--mlm` (masked-LM training against `BertForMaskedLM`)."""

from __future__ import annotations

import argparse

from posformer.cli.arg_types import fraction, non_negative_int, open_fraction, positive_float, positive_int
from posformer.cli.bench_flags import (
    HelpFormatter,
    add_run_flags,
    add_runtime_flags,
    report,
)
from posformer.cli.command import Command


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
