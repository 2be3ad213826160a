"""`posformer plot`: the study notes' figures as PNG files."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from posformer.cli.command import Command
from posformer.cli.option_flags import add_option_flags, options_from_args
from posformer.utils.limits import MAX_HEADS, MAX_LAYERS, MAX_LENGTH
from posformer.utils.options import option

DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog."


@dataclass
class PlotOptions:
    """The options of `posformer plot`."""

    output_dir: str = option(help="where the PNG files go (created if needed)", metavar="DIR")
    checkpoint: list[str] | None = option(
        None,
        "one or more model run directories, or experiment directories holding rows/<name>/ runs (as `posformer "
        "extrapolate` writes); enables t5_learned_bias.png and attention_maps.png",
        metavar="DIR",
    )
    results: list[str] | None = option(
        None,
        "experiment output directories (of `posformer extrapolate`, `extrapolate --task` or `extend`): their "
        "figures are redrawn from results.json",
        metavar="DIR",
    )
    text: str = option(DEFAULT_TEXT, f"text for the attention maps (default: {DEFAULT_TEXT!r})")
    layer: int = option(
        -1,
        "layer of the attention maps, 0-based; negative counts from the last",
        minimum=-MAX_LAYERS,
        maximum=MAX_LAYERS - 1,
    )
    train_len: int = option(128, "training length marked on rope_wavelengths.png", minimum=1, maximum=MAX_LENGTH)
    alibi_heads: int = option(8, "heads drawn in alibi_bias.png", minimum=1, maximum=MAX_HEADS)


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
                        with 95% intervals as error bars
  NAME-accuracy.png     `posformer extrapolate --task`: exact match against length per encoding
  NAME-passkey.png      `posformer extend`: passkey retrieval heatmaps (length x depth) per row
  tasks-summary.png     two or more task directories: one panel per task
The tables of the same directories (the mean reciprocal rank over tasks among them): `posformer report`.
"""


def cmd_plot(args: argparse.Namespace) -> int:
    from posformer import plots
    from posformer.plots.results import draw_results, draw_task_summary

    options = options_from_args(PlotOptions, args)
    out = Path(options.output_dir)
    loaded = plots.load_checkpoints(options.checkpoint) if options.checkpoint else []
    t5_panels = [(c.name, stack) for c in loaded for stack in plots.t5_learned_bias(c.model)]
    attention = [_attention(c, options.text, options.layer) for c in loaded]  # before drawing: errors come first
    for path in (
        plots.draw_sinusoidal(out / "sinusoidal.png"),
        plots.draw_t5_buckets(out / "t5_buckets.png"),
        plots.draw_rope_decay(out / "rope_decay.png"),
        plots.draw_rope_wavelengths(out / "rope_wavelengths.png", train_len=options.train_len),
        plots.draw_alibi(out / "alibi_bias.png", n_heads=options.alibi_heads),
        *(path for directory in options.results or [] for path in draw_results(directory, out)),
        *draw_task_summary(options.results or [], out),
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


COMMAND = Command(
    "plot",
    help="the study notes' figures (position encodings, attention maps) as PNGs",
    description=DESCRIPTION,
    formatter_class=argparse.RawDescriptionHelpFormatter,
    epilog="Example: posformer plot --output-dir figs --checkpoint runs/t5 runs/rope",
    add_arguments=lambda parser: add_option_flags(parser, PlotOptions),
    run=cmd_plot,
)
