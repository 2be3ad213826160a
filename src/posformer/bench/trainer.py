"""Training speed of posformer's `Trainer` against the plain PyTorch loop a user writes by hand.

Both loops train fresh copies of one randomly initialised `llama`-preset model
(identical initial weights) on the same batches (the same `WindowBatches` over the
shipped Tiny Shakespeare sample, character ids), with the same optimizer (AdamW,
weight decay on the linear layers' weights only, gradient clipping), the
same warm-up + cosine learning-rate schedule and the same number of steps, in
float32 on the CPU with the same thread count. The plain loop is

    for step in range(steps):
        batch = batches.next_batch(batch_size)
        optimizer.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())

Each repeat runs the trainer, then the plain loop (ABAB). A run is `warmup_steps`
untimed steps, `steps` timed steps and one last untimed step; the timed window
runs from the moment step `warmup_steps + 1` draws its batch to the moment step
`warmup_steps + steps + 1` draws its batch, so it holds exactly `steps` whole
iterations of each loop: everything either loop does per step, and nothing it
does once (set-up, the evaluation and checkpoint of the trainer's last step, its
loss plot). tokens/s = timed tokens / timed seconds, median over the repeats;
ratio = trainer / plain. On a machine shared with other work the report adds
two estimates that bursts of outside load disturb less, the median of the
per-repeat ratios (each repeat runs the two loops back to back) and the ratio
of the median single-step times (all timed steps of all repeats), and the
load average. The trainer runs as a user gets it with its progress
bar off: it writes its metrics.jsonl line every step. Because both loops do the
same arithmetic, their losses must agree step by step: the report says by how much.

    posformer bench --trainer --help
"""

from __future__ import annotations

import copy
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn

import posformer as pf
from posformer.bench.benchmark_options import TrainerBenchOptions
from posformer.bench.speed import bench_config
from posformer.data.text import CharTokenizer, default_corpus, read_text
from posformer.train.batches import WindowBatches
from posformer.train.optim import adamw
from posformer.train.settings import TrainerSettings
from posformer.train.trainer import Trainer
from posformer.utils.options import check_options
from posformer.utils.progress import progress_bar

NAMES = ("trainer", "plain")

INCLUDED = (
    "timed, in both loops: drawing the batch, zero_grad, forward with the loss, backward, gradient "
    "clipping, the AdamW step, the lr-schedule step and reading the loss as a Python float; in the "
    "trainer also its per-step bookkeeping: the finite-loss checks, the metrics.jsonl line, the tqdm "
    "bookkeeping (bar disabled) and the eval/checkpoint/time-limit tests"
)
EXCLUDED = (
    "not timed: set-up (model copy, optimizer, output directory), the warm-up steps, and the last step, "
    "which holds the trainer's checkpoint write (no evaluation function is given), then its loss plot"
)


class StampedBatches:
    """A batch source that notes when each batch was drawn and how many tokens it held.

    It passes `state_dict` / `load_state_dict` through, so the `Trainer` takes it
    for the `WindowBatches` it wraps.
    """

    def __init__(self, batches: WindowBatches) -> None:
        self.batches = batches
        self.stamps: list[float] = []
        self.tokens: list[int] = []

    def next_batch(self, global_size: int, rank: int = 0, world_size: int = 1) -> dict[str, Tensor]:
        self.stamps.append(time.perf_counter())
        batch = self.batches.next_batch(global_size, rank, world_size)
        self.tokens.append(batch["input_ids"].numel())
        return batch

    def state_dict(self) -> dict:
        return self.batches.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.batches.load_state_dict(state)

    def window(self, first: int, count: int) -> tuple[list[float], int]:
        """(seconds of each step, tokens) of the `count` steps from 0-based step `first` (one batch per step)."""
        if len(self.stamps) < first + count + 1:
            raise RuntimeError(f"the loop drew {len(self.stamps)} batches, expected at least {first + count + 1}")
        stamps = self.stamps[first : first + count + 1]
        return [b - a for a, b in zip(stamps, stamps[1:])], sum(self.tokens[first : first + count])


def load_average() -> list[float]:
    """The system load averages over 1, 5 and 15 minutes; empty where the platform has none."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else []


def cosine_with_warmup(step: int, warmup: int, total: int, floor: float) -> float:
    """The lr multiplier a user writes for LambdaLR: linear warm-up, then cosine down to `floor` at `total`."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def plain_loop(model: nn.Module, batches: StampedBatches, settings: TrainerSettings) -> list[float]:
    """Train `model` the hand-written way with the optimizer and schedule `settings` describe; the step losses."""
    tables = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    matrices = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)} - tables
    decay = [p for p in model.parameters() if id(p) in matrices]
    no_decay = [p for p in model.parameters() if id(p) not in matrices]
    optimizer = adamw(
        [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=settings.lr,
        betas=tuple(settings.betas),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: cosine_with_warmup(step, settings.warmup, settings.steps, settings.min_lr_ratio)
    )
    model.train()
    losses = []
    for _ in range(settings.steps):
        batch = batches.next_batch(settings.batch_size)
        optimizer.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.clip_grad)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


