"""What both QA benchmarks share: two models trained in lockstep on the same batches, timed, then evaluated.

`compare(head, build, ...)` does the common part of `posformer.bench.qa.span` (span) and
`posformer.bench.qa.seq2seq` (generative): the article-disjoint questions, the steps from
`epochs`, the same pre-drawn batches for both sides, `train_both` alternating blocks of
steps, the tokens/s of each and their ratio, and one evaluator for both; `build` makes the
head's two models, training windows and predictor. `format_report` prints either result.
"""

from __future__ import annotations

import copy
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn

from posformer.bench.options import PRECISIONS
from posformer.bench.qa.options import QABenchOptions
from posformer.bench.qa.setup import draw_batches, load_questions, resolve_data, summary
from posformer.bench.runtime import Runtime
from posformer.bench.trainer import load_average
from posformer.model import Transformer
from posformer.modules.heads import loss_only
from posformer.tasks.qa.evaluation import QAEvaluator
from posformer.tasks.qa.predictor import QAPredictor
from posformer.train.optim import adamw, parameter_groups
from posformer.utils.progress import progress_bar

NAMES = ("posformer", "hf")
FP32 = "posformer_fp32"  # posformer in float32 beside a bf16 run: the speed-up of bf16 over float32, measured alike
LABELS = {"posformer": "posformer", "hf": "Hugging Face", FP32: "posformer, float32"}
METRICS = ("exact", "f1", "HasAns_f1", "NoAns_f1")
CLIP = 1.0
CPU_FP32 = Runtime(torch.device("cpu"))


def default_checkpoint() -> Path:
    from posformer.tasks.qa.models import default_pretrained_model

    return default_pretrained_model()


@dataclass
class Sides:
    """What a head's `build` returns: the two models, the training windows {name: (N, ...)}, the predictor of
    the held-out questions, and settings to record in the result."""

    ours: nn.Module
    theirs: nn.Module
    features: dict[str, Tensor]
    predictor: QAPredictor
    setup: dict[str, Any] = field(default_factory=dict)


class Run:
    """One model's training: its AdamW, linear schedule, step losses and timed steps."""

    def __init__(
        self,
        model: nn.Module,
        steps: int,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        weight_decay: float,
        warmup_steps: int = 0,
        runtime: Runtime = CPU_FP32,
    ) -> None:
        from transformers import get_linear_schedule_with_warmup

        self.model, self.runtime = model.train(), runtime
        self.arguments = loss_only(model.cfg.head_kind) if isinstance(model, Transformer) else {}  # as the Trainer
        self.optimizer = adamw(parameter_groups(model, weight_decay), lr=lr, betas=betas, eps=eps)
        self.scheduler = get_linear_schedule_with_warmup(self.optimizer, warmup_steps, steps)
        self.losses: list[float] = []
        self.seconds: list[float] = []

    def step(self, batch: dict[str, Tensor]) -> None:
        """One optimizer step on `batch` (input_ids, attention_mask, token_type_ids: (b, T); positions (b,))."""
        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        with self.runtime.autocast():
            loss = self.model(**batch, **self.arguments).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), CLIP)
        self.optimizer.step()
        self.scheduler.step()
        self.losses.append(loss.item())
        self.seconds.append(time.perf_counter() - start)


def train_both(
    models: dict[str, nn.Module],
    batches: list[dict[str, Tensor]],
    block: int,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    progress: bool = True,
    warmup_steps: int = 0,
    runtimes: dict[str, Runtime] | None = None,
) -> dict[str, Run]:
    """Train each model on `batches` (one per step), alternating blocks of `block` steps between them, each in its
    `runtimes` entry's precision (default: float32 on the CPU)."""
    runtimes = runtimes or {}
    runs = {
        name: Run(model, len(batches), lr, betas, eps, weight_decay, warmup_steps, runtimes.get(name, CPU_FP32))
        for name, model in models.items()
    }
    with progress_bar(total=len(batches) * len(runs), desc="training", unit="step", disable=not progress) as bar:
        for first in range(0, len(batches), block):
            for name, run in runs.items():
                bar.set_postfix_str(name)
                for batch in batches[first : first + block]:
                    run.step(batch)
                    bar.update()
    return runs


def block_ratio(runs: dict[str, Run], faster: str, slower: str, steps: int, block: int) -> float:
    """The median over the blocks of steps 1.. of `slower`'s seconds / `faster`'s (> 1: `faster` is faster)."""
    ratios = []
    for first in range(0, steps, block):
        part = slice(max(first, 1), first + block)
        ours, theirs = (sum(runs[name].seconds[part]) for name in (faster, slower))
        if ours > 0 and theirs > 0:
            ratios.append(theirs / ours)
    return statistics.median(ratios)


