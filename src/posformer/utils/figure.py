"""Shared drawing plumbing and the one house style of every figure posformer draws.

- `pyplot()`: matplotlib on the Agg backend with the house style set (readable font sizes, the colour-blind-safe
  `PALETTE` with cycling line styles as the default colour cycle).
- `line_style(i)`: the colour, line style and marker of the i-th line of a plot, so that lines differ in shape
  as well as in colour (`DISTINCT_LINES` of them differ in every pair of the three).
- `draw_interval_lines(ax, curves)`: lines with a 95% interval at each point as thin error bars, each line's points
  shifted a little along a log x axis (`dodge_factors`), for plots of many rows whose filled bands would overlap.
- `panel_grid`, `label_outer_panels`, `shared_colorbar`: a grid of heatmaps with one colour bar and axis labels
  only on the outer panels.
- `save_png(fig, path)`: writes the PNG atomically; before that, every log or symlog axis of the figure (colour
  bars included) gets plain tick labels (`PlainLogFormatter`: 140, 0.05, 2,000 instead of 1.4x10^2).
"""

from __future__ import annotations

import math
from pathlib import Path

from posformer.utils.safe_write import writing_file

# Okabe & Ito (2008), "Color Universal Design": distinguishable under the common colour-vision deficiencies.
# Its yellow (#F0E442) is left out: a thin yellow line nearly vanishes on white.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000")
LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
# line_style(i) cycles the three with periods 7, 4 and 9: (colour, style), (style, marker) and (colour, marker)
# are each distinct over the first lcm(7, 4) = 28 lines.
DISTINCT_LINES = len(PALETTE) * len(LINE_STYLES)
MARKERS_PER_LINE = 10  # a dense line gets about this many markers, not one per point
DODGE_STEP = 0.06  # octaves between the points of neighbouring lines at one x (`dodge_factors`)
DODGE_OCTAVES = 0.3  # the lines' points at one x spread over at most this much of an octave, centred on it
REFERENCE_COLOR = "#666666"  # reference lines (training length, thresholds): grey, thin, dotted

FONT_SIZES = {
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 9,
    "figure.titlesize": 13,
}
MIN_FONT_SIZE = 7.0  # no text of a figure is smaller (token labels of a long text included)


def _style() -> dict:
    from cycler import cycler

    cycle = cycler(
        color=[PALETTE[i % len(PALETTE)] for i in range(DISTINCT_LINES)],
        linestyle=[LINE_STYLES[i % len(LINE_STYLES)] for i in range(DISTINCT_LINES)],
    )
    return {
        **FONT_SIZES,
        "axes.prop_cycle": cycle,
        "lines.linewidth": 1.6,
        "lines.markersize": 5,
        "grid.alpha": 0.3,
        "legend.framealpha": 0.9,
        "image.cmap": "viridis",
    }


