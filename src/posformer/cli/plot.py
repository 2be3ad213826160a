"""`posformer plot`: the study notes' figures as PNG files."""

from __future__ import annotations

import argparse
from pathlib import Path

from posformer.cli.arg_types import positive_int
from posformer.cli.command import Command

DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog."

DESCRIPTION = """\
Write the figures of the study notes as PNG files into --output-dir:

  sinusoidal.png        sinusoidal encoding tables, d=500, for bases N = 100, 1000, 10000
                        (position against dimension): the periods lengthen as N grows.
  t5_buckets.png        T5 relative-position buckets against distance key - query (-200..200),
                        bidirectional and causal, 32 buckets, max_distance 128.
  rope_decay.png        RoPE long-range decay (RoFormer 3.4.3): (1/(d/2)) sum_j |S_j| against
                        distance 0..256 for d=128 and bases 500, 10000, 500000.
  rope_wavelengths.png  RoPE wavelength 2*pi*b^(2(i-1)/H) per pair (H=128), bases 500 .. 1e6,
                        log scale, with --train-len as a line: pairs above it never complete a
                        rotation within training.
  alibi_bias.png        ALiBi bias -m_h (i - j) per head (causal; --alibi-heads, length 32).
  t5_learned_bias.png   needs --checkpoint: the learned T5 bias per head against distance, for
                        every checkpoint whose position encoding is "t5".
  attention_maps.png    needs --checkpoint: the attention map of --text in --layer, averaged
                        over heads, one panel per checkpoint (title: its position encoding).

With --results DIR [DIR ...], the figures of experiment output directories, redrawn from their
results.json (NAME = the directory's name):
  NAME-ppl.png          `posformer extrapolate` / `posformer extend`: perplexity against length,
                        with 95% bootstrap bands
  NAME-accuracy.png     `posformer extrapolate --task`: exact match against length per encoding
  NAME-passkey.png      `posformer extend`: passkey retrieval heatmaps (length x depth) per row
  tasks-summary.md/.png two or more task directories: every task's table, the mean reciprocal rank
                        per task and over the tasks beside Kazemnejad et al.'s, one panel per task
"""


def cmd_plot(args: argparse.Namespace) -> int:
    from posformer import plots

    out = Path(args.output_dir)
    from posformer.plots.results import draw_results, draw_task_summary

    loaded = plots.load_checkpoints(args.checkpoint) if args.checkpoint else []
    t5_panels = [(c.name, stack) for c in loaded for stack in plots.t5_learned_bias(c.model)]
    attention = [_attention(c, args.text, args.layer) for c in loaded]  # before drawing: errors come first
    for path in (
        plots.draw_sinusoidal(out / "sinusoidal.png"),
        plots.draw_t5_buckets(out / "t5_buckets.png"),
        plots.draw_rope_decay(out / "rope_decay.png"),
        plots.draw_rope_wavelengths(out / "rope_wavelengths.png", train_len=args.train_len),
        plots.draw_alibi(out / "alibi_bias.png", n_heads=args.alibi_heads),
        *(path for directory in args.results or [] for path in draw_results(directory, out)),
        *draw_task_summary(args.results or [], out),
    ):
        print(path)
    if not loaded:
        print(
            "note: no --checkpoint given; skipped the learned T5 bias (t5_learned_bias.png) and the attention "
            "maps (attention_maps.png): pass --checkpoint DIR [DIR ...] to draw them"
        )
        return 0
    if t5_panels:
        print(plots.draw_t5_learned(out / "t5_learned_bias.png", t5_panels))
    else:
        print('note: no --checkpoint uses position "t5"; skipped the learned T5 bias (t5_learned_bias.png)')
    print(plots.draw_attention(out / "attention_maps.png", attention))
    return 0


def _attention(checkpoint, text: str, layer: int):
    from posformer.loading import load_text_tokenizer
    from posformer.plots import attention_map

    try:
        tokenizer = load_text_tokenizer(checkpoint.path)
    except Exception as err:
        raise ValueError(f"--checkpoint {checkpoint.path}: no usable tokenizer: {type(err).__name__}: {err}") from err
    try:
        return attention_map(
            checkpoint.model, tokenizer, text, layer, title=f"{checkpoint.model.cfg.position}\n{checkpoint.name}"
        )
    except ValueError as err:
        raise ValueError(f"--checkpoint {checkpoint.path}: {err}") from err


def add_plot_arguments(plot: argparse.ArgumentParser) -> None:
    plot.add_argument(
        "--output-dir",
        dest="output_dir",
        required=True,
        metavar="DIR",
        help="where the PNG files go (created if needed)",
    )
    plot.add_argument(
        "--checkpoint",
        nargs="+",
        metavar="DIR",
        help="one or more model run directories, or experiment directories holding rows/<name>/ runs "
        "(as `posformer extrapolate` writes); enables t5_learned_bias.png and attention_maps.png",
    )
    plot.add_argument(
        "--results",
        nargs="+",
        metavar="DIR",
        help="experiment output directories (of `posformer extrapolate`, `extrapolate --task` or "
        "`extend`): their figures are redrawn from results.json",
    )
    plot.add_argument("--text", default=DEFAULT_TEXT, help=f"text for the attention maps (default: {DEFAULT_TEXT!r})")
    plot.add_argument(
        "--layer",
        type=int,
        default=-1,
        help="layer of the attention maps, 0-based; negative counts from the last (default: -1)",
    )
    plot.add_argument(
        "--train-len",
        dest="train_len",
        type=positive_int,
        default=128,
        help="training length marked on rope_wavelengths.png (default: 128)",
    )
    plot.add_argument(
        "--alibi-heads",
        dest="alibi_heads",
        type=positive_int,
        default=8,
        help="heads drawn in alibi_bias.png (default: 8)",
    )


COMMAND = Command(
    "plot",
    help="the study notes' figures (position encodings, attention maps) as PNGs",
    description=DESCRIPTION,
    formatter_class=argparse.RawDescriptionHelpFormatter,
    epilog="Example: posformer plot --output-dir figs --checkpoint runs/t5 runs/rope",
    add_arguments=add_plot_arguments,
    run=cmd_plot,
)