def trainer_loop(model: pf.Transformer, batches: StampedBatches, settings: TrainerSettings) -> list[float]:
    """Train `model` with posformer's `Trainer` into a temporary output directory; the step losses."""
    with tempfile.TemporaryDirectory(prefix="posformer-bench-trainer-") as out:
        notes: list[str] = []
        result = Trainer(model, batches, settings, out, log=notes.append, progress=False).fit()
        logged = sum(1 for line in (Path(out) / "metrics.jsonl").read_text().splitlines() if '"loss"' in line)
    if result.step != settings.steps or logged != settings.steps:
        raise RuntimeError(
            f"the trainer stopped at step {result.step} with {logged} logged steps, expected {settings.steps}"
        )
    return result.losses


LOOPS: dict[str, Callable[[Any, StampedBatches, TrainerSettings], list[float]]] = {
    "trainer": trainer_loop,
    "plain": plain_loop,
}


def bench_settings(batch: int, total_steps: int, lr: float, lr_warmup: int, seed: int) -> TrainerSettings:
    """Trainer settings of the benchmark: float32 on the CPU, evaluation and checkpoint at the last step only."""
    settings = TrainerSettings(
        steps=total_steps,
        batch_size=batch,
        grad_accum=1,
        lr=lr,
        min_lr_ratio=0.1,
        schedule="cosine",
        warmup=lr_warmup,
        weight_decay=0.1,
        betas=(0.9, 0.95),
        clip_grad=1.0,
        precision="fp32",
        device="cpu",
        eval_every=total_steps,
        save_every=total_steps,
        keep_last=1,
        seed=seed,
    )
    settings.validate()
    return settings


def run(options: TrainerBenchOptions) -> dict[str, Any]:
    """Benchmark the trainer against the plain loop; return the setup, per loop its tokens/s per repeat,
    median `tok_s`, timed tokens and step losses, `ratio` = trainer / plain tok/s, `step_ratio` (the same from
    the median single-step times), `paired_ratio` (median of the per-repeat ratios), `max_loss_diff` (largest
    gap between the loops' step losses) and the load average at start and end."""
    check_options(options)
    threads = torch.get_num_threads() if options.threads is None else options.threads
    text = read_text(default_corpus())
    tokenizer = CharTokenizer.from_text(text)
    vocab = options.vocab or tokenizer.vocab_size
    if vocab < tokenizer.vocab_size:
        raise ValueError(f"vocab={vocab} is invalid: the text has {tokenizer.vocab_size} distinct characters")
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    total_steps = options.warmup_steps + options.steps + 1
    settings = bench_settings(options.batch, total_steps, options.lr, options.lr_warmup, options.seed)
    cfg = bench_config(options.d_model, options.layers, options.heads, vocab, options.d_ff, options.seq_len)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(options.seed)
        initial = pf.Transformer(cfg).float()
        load_start = load_average()
        runs = _timed_runs(initial, ids, settings, options)
        result: dict[str, Any] = {
            "torch": torch.__version__,
            "threads": threads,
            "dtype": "float32",
            "device": "cpu",
            "batch": options.batch,
            "seq_len": options.seq_len,
            "tokens_per_step": options.batch * options.seq_len,
            "steps": options.steps,
            "warmup_steps": options.warmup_steps,
            "total_steps": total_steps,
            "repeats": options.repeats,
            "lr": options.lr,
            "lr_warmup": options.lr_warmup,
            "seed": options.seed,
            "params": initial.num_parameters(),
            "text_vocab": tokenizer.vocab_size,
            "config": cfg.to_dict(),
            "included": INCLUDED,
            "excluded": EXCLUDED,
        }
        result.update({name: _loop_summary(runs[name], options) for name in NAMES})
        if len({r["timed_tokens"] for name in NAMES for r in runs[name]}) != 1:
            raise RuntimeError("the two loops timed different numbers of tokens: the comparison would not be fair")
        reference = runs["plain"][0]["losses"]
        result["max_loss_diff"] = max(
            abs(a - b) for name in NAMES for r in runs[name] for a, b in zip(r["losses"], reference, strict=True)
        )
        result["ratio"] = result["trainer"]["tok_s"] / result["plain"]["tok_s"]
        result["overhead_pct"] = 100.0 * (1.0 / result["ratio"] - 1.0)
        result["step_ratio"] = result["trainer"]["step_tok_s"] / result["plain"]["step_tok_s"]
        result["paired_ratio"] = statistics.median(
            ours["tok_s"] / theirs["tok_s"] for ours, theirs in zip(runs["trainer"], runs["plain"])
        )
        result["load_average"] = [load_start, load_average()]
        return result
    finally:
        torch.set_num_threads(previous_threads)