def pyplot():
    """`matplotlib.pyplot` on the non-interactive Agg backend (no display needed), with the house style set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(_style())
    return plt


def line_style(index: int, n_points: int | None = None) -> dict:
    """Keyword arguments of `Axes.plot` for the `index`-th line (0-based): color, linestyle and marker.

    With `n_points` above `MARKERS_PER_LINE`, markers go on about `MARKERS_PER_LINE` of the points, staggered from
    line to line so that lines drawn on top of each other still show each one's markers.
    """
    if index < 0:
        raise ValueError(f"line_style: index must be >= 0, got {index}")
    style = {
        "color": PALETTE[index % len(PALETTE)],
        "linestyle": LINE_STYLES[index % len(LINE_STYLES)],
        "marker": MARKERS[index % len(MARKERS)],
    }
    if n_points is not None and n_points > MARKERS_PER_LINE:
        step = math.ceil(n_points / MARKERS_PER_LINE)
        style["markevery"] = ((index * max(1, step // 3)) % step, step)
    return style


def dodge_factors(n_lines: int) -> list[float]:
    """The multiplier of line i's x values on a log axis: 2 ** offset_i, offsets evenly spaced and centred on 0
    (the points at one x span min(DODGE_STEP * (n_lines - 1), DODGE_OCTAVES) octaves)."""
    if n_lines <= 1:
        return [1.0] * n_lines
    span = min(DODGE_STEP * (n_lines - 1), DODGE_OCTAVES)
    return [2.0 ** (span * (i / (n_lines - 1) - 0.5)) for i in range(n_lines)]


def draw_interval_lines(ax, curves: dict[str, list[tuple[float, float, float | None, float | None]]]) -> None:
    """One line per label of {label: [(x, y, low, high)]} (low, high: None where there is no interval), styled by
    `line_style`, each interval a thin error bar. Filled bands of a dozen lines overlap into one blot where the lines
    agree; bars on points shifted apart (`dodge_factors`; the x axis must be logarithmic) stay readable."""
    labels = [label for label, points in curves.items() if points]
    for i, (label, factor) in enumerate(zip(labels, dodge_factors(len(labels)))):
        points = curves[label]
        style = line_style(i)
        x = [p[0] * factor for p in points]
        ax.plot(x, [p[1] for p in points], label=label, linewidth=1.4, markersize=4.5, **style)
        banded = [(xi, p) for xi, p in zip(x, points) if p[2] is not None and p[3] is not None]
        if banded:
            ax.errorbar(
                [xi for xi, _ in banded],
                [p[1] for _, p in banded],
                yerr=[[p[1] - p[2] for _, p in banded], [p[3] - p[1] for _, p in banded]],
                fmt="none",
                ecolor=style["color"],
                elinewidth=1.0,
                capsize=2.5,
                alpha=0.8,
            )


def plain_number(value: float) -> str:
    """A tick value written plainly: 140, 0.05, 2,000, -0.25; scientific only below 1e-4 (1e-05)."""
    if value == 0:
        return "0"
    if abs(value) < 1e-4:
        return f"{value:.0e}"
    return f"{value:,.6f}".rstrip("0").rstrip(".")


def _formatter_classes():
    from matplotlib.ticker import Formatter, LogFormatter

    class PlainFormatter(Formatter):
        """Every tick labelled with its value, plainly (`plain_number`)."""

        def __call__(self, x, pos=None):
            return self.fix_minus(plain_number(x))

    class PlainLogFormatter(LogFormatter):
        """matplotlib's choice of which log ticks to label (the decades; between them when few decades show),
        each label a plain number (`plain_number`)."""

        def _num_to_string(self, x, vmin, vmax):
            return plain_number(x)

        def __call__(self, x, pos=None):
            label = super().__call__(x, pos)
            return self.fix_minus(f"-{label}") if label and x < 0 else label

    return PlainFormatter, PlainLogFormatter


def plain_log_ticks(ax) -> None:
    """Replace the scientific-notation labels of `ax`'s log and symlog axes by plain numbers: every tick when the
    ticks were set by hand (`set_xticks(ticks)`), else matplotlib's choice of ticks; explicit labels
    (`set_xticks(ticks, labels)`) and linear axes are left as they are."""
    from matplotlib.ticker import FixedLocator, LogFormatter

    plain, plain_log = _formatter_classes()
    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() not in ("log", "symlog"):
            continue
        base = axis.get_transform().base
        for formatter, locator, minor in (
            (axis.get_major_formatter(), axis.get_major_locator(), False),
            (axis.get_minor_formatter(), axis.get_minor_locator(), True),
        ):
            if not isinstance(formatter, LogFormatter):
                continue
            if isinstance(locator, FixedLocator):
                replacement = plain()
            else:
                replacement = plain_log(
                    base=base, labelOnlyBase=False, minor_thresholds=(2, 0.4) if minor else (1, 0.4)
                )
            (axis.set_minor_formatter if minor else axis.set_major_formatter)(replacement)


def panel_grid(plt, n_panels: int, columns: int, panel_size: tuple[float, float]):
    """A constrained-layout figure of `n_panels` panels, `columns` a line; returns (fig, axes (n_panels,)), the
    spare cells of the last line hidden. panel_size: (width, height) of one panel in inches."""
    if n_panels < 1 or columns < 1:
        raise ValueError(f"panel_grid: n_panels and columns must be >= 1, got {n_panels} and {columns}")
    columns = min(columns, n_panels)
    lines = math.ceil(n_panels / columns)
    fig, grid = plt.subplots(
        lines,
        columns,
        figsize=(panel_size[0] * columns, panel_size[1] * lines),
        squeeze=False,
        layout="constrained",
    )
    for ax in grid.flat[n_panels:]:
        ax.set_visible(False)
    return fig, grid.flat[:n_panels]


def label_outer_panels(axes, columns: int, xlabel: str, ylabel: str) -> None:
    """The x label on the lowest panel of each column, the y label on the first panel of each line."""
    n_panels = len(axes)
    for k, ax in enumerate(axes):
        if k + columns >= n_panels:
            ax.set_xlabel(xlabel)
        if k % columns == 0:
            ax.set_ylabel(ylabel)


def shared_colorbar(fig, image, axes, label: str):
    """One colour bar, at the right, for every panel in `axes` (they must share `image`'s norm and colour map);
    on a grid of many lines it spans about two of them, not the whole height."""
    lines = len({ax.get_subplotspec().rowspan.start for ax in axes})
    shrink = min(0.9, max(0.35, 1.8 / lines))
    return fig.colorbar(image, ax=list(axes), label=label, shrink=shrink, aspect=25 * shrink / 0.9)


def save_png(fig, path: str | Path) -> Path:
    """Write `fig` as a PNG at `path` through a temporary file in the same folder and `os.replace`
    (`safe_write.writing_file`: a symlink at `path` is replaced, not followed); close it. Every log or symlog
    axis gets plain tick labels first (`plain_log_ticks`)."""
    path = Path(path)
    try:
        for ax in fig.axes:
            plain_log_ticks(ax)
        with writing_file(path) as f:
            fig.savefig(f, format="png", dpi=110, bbox_inches="tight")
    finally:
        pyplot().close(fig)
    return path
