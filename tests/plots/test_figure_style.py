"""The house style of every figure (`utils.figure`), checked as properties a reader relies on: colours from the
published Okabe-Ito palette that stay visible on white, lines that differ in shape as well as colour, log axes
labelled with plain numbers that equal their ticks, one colour bar for a grid of heatmaps, no tiny text."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import posformer as pf
from figure_capture import keep_saved_figures
from posformer import plots
from posformer.experiments.extrapolation import figure as lm_figure
from posformer.plots import alibi, attention, memory, rope, t5_buckets, t5_learned
from posformer.plots.attention import AttentionMap, token_label
from posformer.utils import figure
from posformer.utils.figure import DISTINCT_LINES, MIN_FONT_SIZE, PALETTE, REFERENCE_COLOR, line_style

# Okabe & Ito (2008), "Color Universal Design", the eight colours as published
OKABE_ITO = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"}
MIN_CONTRAST_ON_WHITE = 2.0  # tab20's light blue (1.7) and Okabe-Ito's yellow (1.2) fall below: they vanished


def contrast_on_white(hex_colour: str) -> float:
    """WCAG 2 contrast ratio (L_white + 0.05) / (L + 0.05), L the relative luminance of the sRGB colour."""
    channels = [int(hex_colour[k : k + 2], 16) / 255 for k in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return 1.05 / (luminance + 0.05)


@pytest.fixture
def drawn(monkeypatch) -> list:
    """The figures the drawing functions save, kept (drawn again after saving) for inspection."""
    return keep_saved_figures(monkeypatch, alibi, attention, memory, rope, t5_buckets, t5_learned, lm_figure)


def data_lines(ax) -> list:
    return [
        line for line in ax.get_lines() if not line.get_label().startswith("_") and line.get_color() != REFERENCE_COLOR
    ]


def memory_result(encodings: list[str]) -> dict:
    """`bench.memory.run`'s result shape, every kind of model `bench --memory` measures."""
    models = ("posformer", "hf", "whole", "checkpointed", "hf checkpointed")
    cells = [
        {"model": model, "encoding": e, "phase": "forward", "length": n, "peak_mb": (k + 1) * n / 64}
        for k, e in enumerate(encodings)
        for model in models
        for n in (1024, 4096, 16384)
    ]
    return {"phases": ["forward"], "lengths": [1024, 4096, 16384], "cells": cells}


def extrapolation_result(rows: list[str], sets: tuple[str, ...] = ("books", "wiki")) -> dict:
    """One run's results.json as `posformer extrapolate` writes it: ppl and per-block losses per set and length."""
    rng = np.random.default_rng(0)
    lengths, record = [32, 64, 128, 256, 512], {}
    for k, row in enumerate(rows):
        ppl, blocks = {}, {}
        for s in sets:
            nll = {n: rng.normal(math.log(5 + k) + 0.1 * k * math.log2(n / 32), 0.2, 16) * 512 for n in lengths}
            ppl[s] = {str(n): math.exp(v.sum() / (512 * 16)) for n, v in nll.items()}
            blocks[s] = {str(n): {"nll": v.tolist(), "count": [512] * 16} for n, v in nll.items()}
        record[row] = {"ppl": ppl, "blocks": blocks}
    config = {"train_len": 32, "eval_lens": lengths, "protocol": "nonoverlapping"}
    return {"benchmark": "extrapolation", "config": config, "data": {}, "rows": record}


def t5_panels() -> list:
    cfg = pf.Config(
        arch="encoder_decoder",
        vocab_size=11,
        d_model=16,
        n_layers=1,
        n_heads=8,
        d_ff=16,
        position="t5",
        position_params={"num_buckets": 32, "max_distance": 128},
        decoder_start_token_id=0,
    )
    return [("run", stack) for stack in plots.t5_learned_bias(pf.Transformer(cfg))]


