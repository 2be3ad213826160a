"""`posformer extend`: extend a trained RoPE model's context (PI, NTK, YaRN, dynamic YaRN, LongRoPE, the
training-free ReRoPE, Self-Extend, dual chunk attention and StreamingLLM, and DroPE) and measure it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from posformer.cli.command import Command
from posformer.cli.experiment_options import ExperimentRunOptions, add_experiment_arguments, run_seeds
from posformer.experiments.extension.settings import PRESETS
from posformer.utils.options import option


@dataclass(kw_only=True)
class ExtendCommandOptions(ExperimentRunOptions):
    """How `posformer extend` runs; the experiment's knobs are `ExtendSettings`."""

    run_dir: str = option(
        help="the trained run (a directory with checkpoints/, or a checkpoint folder); with --seeds, '{seed}' in it "
        "stands for each seed (runs/lm/seed-{seed}/rows/rope: each seed extends its own source)",
        flag="RUN",
    )
    output_dir: str = option(help="results and the fine-tunes' runs")
    preset: str = option("cpu", "size and budget", choices=tuple(PRESETS))
    data_dir: str | None = option(
        None,
        "folder holding gutenberg/ and wikitext-2/ when the run did not record one (default: $POSFORMER_DATA_DIR or "
        "../shared/data beside the repository)",
    )


DESCRIPTION = """\
Extend the context window of a trained RoPE model the way the papers do, and measure what each method gains.

From the same trained weights, for each --methods entry:
  none      RoPE unchanged (plain extrapolation; fine-tuned, the "direct fine-tuning" baseline of PI)
  pi        position interpolation (Chen et al. 2023): frequencies / s, s = target_len / L
  ntk       NTK-aware scaling: theta * s^(d/(d-2))
  yarn      YaRN (Peng et al. 2023): NTK-by-parts ramp and attention factor 0.1 ln s + 1
  dynyarn   dynamic YaRN (Peng et al. 2023, section 3.3): YaRN with s = max(1, l / L) for each forward's length
            l (RoPE unchanged up to L); fine-tuned as yarn (s = target_len / L), then scaled with the length
            past target_len, s = max(target_len, l) / L
  longrope  LongRoPE (Ding et al. 2024): one factor per rotated pair, found by an evolutionary search
            (seeded with PI, NTK and YaRN) that minimises the perplexity at target_len on training text;
            the paper's recipe with --set longrope_stages=[256] (search and fine-tune at 256 first, then
            search again and fine-tune at the target) and --set longrope_short=true (then search the short
            factors that restore the perplexity at L; the model is saved to rows/longrope/readjusted)
  training-free, RoPE with a piecewise (query, key) distance, parameters chosen from L as the papers do:
  rerope       ReRoPE (Su 2023): distance i - j below a window w = L/4, w beyond
  self_extend  Self-Extend (Jin et al. 2024): exact within W = L/4, grouped positions (group G) beyond
  dual_chunk   dual chunk attention (An et al. 2024): positions within chunks of 3L/4 - L/8
  streaming    StreamingLLM (Xiao et al. 2024): 4 attention sinks and the last L - 4 tokens, cache positions
  window       StreamingLLM's baseline: the last L tokens, no sinks
  RoPE dropped from every layer (every weight kept), then recalibrated at L:
  drope        DroPE (Gelberg et al. 2025): --steps steps at L, each as many tokens as a fine-tuning step;
               read at any length as is
each method is scored at eval time (its scaling or distance on the trained weights; drope: without RoPE)
and, the RoPE scalings, after --steps optimizer steps at target_len on the run's training text (every
method sees the same batches). Every model, the source too, is scored by perplexity at L, 2L, ...
target_len and 2 target_len on the same held-out tokens (95% bootstrap intervals over blocks), by passkey
retrieval (Mohtashami & Jaggi 2023) on a length x depth grid (exact match of greedy decoding), and by the
long-context suite of `posformer longeval` on the same grid (--set suite_tasks=[...]; [] for none), with an
effective length per row.

Before any work, the memory of scoring at each length and of a fine-tuning step at target_len is estimated and
compared with what the device has free (`experiments.memory_fit`): what would not fit is refused up front, named
with its estimate. Progress bars count the tokens scored (perplexity, then passkey).

RUN: a row of `posformer extrapolate` (OUTPUT/rows/rope): its corpus, held-out books and L are read from
its run_config.yaml. Any other posformer run or checkpoint works with --text FILE (first 90% fine-tune
text, last 10% evaluation) and --train-len L when the run does not record it.

Presets: quick (10 steps, small evaluation: a smoke run) and cpu (200 steps of 8 x target_len, 20 passkey
keys per cell, LongRoPE search 8 x 4: 2-4 minutes a method for the `extrapolate --preset bytes` model
at 8L on 2 cores).

Outputs in --output-dir: results.md (summary at the target length, perplexity by length, passkey grids),
results.json (every number, per-block losses, the resolved settings), ppl.png, passkey.png, and rows/METHOD/
(the fine-tune's Trainer run: `posformer generate --model OUTPUT/rows/yarn`). Re-running into the same dir
skips recorded methods and resumes a half-done fine-tune; a different configuration is refused, and so is
a source whose weights changed since the record (results.json keeps their SHA-256).

Seeds (--seeds N): each seed a whole run in OUTPUT/seed-S/, the source too when RUN names '{seed}'
(runs/lm/seed-{seed}/rows/rope, from `posformer extrapolate --seeds`); OUTPUT/results.md gives the summary as
means over seeds with 95% intervals and every paper's claim seed by seed. Every seed's source must come from
the same recipe (its run_config.yaml but the seed): one that does not is refused, the differing settings named.
"""

