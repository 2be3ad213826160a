"""The experiments' result figures in the house style (`utils.figure`), checked on the matplotlib objects: `extend`'s
ppl, passkey, suite and effective-length figures, the task figures, the training loss curve, round-number ticks on
short log axes, and the docs' figures redrawn from the tables the pages print (`plots.doc_tables`)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from figure_capture import keep_saved_figures
from posformer.experiments.doc_blocks import read_block
from posformer.experiments.extension import figure as extend_figure
from posformer.experiments.extension.suite import effective_lengths
from posformer.experiments.extrapolation import figure as lm_figure
from posformer.experiments.extrapolation import seed_report as lm_seed_report
from posformer.experiments.synthetic import figure as task_figure
from posformer.experiments.synthetic import seed_report as task_seed_report
from posformer.plots import doc_tables
from posformer.train import metrics_log
from posformer.utils import figure
from posformer.utils.figure import MIN_FONT_SIZE, MISSING_COLOR, PALETTE, REFERENCE_COLOR

DOCS = Path(__file__).resolve().parents[2] / "docs"
T_975_2DF = 4.302652729911275  # Student's t, 97.5% quantile, 2 degrees of freedom (published tables: 4.303)


@pytest.fixture
def drawn(monkeypatch) -> list:
    """The figures the drawing functions save, kept (drawn again after saving) for inspection."""
    return keep_saved_figures(monkeypatch, extend_figure, lm_figure, task_figure, figure)


def data_lines(ax) -> list:
    return [li for li in ax.get_lines() if not li.get_label().startswith("_") and li.get_color() != REFERENCE_COLOR]


def smallest_text(fig) -> float:
    from matplotlib.text import Text

    return min(t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text())


def extend_result(source_scored_at_l: bool = True) -> dict:
    """`posformer extend`'s results.json: the source, two methods each eval-time and fine-tuned, per-block losses,
    a passkey grid whose shortest length does not fit, a suite grid of two tasks."""
    rng = np.random.default_rng(0)
    lengths, depths = [16, 32, 64, 128], [0.0, 0.5, 1.0]
    rows = {}
    for k, (name, method, stage) in enumerate(
        [
            ("source", None, "trained"),
            ("yarn", "yarn", "eval-time"),
            ("yarn+ft", "yarn", "fine-tuned"),
            ("pi", "pi", "eval-time"),
            ("pi+ft", "pi", "fine-tuned"),
        ]
    ):
        blocks = {str(n): rng.normal(math.log(20 + 3 * k) * 64, 4.0, 12).tolist() for n in lengths}
        suite = {
            task: {
                str(n): {
                    "0.5": {
                        "exact": max(0.0, 1 - 0.2 * k * math.log2(n / 16) - 0.6 * (k == 4)),
                        "tokens": n,
                        "chance": 0.0,
                    }
                }
                for n in lengths
                if n >= (32 if task == "vt" and not source_scored_at_l else 16)
            }
            for task in ("single_noise", "vt")
        }
        rows[name] = {
            "method": method,
            "stage": stage,
            "ppl": {"books": {str(n): math.exp(sum(b) / (64 * len(b))) for n, b in blocks.items()}},
            "blocks": {"books": {str(n): {"nll": b, "count": [64] * len(b)} for n, b in blocks.items()}},
            "passkey": {
                str(n): {str(d): None if n == 16 else {"exact": float(rng.integers(0, 3)) / 2} for d in depths}
                for n in lengths
            },
            "suite": suite,
        }
    config = {
        "train_len": 16,
        "target_len": 64,
        "eval_lens": lengths,
        "methods": ["yarn", "pi"],
        "passkey_lengths": lengths,
        "passkey_depths": depths,
        "passkey_trials": 2,
        "suite_threshold": 0.5,
    }
    return {"benchmark": "extend", "config": config, "data": {"eval_sets": {"books": {}}}, "rows": rows}


def test_extend_ppl_pairs_each_method_by_colour_and_tells_eval_time_rows_by_line_and_hollow_marker(
    tmp_path, drawn
) -> None:
    results = extend_result()
    extend_figure.plot_ppl(results, tmp_path / "ppl.png")
    (fig,) = drawn
    (ax,) = [ax for ax in fig.axes if ax.get_lines()]
    lines = {li.get_label(): li for li in data_lines(ax)}
    assert set(lines) == set(results["rows"])
    looks = [(li.get_color(), li.get_linestyle(), li.get_marker(), li.get_fillstyle()) for li in lines.values()]
    assert len(set(looks)) == len(looks) and {look[0].upper() for look in looks} <= set(PALETTE)
    for method in ("yarn", "pi"):
        eval_time, tuned = lines[method], lines[f"{method}+ft"]
        assert (eval_time.get_color(), eval_time.get_marker()) == (tuned.get_color(), tuned.get_marker())
        assert (eval_time.get_linestyle(), eval_time.get_fillstyle()) == ("--", "none")
        assert (tuned.get_linestyle(), tuned.get_fillstyle()) == ("-", "full")
    assert len({(li.get_color(), li.get_marker()) for li in lines.values()}) == 3  # source, yarn, pi
    assert ax.get_legend().get_title().get_text().startswith("solid: ")
    assert smallest_text(fig) >= MIN_FONT_SIZE


def heatmap_panels(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_images()]


def test_extend_heatmaps_share_one_colour_bar_and_show_cells_that_do_not_fit_in_grey(tmp_path, drawn) -> None:
    from matplotlib.colors import to_hex

    results = extend_result()
    extend_figure.plot_passkey(results, tmp_path / "passkey.png")
    extend_figure.plot_suite(results, tmp_path / "suite.png")
    for fig, kind in zip(drawn, ("passkey", "suite")):
        panels = heatmap_panels(fig)
        assert len(panels) == len(results["rows"])
        assert len([ax for ax in fig.axes if ax.get_label() == "<colorbar>"]) == 1
        for ax, row in zip(panels, results["rows"].values()):
            image = ax.get_images()[0]
            assert (image.norm.vmin, image.norm.vmax) == (0.0, 1.0)
            assert to_hex(ax.get_facecolor()).upper() == MISSING_COLOR
            grid = np.asarray(image.get_array(), dtype=float)
            if kind == "passkey":
                cells = [[row["passkey"][str(n)][str(d)] for n in (16, 32, 64, 128)] for d in (0.0, 0.5, 1.0)]
                expected = [[np.nan if c is None else c["exact"] for c in by_depth] for by_depth in cells]
                np.testing.assert_array_equal(grid, np.array(expected))
            assert np.isnan(grid).any() == (kind == "passkey")  # the shortest passkey length does not fit
        assert [t.get_text() for t in panels[0].get_xticklabels()] == ["16", "32", "64", "128"]
        assert smallest_text(fig) >= MIN_FONT_SIZE
    suite_panels = heatmap_panels(drawn[1])
    assert [t.get_text() for t in suite_panels[0].get_yticklabels()] == ["single_noise", "vt"]
    assert all(not [t.get_text() for t in ax.get_yticklabels() if t.get_text()] for ax in suite_panels[1:4])


def test_effective_length_dots_sit_at_each_rows_effective_length(tmp_path, drawn) -> None:
    results = extend_result()
    _, found = effective_lengths(results["rows"], 16, 0.5)
    extend_figure.plot_effective(results, tmp_path / "effective.png")
    (ax,) = drawn[0].axes
    (dots,) = [li for li in ax.get_lines() if li.get_marker() == "o"]
    labels = {t.get_text(): y for t, y in zip(ax.get_yticklabels(), ax.get_yticks())}
    placed = dict(zip(dots.get_ydata(), dots.get_xdata()))
    assert {row: placed.get(labels[row]) for row in found} == found  # None: no dot, said in words instead
    missing = [t.get_text() for t in ax.texts]
    assert len(missing) == sum(v is None for v in found.values()) > 0


def test_effective_length_without_the_sources_score_at_l_says_so(tmp_path, drawn) -> None:
    extend_figure.plot_effective(extend_result(source_scored_at_l=False), tmp_path / "effective.png")
    (ax,) = drawn[0].axes
    assert not ax.get_lines() and "no effective length" in ax.texts[0].get_text()


def task_record(task: str, seeds: int = 3) -> dict:
    rng = np.random.default_rng(len(task))
    lengths = [8, 10, 12, 16, 24, 32]
    config = {
        "task": task,
        "train_len": 8,
        "eval_lens": lengths,
        "steps": 10,
        "batch_size": 4,
        "d_model": 16,
        "layers": 1,
        "heads": 2,
        "eval_examples": 8,
    }
    per_seed = {}
    for s in range(seeds):
        rows = {
            row: {"accuracy": {str(n): float(rng.integers(0, 9)) / 8 * (n <= 12) for n in lengths}, "error": None}
            for row in ("none", "alibi", "rope")
        }
        per_seed[str(s)] = {"benchmark": "tasks", "config": config, "rows": rows}
    return {"benchmark": "tasks", "config": config, "per_seed": per_seed}


def test_task_points_are_the_mean_over_seeds_with_the_student_t_interval() -> None:
    record = task_record("sort")
    panel = task_figure.task_panel(record)
    for row, points in panel.curves.items():
        for n, mean, low, high in points:
            values = [run["rows"][row]["accuracy"][str(n)] for run in record["per_seed"].values()]
            half = T_975_2DF * statistics.stdev(values) / math.sqrt(3)
            assert mean == pytest.approx(statistics.mean(values))
            assert (low, high) == pytest.approx((max(0.0, mean - half), min(1.0, mean + half)))


def test_the_task_summary_has_one_legend_and_draws_each_encoding_alike_in_every_panel(tmp_path, drawn) -> None:
    runs = {task: task_record(task) for task in ("copy", "sort", "parity")}
    task_figure.plot_summary(runs, tmp_path / "summary.png")
    (fig,) = drawn
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    looks = [
        {li.get_label(): (li.get_color(), li.get_linestyle(), li.get_marker()) for li in data_lines(ax)}
        for ax in panels
    ]
    assert all(look == looks[0] for look in looks) and len(set(looks[0].values())) == 3
    for ax in panels:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["8", "10", "12", "16", "24", "32"]
    assert smallest_text(fig) >= MIN_FONT_SIZE


def test_running_mean_matches_a_convolution() -> None:
    values = np.random.default_rng(2).normal(size=97).tolist()
    for window in (1, 5, 97):
        expected = np.convolve(values, np.ones(window) / window, mode="valid")
        np.testing.assert_allclose(metrics_log.running_mean(values, window), expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="window"):
        metrics_log.running_mean(values, 98)


def test_the_loss_curve_draws_the_steps_faint_and_their_running_mean_in_the_palette(tmp_path, drawn) -> None:
    losses = [3.0 + math.sin(s) for s in range(1, 201)]
    records = [{"step": s, "loss": v} for s, v in zip(range(1, 201), losses)]
    records += [{"step": s, "eval": {"eval_loss": 2.5}} for s in (100, 200)]
    assert metrics_log.plot_losses(records, tmp_path / "loss.png", "run") == tmp_path / "loss.png"
    (ax,) = drawn[0].axes
    raw, mean, evals = ax.get_lines()
    assert raw.get_alpha() < 0.5 and list(raw.get_ydata()) == losses
    window = len(losses) // metrics_log.SMOOTH_POINTS
    np.testing.assert_allclose(mean.get_ydata(), metrics_log.running_mean(losses, window))
    assert raw.get_color() == mean.get_color() == PALETTE[0] != evals.get_color()
    assert [t.get_text() for t in ax.get_legend().get_texts()][1] == f"train loss, mean of {window} steps"


@pytest.mark.parametrize("low, high", [(4.5, 75), (11, 85), (115, 450), (1450, 3600), (250, 360), (0.97, 1.03)])
def test_round_log_ticks_cover_a_short_axis_evenly_with_round_numbers(low, high) -> None:
    ticks = figure.round_log_ticks(low, high)
    assert ticks == sorted(ticks) and low <= ticks[0] and ticks[-1] <= high and len(ticks) >= 3
    for x in ticks:
        assert float(f"{x:.2g}") == x or float(f"{x:.3g}") == x  # two or three significant digits
    edges = [math.log10(low), *(math.log10(x) for x in ticks), math.log10(high)]
    # no stretch of the axis wider than a quarter decade, or a third of a short axis, without a labelled tick
    assert max(b - a for a, b in zip(edges, edges[1:])) <= max(0.25, (edges[-1] - edges[0]) / 3)


def test_a_short_log_axis_is_labelled_with_its_round_ticks(tmp_path, drawn) -> None:
    curves = {"books": {"a": [(64, 115.0, None, None), (128, 130.0, None, None)], "b": [(64, 400, None, None)]}}
    lm_figure.draw_sets(curves, 64, [64, 128], "nonoverlapping", "one seed", tmp_path / "ppl.png")
    (ax,) = [ax for ax in drawn[0].axes if ax.get_lines()]
    low, high = ax.get_ylim()
    labelled = [(t.get_position()[1], t.get_text()) for t in ax.get_yticklabels() if t.get_text()]
    labelled = [(y, text) for y, text in labelled if low <= y <= high]
    assert [y for y, _ in labelled] == figure.round_log_ticks(low, high)
    assert all(float(text.replace(",", "")) == y for y, text in labelled)


def test_the_docs_perplexity_tables_read_back_into_the_cells_as_printed() -> None:
    found = doc_tables.lm_tables(read_block(DOCS / "extrapolation.md", "lm-bytes"))
    assert (found.train_len, found.eval_lens, found.seeds) == (64, [64, 128, 256, 512, 1024], 3)
    assert found.protocol == "nonoverlapping"
    assert list(found.curves) == ["gutenberg", "wikitext-2"] and len(found.curves["gutenberg"]) == 14
    assert found.curves["gutenberg"]["rope"][-1] == (1024, 22.43, 15.82, 31.81)  # "22.43 [15.82, 31.81]"


def test_each_read_perplexity_agrees_with_the_pages_own_ratio_table() -> None:
    """The geometric mean of per-seed ratios is the ratio of geometric means: ppl(kL) / ppl(L) read from the
    perplexity table must match the page's ratio table, cell by cell, within the rounding of both."""
    text = read_block(DOCS / "extrapolation.md", "lm-bytes")
    found = doc_tables.lm_tables(text)
    ratios = {
        t.heading.split()[1].rstrip(":"): {cells[0]: cells[1:] for cells in t.rows}
        for t in doc_tables.tables(text)
        if "ppl(kL) / ppl(L)" in t.heading
    }
    checked = 0
    for eval_set, rows in found.curves.items():
        for row, points in rows.items():
            at_l = points[0][1]
            for (n, ppl, _, _), cell in zip(points, ratios[eval_set][row]):
                assert ppl / at_l == pytest.approx(doc_tables.parse_cell(cell)[0], rel=0.005, abs=0.006), (row, n)
                checked += 1
    assert checked == 2 * 14 * 5


