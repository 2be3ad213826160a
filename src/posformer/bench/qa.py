"""Extractive QA (SQuAD v2) with posformer against Hugging Face, trained identically in the same run.

Both sides fine-tune all-MiniLM-L6-v2 with a span head: posformer's
`from_hf(dir, head="span_qa")` and transformers' `BertForQuestionAnswering.from_pretrained(dir)`,
from the same weights (the span head too: one seeded draw, N(0, initializer_range), copied
into both). Like for like:

- data: the questions of an article-disjoint split (`split_by_article`, 20% of the articles
  held out) of the SQuAD v2 file, tokenized ONCE with the checkpoint's tokenizer into
  run_qa.py windows (`span_train_tensors`); the same pre-drawn batches (`FeatureBatches`
  order, each cut to its longest row) go to both models, step by step;
- optimizer: fused AdamW (HF Trainer's default on torch >= 2.8; the same lr, betas, eps, weight
  decay on linear weights only),
  gradient clipping at 1.0, a linear warm-up over `warmup_ratio` of the steps and a linear
  decay to 0 (`get_linear_schedule_with_warmup`, as HF's Trainer), float32, the same seed;
- loss: the span loss over each window's real tokens (HF's model in `PaddingMaskedSpanLoss`:
  its own loss would also softmax over the padding);
- dropout: OFF in both. The checkpoint's config.json (hidden and attention dropout 0.1) is
  rewritten with 0 before either library loads it. With dropout on, the two libraries draw
  different masks, so their losses would drift apart from the first step and the
  comparison could not show that they compute the same thing; with it off they are the same
  function of the same weights and their first-step losses agree to float32 rounding.

Speed: training tokens/s, counting non-pad tokens (attention_mask ones) of the timed
steps. Timed per step: zero_grad, forward with the loss, backward, clipping, the AdamW
and schedule steps and reading the loss. The first step of each model is a warm-up and not
timed. The models alternate in blocks of `block` steps (posformer, then HF, ...), so
outside load on a shared machine falls on both; ratio = posformer / HF tokens/s (above 1:
posformer is faster), and the median of the per-block ratios is reported beside it.

Accuracy: both are evaluated the same way, posformer's span post-processing (n-best 20,
max answer 30 tokens, threshold 0) over all windows of a question, then the official
SQuAD v2 metric (`posformer.tasks.squad_metric`): EM, F1, HasAns_f1, NoAns_f1.

    posformer bench --qa --help
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from posformer.bench.qa_setup import (draw_batches, load_models, load_questions, resolve_data, summary)
from posformer.bench.trainer import load_average
from posformer.tasks.extractive_qa import SpanPredictor, span_train_tensors
from posformer.tasks.qa_evaluation import QAEvaluator
from posformer.train.optim import parameter_groups
from posformer.validation import check_int, check_number, fail

NAMES = ("posformer", "hf")
LABELS = {"posformer": "posformer", "hf": "Hugging Face"}
METRICS = ("exact", "f1", "HasAns_f1", "NoAns_f1")
CLIP = 1.0


def default_checkpoint() -> Path:
    from posformer.tasks.qa_models import default_pretrained_model

    return default_pretrained_model()


class Run:
    """One model's training: its AdamW, linear schedule, step losses and timed steps."""

    def __init__(self, model: nn.Module, steps: int, lr: float, betas: tuple[float, float], eps: float,
                 weight_decay: float, warmup_steps: int = 0) -> None:
        from transformers import get_linear_schedule_with_warmup

        self.model = model.train()
        self.optimizer = torch.optim.AdamW(parameter_groups(model, weight_decay), lr=lr, betas=betas, eps=eps,
                                           fused=True)
        self.scheduler = get_linear_schedule_with_warmup(self.optimizer, warmup_steps, steps)
        self.losses: list[float] = []
        self.seconds: list[float] = []

    def step(self, batch: dict[str, Tensor]) -> None:
        """One optimizer step on `batch` (input_ids, attention_mask, token_type_ids: (b, T); positions (b,))."""
        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIP)
        self.optimizer.step()
        self.scheduler.step()
        self.losses.append(loss.item())
        self.seconds.append(time.perf_counter() - start)


def train_both(models: dict[str, nn.Module], batches: list[dict[str, Tensor]], block: int, lr: float,
               betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
               weight_decay: float = 0.0, progress: bool = True, warmup_steps: int = 0) -> dict[str, Run]:
    """Train each model on `batches` (one per step), alternating blocks of `block` steps between them."""
    runs = {name: Run(model, len(batches), lr, betas, eps, weight_decay, warmup_steps)
            for name, model in models.items()}
    with tqdm(total=len(batches) * len(runs), desc="training", unit="step", disable=not progress) as bar:
        for first in range(0, len(batches), block):
            for name, run in runs.items():
                bar.set_postfix_str(name)
                for batch in batches[first : first + block]:
                    run.step(batch)
                    bar.update()
    return runs


def training_speed(runs: dict[str, Run], tokens: list[int], block: int) -> dict[str, Any]:
    """tokens/s of each run over steps 1.. (step 0 is the warm-up), and the median per-block ratio."""
    timed = sum(tokens[1:])
    result: dict[str, Any] = {name: {"tok_s": timed / sum(run.seconds[1:]), "timed_s": sum(run.seconds[1:])}
                              for name, run in runs.items()}
    ratios = []
    for first in range(0, len(tokens), block):
        part = slice(max(first, 1), first + block)
        ours, theirs = (sum(runs[name].seconds[part]) for name in NAMES)
        if ours > 0 and theirs > 0:
            ratios.append(theirs / ours)
    result["ratio"] = result["posformer"]["tok_s"] / result["hf"]["tok_s"]
    result["block_ratio"] = statistics.median(ratios)
    result["timed_tokens"] = timed
    return result