EPILOG = (
    "Example: posformer extend runs/lm-bytes/rows/rope --target-len 512 --preset cpu "
    "--output-dir runs/extend --methods pi,yarn"
)


def settings_from_args(args: argparse.Namespace):
    from posformer.cli.extrapolate import _overrides, flag_keys
    from posformer.experiments.extension.settings import ExtendSettings

    overrides = _overrides(args, flag_keys(ExtendSettings), "steps=400 or passkey_trials=50")
    if isinstance(overrides.get("methods"), str):
        overrides["methods"] = [m.strip() for m in overrides["methods"].split(",") if m.strip()]
    if overrides.get("target_len") is None:
        raise ValueError("extend: --target-len is required (the length to extend the context to)")
    return ExtendSettings.preset(args.preset, **overrides).with_precision_resolved()


def cmd_extend(args: argparse.Namespace) -> int:
    from posformer.experiments.extension.experiment import run_extend
    from posformer.experiments.extension.report import markdown
    from posformer.experiments.layout import ExperimentLayout

    settings, root = settings_from_args(args), ExperimentLayout(args.output_dir).root
    if args.seeds is None:
        results = run_extend(settings, args.run_dir, root, progress=args.progress, data_dir=args.data_dir)
        print("\n" + markdown(results))
        print(f"written: {root / 'results.md'}, {root / 'results.json'}, {root / 'ppl.png'}, {root / 'passkey.png'}")
        return 0
    from posformer.experiments.extension import seed_report
    from posformer.experiments.extension.source_identity import check_seed_sources

    def extend_one(seeded, directory):
        source = args.run_dir.replace("{seed}", str(seeded.seed))
        check_seed_sources(root, seeded.seed, source)
        return run_extend(seeded, source, directory, progress=args.progress, data_dir=args.data_dir)

    return run_seeds(args, settings, root, extend_one, seed_report.markdown, "extend")


def add_extend_arguments(parser: argparse.ArgumentParser) -> None:
    from posformer.experiments.extension.settings import ExtendSettings

    examples = 'e.g. --set passkey_trials=50 --set "eval_lens=[64,512]"'
    add_experiment_arguments(parser, ExtendCommandOptions, ExtendSettings, examples)


COMMAND = Command(
    "extend",
    help="extend a trained RoPE model's context (PI, NTK, YaRN, LongRoPE, DroPE ...): perplexity and passkey",
    description=DESCRIPTION,
    epilog=EPILOG,
    formatter_class=argparse.RawDescriptionHelpFormatter,
    add_arguments=add_extend_arguments,
    run=cmd_extend,
)