def line_figures(tmp_path, drawn) -> list:
    plots.draw_rope_decay(tmp_path / "decay.png")
    plots.draw_rope_wavelengths(tmp_path / "waves.png")
    plots.draw_t5_buckets(tmp_path / "buckets.png")
    plots.draw_t5_learned(tmp_path / "t5.png", t5_panels())
    memory.draw_memory(memory_result(["none", "alibi", "t5"]), tmp_path / "memory.png")
    rows = ["rope", "rope+yarn", "alibi", "t5", "none", "fire", "xpos", "kerple", "shaw", "fox", "sinusoidal"]
    lm_figure.plot(extrapolation_result(rows), tmp_path / "ppl.png")
    return list(drawn)


def test_palette_is_okabe_ito_distinct_and_visible_on_white() -> None:
    assert len(set(PALETTE)) == len(PALETTE) >= 6
    assert {c.upper() for c in PALETTE} <= OKABE_ITO
    assert min(contrast_on_white(c) for c in PALETTE) >= MIN_CONTRAST_ON_WHITE
    assert contrast_on_white("#aec7e8") < MIN_CONTRAST_ON_WHITE > contrast_on_white("#F0E442")  # the bound bites


def test_line_styles_differ_in_every_pair_of_colour_dash_and_marker() -> None:
    styles = [line_style(i) for i in range(DISTINCT_LINES)]
    for pair in (("color", "linestyle"), ("linestyle", "marker"), ("color", "marker")):
        assert len({tuple(s[k] for k in pair) for s in styles}) == DISTINCT_LINES, pair
    with pytest.raises(ValueError, match="index"):
        line_style(-1)


def test_every_line_of_a_figure_has_its_own_look_in_colour_and_in_grey(tmp_path, drawn) -> None:
    figures = line_figures(tmp_path, drawn)
    assert len(figures) == 6
    for fig in figures:
        for ax in fig.axes:
            lines = data_lines(ax)
            looks = [(li.get_color(), li.get_linestyle(), li.get_marker(), li.get_fillstyle()) for li in lines]
            assert len(set(looks)) == len(looks), (fig.texts, ax.get_title())
            grey = {look[1:] for look in looks}  # without colour: dash, marker and its fill
            assert len(grey) == len(looks), ax.get_title()


def labelled_ticks(axis) -> list[tuple[float, str]]:
    """(location, label) of every labelled tick, major and minor, inside the axis's view."""
    low, high = sorted(axis.get_view_interval())
    found = []
    for locator, formatter in (
        (axis.get_major_locator(), axis.get_major_formatter()),
        (axis.get_minor_locator(), axis.get_minor_formatter()),
    ):
        locs = [x for x in locator() if low <= x <= high]
        formatter.set_locs(locs)
        found += [(x, formatter(x, i)) for i, x in enumerate(locs) if formatter(x, i)]
    return found


def test_log_axes_are_labelled_with_plain_numbers_equal_to_their_ticks(tmp_path, drawn) -> None:
    figures = line_figures(tmp_path, drawn)
    plots.draw_alibi(tmp_path / "alibi.png")  # its colour bar is on a symmetric log scale
    checked = 0
    for fig in [*figures, drawn[-1]]:
        for ax in fig.axes:
            for axis in (ax.xaxis, ax.yaxis):
                if axis.get_scale() not in ("log", "symlog"):
                    continue
                ticks = labelled_ticks(axis)
                assert len(ticks) >= 2, ax.get_title()
                for x, label in ticks:
                    assert re.fullmatch(r"[\u2212-]?[0-9][0-9,]*(\.[0-9]+)?", label), label
                    assert float(label.replace(",", "").replace("\u2212", "-")) == pytest.approx(x, rel=1e-6)
                checked += 1
    assert checked == 10  # wavelengths, t5 distance (x2 panels), memory (x, y), ppl (2 sets: x, y), alibi colour bar


def attention_maps(n_maps: int, n_tokens: int) -> list[AttentionMap]:
    rng = np.random.default_rng(1)
    maps = []
    for k in range(n_maps):
        logits = rng.normal(size=(n_tokens, n_tokens)) * (1 + k)
        logits[np.triu_indices(n_tokens, 1)] = -np.inf
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        maps.append(
            AttentionMap(f"model {k}", [f" w{i}" for i in range(n_tokens)], probs / probs.sum(1, keepdims=True), 0)
        )
    return maps


