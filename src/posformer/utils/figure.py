"""Shared drawing plumbing and the one house style of every figure posformer draws.

- `pyplot()`: matplotlib on the Agg backend with the house style set (readable font sizes, the colour-blind-safe
  `PALETTE` with cycling line styles as the default colour cycle).
- `line_style(i)`: the colour, line style and marker of the i-th line of a plot, so that lines differ in shape
  as well as in colour (`DISTINCT_LINES` of them differ in every pair of the three).
- `draw_interval_lines(ax, curves, styles)`: lines with a 95% interval at each point as thin error bars, each line's
  points shifted a little along a log x axis (`dodge_factors`, `dodge_limit`), for plots of many rows whose filled
  bands would overlap.
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
DODGE_SHARE = 0.4  # ... and over at most this share of the narrowest gap between two x values (in octaves)
REFERENCE_COLOR = "#666666"  # reference lines (training length, thresholds): grey, thin, dotted
SHORT_LOG_SPAN = 120.0  # a log axis spanning less than this ratio gets round-number ticks (`plain_log_ticks`)
# (axis ratio below which, mantissas about evenly spaced on a log scale) of `round_log_ticks`
ROUND_MANTISSAS = ((12.0, (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8)), (math.inf, (1, 1.5, 2, 3, 5, 7)))
LINEAR_TICKS_BELOW = 3.0  # a log axis spanning less than this ratio is labelled as a linear one ...
LINEAR_TICKS = 5  # ... with about this many ticks
MISSING_COLOR = "#D9D9D9"  # a heatmap cell with no value (NaN, drawn transparent) shows the axes in this grey

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


def dodge_factors(n_lines: int, most: float = DODGE_OCTAVES) -> list[float]:
    """The multiplier of line i's x values on a log axis: 2 ** offset_i, offsets evenly spaced and centred on 0
    (the points at one x span min(DODGE_STEP * (n_lines - 1), most) octaves)."""
    if n_lines <= 1:
        return [1.0] * n_lines
    span = min(DODGE_STEP * (n_lines - 1), most)
    return [2.0 ** (span * (i / (n_lines - 1) - 0.5)) for i in range(n_lines)]


def dodge_limit(xs) -> float:
    """The octaves the points at one x may span so that the groups of neighbouring x values stay apart: at most
    `DODGE_OCTAVES`, and at most DODGE_SHARE of the narrowest gap between two of the (positive) `xs`."""
    found = sorted({math.log2(x) for x in xs if x > 0})
    gaps = [b - a for a, b in zip(found, found[1:])]
    return min([DODGE_OCTAVES] + [DODGE_SHARE * gap for gap in gaps])


def draw_interval_lines(
    ax,
    curves: dict[str, list[tuple[float, float, float | None, float | None]]],
    styles: dict[str, dict] | None = None,
    dodge: bool | None = None,
) -> bool:
    """One line per label of {label: [(x, y, low, high)]} (low, high: None where there is no interval), styled by
    `styles[label]` where given (keyword arguments of `Axes.plot`: color, linestyle, marker, fillstyle), else by
    `line_style`, each interval a thin error bar. Filled bands of a dozen lines overlap into one blot where the lines
    agree; bars on points shifted apart (`dodge_factors`; the x axis must be logarithmic) stay readable. `dodge`:
    whether to shift them (None: when some point has an interval). Whether the points were shifted."""
    labels = [label for label, points in curves.items() if points]
    any_interval = any(p[2] is not None and p[3] is not None for label in labels for p in curves[label])
    most = dodge_limit([p[0] for label in labels for p in curves[label]])
    dodge = any_interval if dodge is None else dodge
    factors = dodge_factors(len(labels), most) if dodge else [1.0] * len(labels)
    for i, (label, factor) in enumerate(zip(labels, factors)):
        points = curves[label]
        style = (styles or {}).get(label) or line_style(i)
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
    return dodge and len(labels) > 1


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
    ticks were set by hand (`set_xticks(ticks)`), else matplotlib's choice of ticks, or round numbers on an axis of
    less than about a decade (`SHORT_LOG_SPAN`); explicit labels (`set_xticks(ticks, labels)`) and linear axes are
    left as they are."""
    from matplotlib.ticker import FixedLocator, LogFormatter

    plain, plain_log = _formatter_classes()
    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() not in ("log", "symlog"):
            continue
        if _short_log_axis_ticks(axis, plain):
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


def round_log_ticks(low: float, high: float) -> list[float]:
    """Round numbers between `low` and `high` (0 < low < high) to label a log axis of about two decades or less:
    every mantissa of `ROUND_MANTISSAS` (the finer set the shorter the axis) x 10^k in range, about evenly spaced
    on a log scale; over a ratio below `LINEAR_TICKS_BELOW`, the multiples of one step of 1, 2, 2.5 or 5 x 10^k,
    about `LINEAR_TICKS` of them (a log scale that short is nearly linear)."""
    if not 0 < low < high:
        raise ValueError(f"round_log_ticks: expected 0 < low < high, got {low} and {high}")
    if high / low >= LINEAR_TICKS_BELOW:
        mantissas = next(m for ratio, m in ROUND_MANTISSAS if high / low < ratio)
        decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
        found = (float(f"{m * 10.0**k:.6g}") for k in decades for m in mantissas)
        return [x for x in found if low <= x <= high]
    rough = (high - low) / LINEAR_TICKS
    power = 10.0 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= rough)
    first = math.ceil(low / step - 1e-9)
    return [float(f"{k * step:.6g}") for k in range(first, math.floor(high / step + 1e-9) + 1)]


def _short_log_axis_ticks(axis, plain) -> bool:
    """On a base-10 log axis with matplotlib's ticks that spans less than `SHORT_LOG_SPAN` (about two decades), the
    decades leave a few labelled ticks, often none near most of the data: label round numbers spread over the
    axis instead (`round_log_ticks`: 12, 15, 20, 25, 30, 40, ...), the minor ticks unlabelled. Whether the axis was
    changed."""
    from matplotlib.ticker import Locator, LogLocator, NullFormatter

    class RoundLogLocator(Locator):
        def __call__(self):
            return self.tick_values(*self.axis.get_view_interval())

        def tick_values(self, vmin, vmax):
            low, high = sorted((vmin, vmax))
            return round_log_ticks(low, high) if 0 < low < high else []

    if axis.get_scale() != "log" or axis.get_transform().base != 10:
        return False
    if not isinstance(axis.get_major_locator(), LogLocator):
        return False
    low, high = sorted(axis.get_view_interval())
    if not (0 < low and high / low < SHORT_LOG_SPAN):
        return False
    axis.set_major_locator(RoundLogLocator())
    axis.set_major_formatter(plain())
    axis.set_minor_formatter(NullFormatter())
    return True


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