def _timed_runs(
    initial: pf.Transformer, ids: torch.Tensor, settings: TrainerSettings, options: TrainerBenchOptions
) -> dict[str, list[dict[str, Any]]]:
    """Each loop trained from a copy of `initial` on the windows of ids (N,), `options.repeats` times in turn:
    per repeat its tokens/s over the timed steps, the step times, the whole run's time and the step losses."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in NAMES}
    repeats = range(options.repeats)
    for _ in progress_bar(repeats, desc="trainer vs plain", unit="repeat", disable=not options.progress):
        for name in NAMES:
            batches = StampedBatches(WindowBatches(ids, options.seq_len, options.seed))
            start = time.perf_counter()
            losses = LOOPS[name](copy.deepcopy(initial), batches, settings)
            whole = time.perf_counter() - start
            step_s, tokens = batches.window(options.warmup_steps, options.steps)
            run = {"tok_s": tokens / sum(step_s), "step_s": step_s, "timed_tokens": tokens, "run_s": whole}
            runs[name].append({**run, "losses": losses})
    return runs


def _loop_summary(runs: list[dict[str, Any]], options: TrainerBenchOptions) -> dict[str, Any]:
    """One loop's record over its repeats: median tokens/s (whole timed window and single step), each run."""
    step_s = [s for r in runs for s in r["step_s"]]
    return {
        "tok_s": statistics.median(r["tok_s"] for r in runs),
        "step_tok_s": options.batch * options.seq_len / statistics.median(step_s),
        "tok_s_runs": [r["tok_s"] for r in runs],
        "step_s_runs": [r["step_s"] for r in runs],
        "run_s_runs": [r["run_s"] for r in runs],
        "timed_tokens": runs[0]["timed_tokens"],
        "final_loss": runs[-1]["losses"][-1],
        "losses": runs[-1]["losses"],
    }


def format_report(result: dict[str, Any]) -> str:
    """A readable report of `run`'s result: setup, what is timed, the table, the ratio and the loss agreement."""
    cfg = result["config"]
    lines = [
        f"torch {result['torch']}, threads {result['threads']}, {result['dtype']}, {result['device']}",
        f"model: llama preset, d_model={cfg['d_model']}, n_layers={cfg['n_layers']}, n_heads={cfg['n_heads']}, "
        f"d_ff={cfg['d_ff']}, vocab={cfg['vocab_size']}, {result['params']:,} parameters",
        f"data: Tiny Shakespeare sample, character ids ({result['text_vocab']} used), WindowBatches seed "
        f"{result['seed']}; batch {result['batch']} x seq_len {result['seq_len']} = {result['tokens_per_step']} "
        "tokens/step",
        f"optimizer (both): AdamW lr {result['lr']:g}, betas (0.9, 0.95), weight decay 0.1 on linear weights "
        f"only, clip 1.0, {result['lr_warmup']} warm-up steps then cosine to 0.1x",
        f"each run: {result['total_steps']} steps = {result['warmup_steps']} warm-up + {result['steps']} timed + 1 "
        f"last; {result['repeats']} repeats, trainer then plain (ABAB), median tokens/s",
        "trainer: Trainer.fit(), progress bar disabled, metrics.jsonl logging enabled",
        result["included"],
        result["excluded"],
        "",
        f"{'loop':<8} {'tokens/s':>10} {'timed tokens':>13} {'final loss':>11} {'median-step tok/s':>18}",
    ]
    for name in NAMES:
        row = result[name]
        lines.append(
            f"{name:<8} {row['tok_s']:>10,.0f} {row['timed_tokens']:>13,} {row['final_loss']:>11.6f} "
            f"{row['step_tok_s']:>18,.0f}"
        )
    lines += [
        f"ratio trainer/plain: {result['ratio']:.3f} (> 1 means the trainer is faster; trainer overhead "
        f"{result['overhead_pct']:+.1f}% time per step)",
        f"less disturbed by bursts of outside load: median of the per-repeat ratios {result['paired_ratio']:.3f}, "
        f"ratio of the median single-step times {result['step_ratio']:.3f}",
        "load average (1, 5, 15 min) at start {} and end {}".format(
            *(", ".join(f"{x:.2f}" for x in loads) or "unknown" for loads in result["load_average"])
        ),
        f"largest loss difference between the loops over all steps and repeats: {result['max_loss_diff']:.3g}",
    ]
    return "\n".join(lines)