def training_speed(runs: dict[str, Run], tokens: list[int], block: int) -> dict[str, Any]:
    """tokens/s of each run over steps 1.. (step 0 is the warm-up), and the median per-block ratio; with a
    float32 reference run of posformer (`FP32`), posformer's speed-up over it too."""
    timed = sum(tokens[1:])
    result: dict[str, Any] = {
        name: {"tok_s": timed / sum(run.seconds[1:]), "timed_s": sum(run.seconds[1:])} for name, run in runs.items()
    }
    result["ratio"] = result["posformer"]["tok_s"] / result["hf"]["tok_s"]
    result["block_ratio"] = block_ratio(runs, "posformer", "hf", len(tokens), block)
    if FP32 in runs:
        result["precision_ratio"] = result["posformer"]["tok_s"] / result[FP32]["tok_s"]
        result["precision_block_ratio"] = block_ratio(runs, "posformer", FP32, len(tokens), block)
    result["timed_tokens"] = timed
    return result


def compare(
    head: str, build: Callable[..., Sides], options: QABenchOptions, log: Callable[[str], None]
) -> dict[str, Any]:
    """Train and evaluate both sides of `head`; the setup, per side its tokens/s, losses and SQuAD v2 scores,
    `ratio` (posformer / HF tokens/s), `block_ratio` and `max_loss_diff` (largest step-loss gap).

    build(train, held, tokenizer, directory, seed) -> `Sides`. `epochs`, when given, sets
    steps = ceil(windows * epochs / batch_size) instead of `steps`; question caps of 0 take every question
    of their side of the split."""
    options.check()
    path, note = resolve_data(options.data)
    if note:
        log(note)
    directory = Path(options.checkpoint) if options.checkpoint is not None else default_checkpoint()
    threads = torch.get_num_threads() if options.threads is None else options.threads
    previous = torch.get_num_threads()
    runtime = Runtime.of("cpu", options.precision)
    torch.set_num_threads(threads)
    try:
        from posformer.hf import load_tokenizer

        train, held = load_questions(path, options.train_questions, options.eval_questions, options.seed)
        sides = build(train, held, load_tokenizer(directory), directory, options.seed)
        windows = int(sides.features["input_ids"].shape[0])
        steps = (
            options.steps
            if options.epochs is None
            else max(2, math.ceil(windows * options.epochs / options.batch_size))
        )
        warmup_steps = math.ceil(steps * options.warmup_ratio)
        batches = draw_batches(sides.features, steps, options.batch_size, options.seed)
        tokens = [int(b["attention_mask"].sum()) for b in batches]
        load_start = load_average()
        log(f"training both models for {steps} steps of {options.batch_size} of {windows} windows ...")
        models = {"posformer": sides.ours, "hf": sides.theirs}
        runtimes = {"posformer": runtime, "hf": runtime}
        if runtime.precision != "fp32":
            models[FP32] = copy.deepcopy(sides.ours)
        runs = train_both(models, batches, options.block, options.lr, warmup_steps=warmup_steps, runtimes=runtimes)
        speed = training_speed(runs, tokens, options.block)
        setup = {
            "head": head,
            "torch": torch.__version__,
            "threads": threads,
            "dtype": PRECISIONS[runtime.precision],
            "precision": runtime.precision,
            "data": str(path),
            "data_note": note,
            "checkpoint": str(directory),
            "steps": steps,
            "warmup_steps": warmup_steps,
            "epochs": steps * options.batch_size / windows,
            "train": summary(train),
            "eval": summary(held),
            "train_windows": windows,
        }
        result = {**_setup(setup, options), **sides.setup, **_speed_fields(runs, speed)}
        evaluate = QAEvaluator(sides.predictor, runtime.precision)
        for name, model in (("posformer", sides.ours), ("hf", sides.theirs)):
            log(f"evaluating {LABELS[name]} on {len(held)} questions ...")
            result[name] = _evaluated(name, model, evaluate, sides, runs, speed)
        result["load_average"] = [load_start, load_average()]
        return result
    finally:
        torch.set_num_threads(previous)


def _setup(measured: dict[str, Any], options: QABenchOptions) -> dict[str, Any]:
    """The run's setup as the report records it: what was measured or resolved, then the fixed settings."""
    steps, warmup_steps = measured["steps"], measured["warmup_steps"]
    return {
        **{key: measured[key] for key in ("head", "torch", "threads", "dtype", "precision")},
        "device": "cpu",
        **{key: measured[key] for key in ("data", "data_note", "checkpoint")},
        "seed": options.seed,
        "steps": steps,
        "batch_size": options.batch_size,
        "lr": options.lr,
        "betas": [0.9, 0.999],
        "eps": 1e-8,
        "weight_decay": 0.0,
        "clip_grad": CLIP,
        "warmup_steps": warmup_steps,
        "epochs": measured["epochs"],
        "schedule": f"linear warm-up over {warmup_steps} steps, then linear to 0",
        "dropout": 0.0,
        "block": options.block,
        "max_seq_length": options.max_seq_length,
        "doc_stride": options.doc_stride,
        **{key: measured[key] for key in ("train", "eval", "train_windows")},
    }