def test_a_seed_reports_tables_read_back_into_the_curves_its_figure_draws() -> None:
    rng = np.random.default_rng(4)
    config = {"train_len": 32, "eval_lens": [32, 64, 128], "protocol": "nonoverlapping", "d_model": 8, "layers": 1}
    config |= {"heads": 1, "vocab_size": 9, "steps": 1, "batch_size": 1, "corpus": "x"}
    per_seed = {
        str(s): {
            "benchmark": "extrapolation",
            "config": config,
            "rows": {r: {"ppl": {"books": {str(n): float(rng.uniform(4, 40)) for n in (32, 64, 128)}}} for r in "ab"},
        }
        for s in range(3)
    }
    record = {"benchmark": "extrapolation", "config": config, "per_seed": per_seed}
    read = doc_tables.lm_tables(lm_seed_report.markdown(record)).curves["books"]
    for row, points in lm_seed_report.curves(record, "books").items():
        for (n, *values), (m, *printed) in zip(points, read[row]):
            assert n == m and printed == pytest.approx(values, abs=0.0051)
    tasks = {task: task_record(task) for task in ("copy", "sort")}
    panels, seeds = doc_tables.task_panels(task_seed_report.summary_markdown(tasks))
    assert seeds == 3 and [p.task for p in panels] == ["copy", "sort"]
    for panel, record in zip(panels, tasks.values()):
        for row, points in task_figure.task_panel(record).curves.items():
            for (n, mean, low, high), (m, *printed) in zip(points, panel.curves[row]):
                bare = printed[1] is None  # every seed gave the same value: no interval printed
                assert n == m and printed[0] == pytest.approx(mean, abs=0.00051)
                assert bare == (low == high) and (bare or printed[1:] == pytest.approx([low, high], abs=0.00051))


def test_table_cells_and_errors() -> None:
    assert doc_tables.parse_cell("4.86 [4.79, 4.94]") == (4.86, 4.79, 4.94)
    assert doc_tables.parse_cell("1,765.81") == (1765.81, None, None)
    assert doc_tables.parse_cell("n/a") is None and doc_tables.parse_cell("stopped") is None
    with pytest.raises(ValueError, match="no perplexity table"):
        doc_tables.lm_tables("# nothing here\n")
    with pytest.raises(ValueError, match="no task accuracy table"):
        doc_tables.task_panels("| a | b |\n|---|---|\n| 1 | 2 |\n")
