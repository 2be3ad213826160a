"""The training benchmarks of `posformer bench`: `--trainer` (the Trainer against a plain loop), `--qa` (QA
fine-tuning against Hugging Face) and `--mlm` (masked-LM training against `BertForMaskedLM`)."""

from __future__ import annotations

from posformer.cli.benchmark import benchmark

TRAINER = benchmark(
    "trainer",
    "posformer.bench.trainer",
    "posformer.bench.benchmark_options.TrainerBenchOptions",
    help="training tokens/s of posformer's Trainer against a plain PyTorch loop",
    description="Measure training tokens/s of posformer's Trainer against a plain hand-written PyTorch loop "
    "(AdamW, LambdaLR, zero_grad/forward/backward/clip/step) on the same model (identical initial "
    "weights), the same batches and the same number of steps, in float32 on the CPU, in the same run.",
    epilog="The trainer runs with its progress bar disabled and its metrics.jsonl log enabled. Timed: "
    "`--steps` whole iterations of each loop, after `--warmup-steps` untimed ones; the set-up and the last "
    "step (the trainer's checkpoint write) are not timed. Repeats alternate trainer and plain (ABAB); the "
    "median tokens/s of each is reported, and ratio = trainer / plain: above 1 the trainer is faster. The code: "
    "posformer.bench.trainer.",
)


QA = benchmark(
    "qa",
    "posformer.bench.qa.benchmark",
    "posformer.bench.qa.options.QABenchOptions",
    help="SQuAD v2 fine-tuning of all-MiniLM-L6-v2 against BertForQuestionAnswering (--head seq2seq: "
    "BERT2BERT against EncoderDecoderModel)",
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
)


MLM = benchmark(
    "mlm",
    "posformer.bench.mlm",
    "posformer.bench.benchmark_options.MLMOptions",
    help="masked-LM training of posformer (the loss alone, and with logits) against BertForMaskedLM",
    description="Time masked-LM training steps of Hugging Face BertForMaskedLM (SDPA, dropout off) and of "
    "posformer loaded from its weights with from_hf, on the same batch and labels, in the same run. "
    "posformer runs as the Trainer calls it (return_logits=False: the head projects only the labelled "
    "rows and no (B, T, V) logits are held) and with its logits, as HF always computes them.",
    epilog="Timed: zero_grad, forward with labels, backward and an AdamW step; the runs alternate (ABC ABC ...) "
    "and the median step gives tokens/s = batch * length / seconds. The first losses are printed: the same "
    "function, they agree up to float reordering. The code: posformer.bench.mlm.",
)