def _speed_fields(runs: dict[str, Any], speed: dict[str, Any]) -> dict[str, Any]:
    """The report's speed and loss-gap fields: posformer against HF, and against its float32 self when run."""
    fields: dict[str, Any] = {
        "tokens": "encoder non-pad tokens (attention_mask ones) of steps 2..steps; batches cut to their longest row",
        "timed_tokens": speed["timed_tokens"],
        "ratio": speed["ratio"],
        "block_ratio": speed["block_ratio"],
        "max_loss_diff": max(abs(a - b) for a, b in zip(runs["posformer"].losses, runs["hf"].losses)),
    }
    if FP32 in runs:
        reference = runs[FP32]
        fields[FP32] = {**speed[FP32], "losses": reference.losses, "final_loss": reference.losses[-1]}
        fields["precision_ratio"] = speed["precision_ratio"]
        fields["precision_block_ratio"] = speed["precision_block_ratio"]
        fields["max_loss_diff_fp32"] = max(abs(a - b) for a, b in zip(runs["posformer"].losses, reference.losses))
    return fields


def _evaluated(
    name: str,
    model: Any,
    evaluate: QAEvaluator,
    sides: Sides,
    runs: dict[str, Any],
    speed: dict[str, Any],
) -> dict[str, Any]:
    """One side's record: its speed, its losses, and its SQuAD v2 scores on the held-out questions."""
    start = time.perf_counter()
    report = evaluate(model)
    return {
        **speed[name],
        "eval_s": time.perf_counter() - start,
        "first_loss": runs[name].losses[0],
        "final_loss": runs[name].losses[-1],
        "losses": runs[name].losses,
        "metrics": {k: report.get(k) for k in METRICS},
        "logits_dtype": sides.predictor.logits_dtype,
        "report": report,
    }


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _gap(result: dict[str, Any], metric: str) -> str:
    ours, theirs = (result[name]["metrics"][metric] for name in NAMES)
    return "n/a" if ours is None or theirs is None else f"{ours - theirs:+.2f}"


def format_report(result: dict[str, Any]) -> str:
    """The setup, a markdown table (tokens/s, losses, EM, F1, HasAns_f1, NoAns_f1 per model) and the ratio."""
    train, held = result["train"], result["eval"]
    lines = [
        f"torch {result['torch']}, threads {result['threads']}, {result['dtype']}, {result['device']}; "
        f"checkpoint {result['checkpoint']}",
        f"data: {result['data']}{' (' + result['data_note'] + ')' if result['data_note'] else ''}",
        f"head: {result['head']}; train: {train['questions']} questions ({train['unanswerable']} unanswerable), "
        f"{result['train_windows']} windows; eval: {held['questions']} questions ({held['unanswerable']} "
        f"unanswerable), other articles; windows {result['max_seq_length']} tokens, stride {result['doc_stride']}",
        f"both: {result['steps']} steps x batch {result['batch_size']} ({result['epochs']:.2f} epochs), fused AdamW lr "
        f"{result['lr']:g}, {result['schedule']}, "
        f"betas (0.9, 0.999), eps 1e-8, weight decay 0, clip 1.0, dropout 0, seed {result['seed']}; "
        f"alternating blocks of {result['block']} steps",
        f"tokens/s: {result['tokens']} ({result['timed_tokens']:,} tokens)",
        "",
        "| model | train tokens/s | timed train s | eval s | first loss | final loss | EM | F1 | HasAns F1 "
        "| NoAns F1 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in NAMES:
        row, m = result[name], result[name]["metrics"]
        lines.append(
            f"| {LABELS[name]} | {row['tok_s']:,.0f} | {row['timed_s']:,.0f} | {row['eval_s']:,.0f} | "
            f"{row['first_loss']:.6f} | {row['final_loss']:.6f} | {_cell(m['exact'])} | {_cell(m['f1'])} | "
            f"{_cell(m['HasAns_f1'])} | {_cell(m['NoAns_f1'])} |"
        )
    lines += [
        "",
        f"ratio posformer/HF tokens/s: {result['ratio']:.3f} (> 1: posformer is faster); median per-block ratio "
        f"{result['block_ratio']:.3f}",
        f"F1 posformer - HF: {_gap(result, 'f1')} points, HasAns F1: {_gap(result, 'HasAns_f1')}; evaluation "
        f"speed posformer/HF: {result['hf']['eval_s'] / result['posformer']['eval_s']:.3f}",
        "F1 at the official best null threshold (best_f1): "
        + ", ".join(f"{LABELS[name]} {_cell(result[name]['report'].get('best_f1'))}" for name in NAMES),
        f"largest step-loss difference between the two: {result['max_loss_diff']:.3g}",
    ]
    if FP32 in result:
        reference = result[FP32]
        lines.append(
            f"posformer in {result['dtype']} against posformer in float32 (trained alike, in the same blocks): "
            f"{reference['tok_s']:,.0f} tokens/s in float32, ratio {result['precision_ratio']:.3f} (median per-block "
            f"{result['precision_block_ratio']:.3f}); final loss {reference['final_loss']:.6f} in float32, largest "
            f"step-loss difference {result['max_loss_diff_fp32']:.3g}"
        )
    lines += [
        "load average (1, 5, 15 min) at start {} and end {}".format(
            *(", ".join(f"{x:.2f}" for x in loads) or "unknown" for loads in result["load_average"])
        ),
    ]
    return "\n".join(lines)
