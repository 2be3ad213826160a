"""Generative QA (SQuAD v2) with posformer against Hugging Face's `EncoderDecoderModel`, in one run.

Both sides fine-tune the same BERT2BERT (Rothe et al. 2020) warm-started from all-MiniLM-L6-v2
(`qa_seq2seq_models.load_bert2bert_pair`: equal tensors, the fresh cross-attention included),
like for like, as `posformer.bench.qa` does for the span head:

- data: the article-disjoint split of the SQuAD v2 file, tokenized once into the seq2seq job's
  windows (`seq2seq_train_tensors`: "question: ... context: ..." windows, the answer text then
  [SEP] as the target, "" in the windows without it); optionally a seeded share of the ""
  windows (`keep_null_windows`); the same pre-drawn batches, each cut to its longest row;
- training: teacher forcing on the labels (decoder inputs = [CLS] + labels shifted right), the
  token cross-entropy, AdamW, clipping at 1.0, linear warm-up and decay, float32, dropout off,
  models alternating in blocks of `block` steps; tokens/s counts the encoder's real tokens;
- evaluation: posformer's `Seq2SeqPredictor` for both (greedy, "" scored in every window, the
  best answer across windows, threshold 0) and the official SQuAD v2 metric; HF's model
  generates with HF's `generate` (`HFGenerativeQA`).

    posformer bench --qa --head seq2seq --help
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable

import torch

from posformer.bench.qa import LABELS, METRICS, NAMES, default_checkpoint, train_both, training_speed
from posformer.bench.qa_seq2seq_models import load_bert2bert_pair
from posformer.bench.qa_setup import draw_batches, load_questions, resolve_data, summary
from posformer.bench.trainer import load_average
from posformer.tasks.null_answers import keep_null_windows, seq2seq_null_windows
from posformer.tasks.qa_evaluation import QAEvaluator
from posformer.tasks.seq2seq_qa import Seq2SeqPredictor, end_token_id, seq2seq_train_tensors
from posformer.validation import check_int, check_number, fail


def _check(steps: int, batch_size: int, lr: float, max_seq_length: int, doc_stride: int, block: int,
           train_questions: int, eval_questions: int, epochs: float | None, warmup_ratio: float,
           max_answer_tokens: int, keep_null: float) -> None:
    check_int("steps", steps, minimum=2)
    for name, value in (("batch_size", batch_size), ("block", block), ("max_seq_length", max_seq_length),
                        ("doc_stride", doc_stride), ("max_answer_tokens", max_answer_tokens)):
        check_int(name, value)
    for name, value in (("train_questions", train_questions), ("eval_questions", eval_questions)):
        check_int(name, value, minimum=0)
    check_number("lr", lr, low=0, low_open=True)
    check_number("warmup_ratio", warmup_ratio, low=0, high=1, high_open=True)
    check_number("keep_null_windows", keep_null, low=0, high=1, low_open=True)
    if epochs is not None:
        check_number("epochs", epochs, low=0, low_open=True, high=1000)
    if not doc_stride < max_seq_length:
        fail("doc_stride", doc_stride, f"an integer < max_seq_length ({max_seq_length})")


def run(data: str | Path | None = None, checkpoint: str | Path | None = None, steps: int = 60,
        batch_size: int = 16, lr: float = 1e-4, max_seq_length: int = 256, doc_stride: int = 64,
        train_questions: int = 2000, eval_questions: int = 300, block: int = 5, seed: int = 0,
        threads: int | None = 2, log: Callable[[str], None] = print, epochs: float | None = None,
        warmup_ratio: float = 0.0, max_answer_tokens: int = 30, keep_null: float = 1.0,
        eval_batch_size: int = 32) -> dict[str, Any]:
    """Train and evaluate both BERT2BERT models; the same result keys as `posformer.bench.qa.run`."""
    _check(steps, batch_size, lr, max_seq_length, doc_stride, block, train_questions, eval_questions, epochs,
           warmup_ratio, max_answer_tokens, keep_null)
    path, note = resolve_data(data)
    if note:
        log(note)
    directory = Path(checkpoint) if checkpoint is not None else default_checkpoint()
    threads = torch.get_num_threads() if threads is None else threads
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        from posformer.hf import load_tokenizer

        train, held = load_questions(path, train_questions, eval_questions, seed)
        tokenizer = load_tokenizer(directory)
        ours, theirs = load_bert2bert_pair(directory, tokenizer, seed)
        end = end_token_id(ours.cfg)
        features = seq2seq_train_tensors(train, tokenizer, max_seq_length, doc_stride, max_answer_tokens, end)
        all_windows = int(features["input_ids"].shape[0])
        features = keep_null_windows(features, seq2seq_null_windows(features, end), keep_null, seed)
        windows = int(features["input_ids"].shape[0])
        if epochs is not None:
            steps = max(2, math.ceil(windows * epochs / batch_size))
        warmup_steps = math.ceil(steps * warmup_ratio)
        batches = draw_batches(features, steps, batch_size, seed)
        tokens = [int(b["attention_mask"].sum()) for b in batches]
        load_start = load_average()
        log(f"training both models for {steps} steps of {batch_size} of {windows} windows ...")
        runs = train_both({"posformer": ours, "hf": theirs}, batches, block, lr, warmup_steps=warmup_steps)
        speed = training_speed(runs, tokens, block)
        evaluate = QAEvaluator(Seq2SeqPredictor(tokenizer, held, max_seq_length, doc_stride,
                                                batch_size=eval_batch_size, max_answer_tokens=max_answer_tokens))
        result: dict[str, Any] = {
            "head": "seq2seq", "torch": torch.__version__, "threads": threads, "dtype": "float32", "device": "cpu",
            "data": str(path), "data_note": note, "checkpoint": str(directory), "seed": seed, "steps": steps,
            "batch_size": batch_size, "lr": lr, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0,
            "clip_grad": 1.0, "warmup_steps": warmup_steps, "epochs": steps * batch_size / windows,
            "schedule": f"linear warm-up over {warmup_steps} steps, then linear to 0", "dropout": 0.0,
            "block": block, "max_seq_length": max_seq_length, "doc_stride": doc_stride,
            "max_answer_tokens": max_answer_tokens, "keep_null_windows": keep_null, "train": summary(train),
            "eval": summary(held), "train_windows": windows, "all_train_windows": all_windows,
            "tokens": "encoder non-pad tokens (attention_mask ones) of steps 2..steps; batches cut to their "
                      "longest row",
            "timed_tokens": speed["timed_tokens"], "ratio": speed["ratio"], "block_ratio": speed["block_ratio"],
            "max_loss_diff": max(abs(a - b) for a, b in zip(runs["posformer"].losses, runs["hf"].losses)),
        }
        for name, model in (("posformer", ours), ("hf", theirs)):
            log(f"evaluating {LABELS[name]} on {len(held)} questions ...")
            start = time.perf_counter()
            report = evaluate(model)
            result[name] = {**speed[name], "eval_s": time.perf_counter() - start,
                            "first_loss": runs[name].losses[0], "final_loss": runs[name].losses[-1],
                            "losses": runs[name].losses, "metrics": {k: report.get(k) for k in METRICS},
                            "report": report}
        result["load_average"] = [load_start, load_average()]
        return result
    finally:
        torch.set_num_threads(previous)
