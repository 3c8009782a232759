"""Report figures as inline SVG through matplotlib (Agg backend, no display, no network).

Input is views.Figure (plain data); output is one <svg> element. The output is
reproducible: a fixed hash salt for element ids and no date in the metadata,
so the same report renders to the same bytes. Text stays text (svg.fonttype
none): a reader can search and copy it, and matplotlib escapes it.
"""

from __future__ import annotations

import io
import math
import re
from html import escape
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure as MplFigure  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator  # noqa: E402

from rackready.report import naming  # noqa: E402
from rackready.report.schema import NUMBER_BOUND  # noqa: E402
from rackready.report.views.figures import Figure, Panel  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.typing import RcKeyType

PALETTE = ("#1f5fa8", "#d9822b", "#2e8b57", "#8e44ad", "#17a2b8", "#8c6d1f", "#e377c2",
           "#4d4d4d")
FAIL = "#b42318"
BAR = "#1f5fa8"
MUTED = "#6b7280"
WIDTH_IN = 7.2  # A4 text width (186 mm) less a little: printed at about 1:1

STYLE: dict[RcKeyType, Any] = {
    "svg.hashsalt": "rackready-report",
    "svg.fonttype": "none",
    "font.family": "DejaVu Sans",
    "font.size": 7.5,
    "axes.titlesize": 8,
    "axes.titleweight": "bold",
    "axes.labelsize": 7.5,
    "axes.edgecolor": "#9aa3b2",
    "axes.linewidth": 0.6,
    "axes.grid": True,
    "grid.color": "#e3e7ee",
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.frameon": False,
    "text.parse_math": False,  # a '$' in a node's label is text, not TeX
    "path.simplify": False,
}


def _bytes_formatter(v: float, _pos: int) -> str:
    return naming.fmt_bytes(v)


def _byte_ticks(lo: float, hi: float) -> list[float]:
    """Powers of two covering [lo, hi], at most 6 of them."""
    a, b = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    step = max(1, math.ceil((b - a) / 5))
    return [2.0 ** e for e in range(a, b + 1, step)]


def _plottable(v: float, least: float = -NUMBER_BOUND) -> bool:
    """A value an axis can hold: finite and inside the schema's range (a log axis of
    bytes: at least one). The loader has clamped what a report holds; a figure built from
    anything else leaves out what it cannot draw rather than fail the whole page."""
    return isinstance(v, int | float) and math.isfinite(v) and least <= v <= NUMBER_BOUND


def _draw_lines(ax, p: Panel) -> None:  # noqa: ANN001
    xs: list[float] = []
    measured = 0
    least = 1.0 if p.x_bytes else -NUMBER_BOUND
    for line in p.lines:
        points = [(a, b) for a, b in line.points if _plottable(a, least) and _plottable(b)]
        if not points:
            continue
        x, y = zip(*points, strict=True)
        xs += x
        if line.style == "measured":
            color = PALETTE[measured % len(PALETTE)]
            measured += 1
            ax.plot(x, y, color=color, lw=1.3, marker="o" if len(x) <= 20 else None, ms=3,
                    label=line.label, zorder=3)
        elif line.style == "floor":
            ax.plot(x, y, color=FAIL, lw=1.0, ls="--", marker="_", ms=7, label=line.label,
                    zorder=2)
        elif line.style == "golden":
            ax.plot(x, y, color="#111827", lw=1.0, ls="--", label=line.label, zorder=2)
        elif line.style == "reference":
            ax.plot(x, y, ls="none", marker="*", ms=8, color="#111827", label=line.label,
                    zorder=4)
        elif line.style == "bench":
            ax.plot(x, y, ls="none", marker="o", ms=5, mfc="none", mec=MUTED, mew=1.0,
                    label=line.label, zorder=4)
        elif line.style == "resumed":
            ax.plot(x, y, ls="none", marker="x", ms=5, color="#d9822b", label=line.label,
                    zorder=4)
    for h in [h for h in p.hlines if _plottable(h.value)]:
        ax.axhline(h.value, color=FAIL if h.style == "floor" else MUTED, lw=0.9,
                   ls={"floor": ":", "reference": ":", "limit": "-."}[h.style], label=h.label,
                   zorder=1)
    if p.x_bytes and xs:
        ax.set_xscale("log", base=2)
        lo, hi = min(xs), max(xs)
        if lo == hi:
            lo, hi = lo / 2, hi * 2
        ax.set_xlim(lo / 1.4, hi * 1.4)
        ax.xaxis.set_major_locator(FixedLocator(_byte_ticks(lo, hi)))
        ax.xaxis.set_major_formatter(FuncFormatter(_bytes_formatter))
        ax.xaxis.set_minor_locator(FixedLocator([]))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(6))
    if any(line.style in ("measured", "floor") for line in p.lines) and p.y_label != "loss":
        ax.set_ylim(bottom=0)
    ax.margins(y=0.08)


