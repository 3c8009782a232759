"""Inline SVG charts: well-formed, escaped, scaled."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from rackready.report.svgplot import Bar, Series, bar_chart, fmt_bytes, line_chart, nice_ticks

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize("lo, hi", [(0, 348.68), (0, 1), (-3, 7), (1380, 1410), (5, 5)])
def test_nice_ticks_cover_the_range_in_even_steps(lo: float, hi: float) -> None:
    t = nice_ticks(lo, hi)
    assert t[0] <= lo and t[-1] >= hi
    steps = {round(b - a, 9) for a, b in zip(t, t[1:], strict=False)}
    assert len(steps) == 1 and 2 <= len(t) <= 12


def test_line_chart_is_valid_svg_with_one_line_per_series() -> None:
    s = [Series("all_reduce", [(1 << 20, 44.75), (4 << 30, 348.68)]),
         Series("<b>op</b>", [(1 << 20, 30.0), (4 << 30, 280.0)], dashed=True)]
    svg = line_chart(s, title="busbw & size", x_label="bytes", y_label="GB/s", log2_x=True,
                     x_format=fmt_bytes)
    root = ET.fromstring(svg)  # raises if the escaping broke the markup
    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == 2 and "stroke-dasharray" in lines[1].attrib
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "<b>op</b>" in texts and "busbw & size" in texts and "4G" in texts


def test_line_chart_maps_larger_values_higher() -> None:
    svg = line_chart([Series("x", [(0, 10.0), (1, 20.0)])], title="t", x_label="", y_label="")
    pts = ET.fromstring(svg).find(f"{SVG}polyline").attrib["points"].split()
    (x0, y0), (x1, y1) = (tuple(map(float, p.split(","))) for p in pts)
    assert x1 > x0 and y1 < y0  # SVG y grows downwards


def test_bar_chart_highlights_failures_and_draws_the_median() -> None:
    bars = [Bar("GPU 0", 662.0), Bar("GPU 3", 540.0, highlight=True)]
    root = ET.fromstring(bar_chart(bars, title="t", y_label="TFLOP/s", reference=601.0))
    fills = [r.attrib["fill"] for r in root.findall(f"{SVG}rect")][1:-1]
    assert fills == ["#1f5fa8", "#c0392b"]
    assert any("fleet median 601" in (t.text or "") for t in root.iter(f"{SVG}text"))


def test_no_data_no_chart() -> None:
    assert line_chart([], title="t", x_label="", y_label="") == ""
    assert bar_chart([], title="t", y_label="") == ""