@pytest.mark.parametrize("n_maps, n_tokens", [(1, 5), (5, 20), (4, 64)])
def test_attention_maps_share_one_scale_and_one_colour_bar(tmp_path, drawn, n_maps, n_tokens) -> None:
    maps = attention_maps(n_maps, n_tokens)
    plots.draw_attention(tmp_path / "attention.png", maps)
    (fig,) = drawn
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_images()]
    assert len(bars) == 1 and len(panels) == n_maps
    norms = {(ax.get_images()[0].norm.vmin, ax.get_images()[0].norm.vmax) for ax in panels}
    assert norms == {(0.0, max(float(m.probs.max()) for m in maps))}
    for ax in panels:
        labels = ax.get_xticklabels()
        assert [t.get_text() for t in labels] == [token_label(t) for t in maps[0].tokens]
        assert min(t.get_fontsize() for t in labels) >= MIN_FONT_SIZE


def test_no_text_is_smaller_than_the_minimum(tmp_path, drawn) -> None:
    from matplotlib.text import Text

    figures = line_figures(tmp_path, drawn)
    plots.draw_alibi(tmp_path / "alibi.png", n_heads=6)
    plots.draw_sinusoidal(tmp_path / "sin.png", plots.sinusoidal_tables(n_positions=50, dim=16))
    plots.draw_attention(tmp_path / "attention.png", attention_maps(3, 64))
    for fig in [*figures, *drawn[len(figures) :]]:
        texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text()]
        assert texts and min(t.get_fontsize() for t in texts) >= MIN_FONT_SIZE


def test_token_labels_show_spaces_and_control_characters() -> None:
    assert token_label(" was") == "\u2423was"
    assert token_label("a\nb") == "a\\nb"
    assert token_label("") == "''"


def test_dodged_rows_stay_centred_on_their_length(tmp_path, drawn) -> None:
    for n_rows in (1, 2, 5, 14):
        factors = figure.dodge_factors(n_rows)
        assert factors == sorted(factors) and len(set(factors)) == n_rows
        assert math.log2(factors[0]) == pytest.approx(-math.log2(factors[-1]))  # symmetric about the length
        assert math.log2(factors[-1] / factors[0]) <= figure.DODGE_OCTAVES + 1e-12
    lm_figure.plot(extrapolation_result(["a", "b", "c"], sets=("books",)), tmp_path / "ppl.png")
    (ax,) = [ax for ax in drawn[0].axes if ax.get_lines()]
    for line in data_lines(ax):
        offsets = np.log2(np.asarray(line.get_xdata()) / np.array([32, 64, 128, 256, 512]))
        assert np.ptp(offsets) == pytest.approx(0.0, abs=1e-12) and abs(offsets[0]) <= figure.DODGE_OCTAVES / 2


def test_plain_numbers() -> None:
    assert [figure.plain_number(v) for v in (0, 140, 0.05, 2000, -0.25, 1e6, 3e-6)] == [
        "0",
        "140",
        "0.05",
        "2,000",
        "-0.25",
        "1,000,000",
        "3e-06",
    ]


def test_grids_reject_empty_input() -> None:
    plt = figure.pyplot()
    with pytest.raises(ValueError, match="n_panels"):
        figure.panel_grid(plt, 0, 3, (3.0, 3.0))
    with pytest.raises(ValueError, match="maps is empty"):
        plots.draw_attention("unused.png", [])


def test_t5_distance_ticks_are_zero_and_powers_of_two() -> None:
    assert t5_learned.distance_ticks(np.arange(-192, 1)) == [-128, -64, -32, -16, -8, -4, 0]
    assert t5_learned.distance_ticks(np.arange(-20, 21)) == [-16, -8, -4, 0, 4, 8, 16]


def test_memory_lines_are_labelled_as_the_bench_table_labels_its_rows(tmp_path, drawn) -> None:
    from posformer.bench.memory import table

    result = memory_result(["none", "alibi"])
    memory.draw_memory(result, tmp_path / "memory.png")
    (ax,) = [ax for ax in drawn[0].axes if ax.get_lines()]
    labels = [line.get_label() for line in data_lines(ax)]
    rows = [line.split(" | ")[0].removeprefix("| ") for line in table(result, "forward")[2:]]
    assert sorted(labels) == sorted(rows) and len(labels) == 10