def _draw_bars(ax, p: Panel) -> None:  # noqa: ANN001
    labels = [b[0] for b in p.bars]
    values = [b[1] if _plottable(b[1]) else 0.0 for b in p.bars]  # no bar for no number
    ax.bar(range(len(values)), values, color=[FAIL if b[2] else BAR for b in p.bars],
           width=0.7, zorder=2)
    ax.set_xticks(range(len(values)), labels)
    if len(labels) > 8 or max((len(lb) for lb in labels), default=0) * len(labels) > 60:
        ax.tick_params(axis="x", labelrotation=90)
    ax.grid(axis="x", visible=False)
    hlines = [h for h in p.hlines if _plottable(h.value)]
    top = max([*values, *(h.value for h in hlines)], default=1.0)
    ax.set_ylim(0, top * 1.18 if top > 0 else 1.0)
    for i, h in enumerate(hlines):
        color = FAIL if h.style == "floor" else MUTED
        ax.axhline(h.value, color=color, lw=1.0, ls="--" if h.style == "floor" else ":",
                   zorder=3)
        # Label inside the axes, above the line, left or right so two never overlap.
        ax.annotate(h.label, xy=(0.01 if i % 2 == 0 else 0.99, h.value),
                    xycoords=("axes fraction", "data"), xytext=(0, 2),
                    textcoords="offset points", ha="left" if i % 2 == 0 else "right",
                    va="bottom", fontsize=6.5, color=color, zorder=4,
                    bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none",
                          "alpha": 0.8})


def render(fig_view: Figure) -> str:
    """One <svg> element for a figure of small panels (empty string without panels)."""
    panels = [p for p in fig_view.panels if p.lines or p.bars]
    if not panels:
        return ""
    with matplotlib.rc_context(STYLE):
        ncols = max(1, min(fig_view.ncols, len(panels)))
        nrows = math.ceil(len(panels) / ncols)
        has_legend = any(p.lines for p in panels)
        height = fig_view.panel_height * nrows + (0.35 if has_legend else 0)
        fig = MplFigure(figsize=(WIDTH_IN, height), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False)
        handles: dict[str, Artist] = {}
        for i, ax in enumerate(axes.flat):
            if i >= len(panels):
                ax.set_visible(False)
                continue
            p = panels[i]
            ax.set_title(naming.clean(p.title), loc="left")
            if p.bars:
                _draw_bars(ax, p)
            else:
                _draw_lines(ax, p)
                for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                    handles.setdefault(lab, h)
            if p.y_label:
                ax.set_ylabel(naming.clean(p.y_label))
            if p.x_label and i + ncols >= len(panels):  # bottom row only
                ax.set_xlabel(naming.clean(p.x_label))
        if handles:
            fig.legend(list(handles.values()), [naming.clean(k) for k in handles],
                       loc="outside lower center", ncols=min(len(handles), 6))
        buf = io.StringIO()
        fig.savefig(buf, format="svg", bbox_inches="tight", pad_inches=0.04,
                    metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    title = escape(naming.clean(fig_view.title))
    # Scale with the page: the viewBox stays, fixed width/height go.
    svg = re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"',
                 rf'<svg\1 class="chart" role="img" aria-label="{title}"', svg, count=1)
    return svg.replace(">", f"><title>{title}</title>", 1)