def _check(steps: int, batch_size: int, lr: float, max_seq_length: int, doc_stride: int, block: int,
           train_questions: int, eval_questions: int, epochs: float | None, warmup_ratio: float) -> None:
    check_int("steps", steps, minimum=2)
    for name, value in (("batch_size", batch_size), ("block", block), ("max_seq_length", max_seq_length),
                        ("doc_stride", doc_stride)):
        check_int(name, value)
    for name, value in (("train_questions", train_questions), ("eval_questions", eval_questions)):
        check_int(name, value, minimum=0)
    check_number("lr", lr, low=0, low_open=True)
    check_number("warmup_ratio", warmup_ratio, low=0, high=1, high_open=True)
    if epochs is not None:
        check_number("epochs", epochs, low=0, low_open=True, high=1000)
    if not doc_stride < max_seq_length:
        fail("doc_stride", doc_stride, f"an integer < max_seq_length ({max_seq_length})")


def run(data: str | Path | None = None, checkpoint: str | Path | None = None, steps: int = 60,
        batch_size: int = 16, lr: float = 1e-4, max_seq_length: int = 256, doc_stride: int = 64,
        train_questions: int = 2000, eval_questions: int = 300, block: int = 5, seed: int = 0,
        threads: int | None = 2, log: Callable[[str], None] = print, epochs: float | None = None,
        warmup_ratio: float = 0.0) -> dict[str, Any]:
    """Train and evaluate both models; return the setup, per model its tokens/s, losses and SQuAD v2 scores,
    `ratio` (posformer / HF tokens/s), `block_ratio` and `max_loss_diff` (largest step-loss gap).

    `epochs`, when given, sets steps = ceil(windows * epochs / batch_size) instead of `steps`; question caps
    of 0 take every question of their side of the split."""
    _check(steps, batch_size, lr, max_seq_length, doc_stride, block, train_questions, eval_questions, epochs,
           warmup_ratio)
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
        torch.manual_seed(seed)
        ours, theirs = load_models(directory, seed)
        features = span_train_tensors(train, tokenizer, max_seq_length, doc_stride, ours.cfg)
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
        evaluate = QAEvaluator(SpanPredictor(tokenizer, held, max_seq_length, doc_stride))
        result: dict[str, Any] = {
            "torch": torch.__version__, "threads": threads, "dtype": "float32", "device": "cpu",
            "data": str(path), "data_note": note, "checkpoint": str(directory), "seed": seed, "steps": steps,
            "batch_size": batch_size, "lr": lr, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0,
            "clip_grad": CLIP, "warmup_steps": warmup_steps, "epochs": steps * batch_size / windows,
            "schedule": f"linear warm-up over {warmup_steps} steps, then linear to 0", "dropout": 0.0, "block": block,
            "hf_attention": getattr(theirs.config, "_attn_implementation", None), "posformer_attention":
            ours.cfg.attn_impl, "max_seq_length": max_seq_length, "doc_stride": doc_stride, "train": summary(train),
            "eval": summary(held), "train_windows": windows,
            "tokens": "non-pad tokens (attention_mask ones) of steps 2..steps; batches cut to their longest row",
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


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def format_report(result: dict[str, Any]) -> str:
    """The setup, a markdown table (tokens/s, losses, EM, F1, HasAns_f1, NoAns_f1 per model) and the ratio."""
    train, held = result["train"], result["eval"]
    lines = [
        f"torch {result['torch']}, threads {result['threads']}, {result['dtype']}, {result['device']}; "
        f"checkpoint {result['checkpoint']}",
        f"data: {result['data']}{' (' + result['data_note'] + ')' if result['data_note'] else ''}",
        f"head: {result.get('head', 'span')}; train: {train['questions']} questions ({train['unanswerable']} unanswerable), "
        f"{result['train_windows']} windows; eval: {held['questions']} questions ({held['unanswerable']} "
        f"unanswerable), other articles; windows {result['max_seq_length']} tokens, stride {result['doc_stride']}",
        f"both: {result['steps']} steps x batch {result['batch_size']} ({result['epochs']:.2f} epochs), AdamW lr "
        f"{result['lr']:g}, {result['schedule']}, "
        f"betas (0.9, 0.999), eps 1e-8, weight decay 0, clip 1.0, dropout 0, seed {result['seed']}; "
        f"alternating blocks of {result['block']} steps",
        f"tokens/s: {result['tokens']} ({result['timed_tokens']:,} tokens)",
        "",
        "| model | train tokens/s | first loss | final loss | EM | F1 | HasAns F1 | NoAns F1 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in NAMES:
        row, m = result[name], result[name]["metrics"]
        lines.append(f"| {LABELS[name]} | {row['tok_s']:,.0f} | {row['first_loss']:.6f} | {row['final_loss']:.6f} | "
                     f"{_cell(m['exact'])} | {_cell(m['f1'])} | {_cell(m['HasAns_f1'])} | {_cell(m['NoAns_f1'])} |")
    lines += [
        "",
        f"ratio posformer/HF tokens/s: {result['ratio']:.3f} (> 1: posformer is faster); median per-block ratio "
        f"{result['block_ratio']:.3f}",
        f"largest step-loss difference between the two: {result['max_loss_diff']:.3g}",
        "load average (1, 5, 15 min) at start {} and end {}".format(
            *(", ".join(f"{x:.2f}" for x in loads) or "unknown" for loads in result["load_average"])),
    ]
    return "\n".join(lines)
