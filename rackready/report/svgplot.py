"""Tiny inline-SVG charts, so the report needs no JS library and no network.

Every function returns a self-contained <svg> string; all text is escaped here,
so templates may mark the result safe.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

PALETTE = ("#1f5fa8", "#d9822b", "#2e8b57", "#b8336a", "#6a4fb3", "#8c6d1f", "#197a86",
           "#c0392b")
FAIL_COLOR = "#c0392b"
MUTED = "#8a94a6"


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]
    dashed: bool = False


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1-2-5 steps)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks, t = [], start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 10))
        t += step
    if ticks[-1] < hi:
        ticks.append(round(t, 10))
    return ticks


def fmt_number(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6 or a < 1e-3:
        return f"{v:.3g}"
    if a >= 100 or float(v).is_integer():
        return f"{v:,.0f}"
    return f"{v:.3g}"


def fmt_bytes(v: float) -> str:
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if v >= div:
            q = v / div
            return f"{q:.0f}{unit}" if q.is_integer() else f"{q:.1f}{unit}"
    return f"{v:.0f}B"


def _frame(width: int, height: int, title: str, body: list[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}" '
            f'class="chart"><title>{escape(title)}</title>'
            f'<rect width="{width}" height="{height}" fill="#fff"/>'
            + "".join(body) + "</svg>")


def _text(x: float, y: float, s: str, anchor: str = "middle", size: int = 11,
          extra: str = "") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'fill="#333" {extra}>{escape(s)}</text>')


def line_chart(series: Sequence[Series], *, title: str, x_label: str, y_label: str,
               log2_x: bool = False, x_format: Callable[[float], str] = fmt_number,
               width: int = 660, height: int = 300) -> str:
    """Lines over a shared x axis; log2_x for message sizes."""
    pts = [p for s in series for p in s.points]
    if not pts:
        return ""
    left, right, top, bottom = 64, 150, 28, 46
    pw, ph = width - left - right, height - top - bottom

    def tx(x: float) -> float:
        return math.log2(x) if log2_x and x > 0 else x

    xs = [tx(x) for x, _ in pts]
    ys = [y for _, y in pts]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x1 = x0 + 1
    yt = nice_ticks(min(0.0, min(ys)), max(ys))
    y0, y1 = yt[0], yt[-1]

    def px(x: float) -> float:
        return left + (tx(x) - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + ph - (y - y0) / (y1 - y0) * ph

    body = [_text(left + pw / 2, 17, title, size=13, extra='font-weight="600"')]
    for t in yt:
        body.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(t):.1f}" y2="{py(t):.1f}" '
                    'stroke="#e3e7ee"/>')
        body.append(_text(left - 6, py(t) + 4, fmt_number(t), anchor="end", size=10))
    if log2_x:
        xticks = sorted({x for x, _ in pts})
        if len(xticks) > 8:
            xticks = xticks[:: math.ceil(len(xticks) / 8)]
    else:
        xticks = [t for t in nice_ticks(x0, x1, 6) if x0 <= t <= x1]
    for t in xticks:
        body.append(_text(px(t), top + ph + 15, x_format(t), size=10))
    body.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" '
                'stroke="#9aa5b5"/>')
    body.append(_text(left + pw / 2, height - 8, x_label, size=11))
    body.append(_text(14, top + ph / 2, y_label, size=11,
                      extra=f'transform="rotate(-90 14 {top + ph / 2:.1f})"'))
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        if not s.points:
            continue
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in sorted(s.points))
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        body.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                    f'stroke-width="2"{dash}/>')
        if len(s.points) <= 24:
            body += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.6" fill="{color}"/>'
                     for x, y in s.points]
        ly = top + 10 + i * 18
        body.append(f'<line x1="{left + pw + 12}" x2="{left + pw + 32}" y1="{ly}" y2="{ly}" '
                    f'stroke="{color}" stroke-width="2"{dash}/>')
        body.append(_text(left + pw + 37, ly + 4, s.name[:18], anchor="start", size=10))
    return _frame(width, height, title, body)


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    highlight: bool = False  # drawn in the failure colour


def bar_chart(bars: Sequence[Bar], *, title: str, y_label: str,
              reference: float | None = None, reference_label: str = "fleet median",
              width: int = 660, height: int = 260) -> str:
    """One bar per device with an optional reference line (the fleet median)."""
    if not bars:
        return ""
    left, right, top, bottom = 64, 20, 28, 58
    pw, ph = width - left - right, height - top - bottom
    vals = [b.value for b in bars] + ([reference] if reference is not None else [])
    yt = nice_ticks(min(0.0, min(vals)), max(vals))
    y0, y1 = yt[0], yt[-1]

    def py(y: float) -> float:
        return top + ph - (y - y0) / (y1 - y0) * ph

    body = [_text(left + pw / 2, 17, title, size=13, extra='font-weight="600"')]
    for t in yt:
        body.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(t):.1f}" y2="{py(t):.1f}" '
                    'stroke="#e3e7ee"/>')
        body.append(_text(left - 6, py(t) + 4, fmt_number(t), anchor="end", size=10))
    slot = pw / len(bars)
    bw = max(2.0, min(38.0, slot * 0.7))
    rotate = len(bars) > 12 or max(len(b.label) for b in bars) * 6 > slot
    for i, b in enumerate(bars):
        cx = left + slot * (i + 0.5)
        yb, yv = py(max(y0, 0.0)), py(b.value)
        color = FAIL_COLOR if b.highlight else PALETTE[0]
        body.append(f'<rect x="{cx - bw / 2:.1f}" y="{min(yb, yv):.1f}" width="{bw:.1f}" '
                    f'height="{abs(yb - yv):.1f}" fill="{color}"><title>'
                    f'{escape(b.label)}: {escape(fmt_number(b.value))}</title></rect>')
        if rotate:
            body.append(_text(cx, top + ph + 12, b.label, anchor="end", size=9,
                              extra=f'transform="rotate(-40 {cx:.1f} {top + ph + 12})"'))
        else:
            body.append(_text(cx, top + ph + 15, b.label, size=10))
    if reference is not None:
        ry = py(reference)
        body.append(f'<line x1="{left}" x2="{left + pw}" y1="{ry:.1f}" y2="{ry:.1f}" '
                    f'stroke="{MUTED}" stroke-width="1.5" stroke-dasharray="5 3"/>')
        body.append(_text(left + pw - 4, ry - 5, f"{reference_label} {fmt_number(reference)}",
                          anchor="end", size=10))
    body.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" '
                'stroke="#9aa5b5"/>')
    body.append(_text(14, top + ph / 2, y_label, size=11,
                      extra=f'transform="rotate(-90 14 {top + ph / 2:.1f})"'))
    return _frame(width, height, title, body)
