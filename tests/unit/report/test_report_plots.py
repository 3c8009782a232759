"""plots: matplotlib SVG that is well formed, escaped, reproducible and unclipped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from rackready.report.render import plots
from rackready.report.views.figures import Figure, HLine, Line, Panel

SVG = "{http://www.w3.org/2000/svg}"


def _fig(label: str = "all_reduce") -> Figure:
    return Figure("busbw", "busbw & size", "caption", [
        Panel(title=label, y_label="GB/s", x_label="message size", x_bytes=True,
              lines=[Line("measured", [(1 << 20, 44.75), (64 << 20, 265.8), (4 << 30, 348.68)]),
                     Line("floor", [(64 << 20, 220.9), (4 << 30, 312.1)], "floor")],
              hlines=[HLine(22.4, "floor at every size")]),
        Panel(title="bars", y_label="TFLOP/s", bars=[("GPU 0", 662.0, False),
                                                     ("GPU 1", 540.0, True)],
              hlines=[HLine(600.0, "floor 600")]),
    ])


def _texts(svg: str) -> list[str]:
    return ["".join(t.itertext()) for t in ET.fromstring(svg).iter(f"{SVG}text")]


def test_svg_is_well_formed_titled_and_scalable() -> None:
    svg = plots.render(_fig())
    root = ET.fromstring(svg)  # raises if the markup is broken
    assert root.find(f"{SVG}title").text == "busbw & size"
    assert "width" not in root.attrib and "viewBox" in root.attrib
    texts = _texts(svg)
    for want in ("1 MiB", "4 GiB", "floor 600", "GPU 1", "all_reduce", "measured"):
        assert want in texts


def test_node_text_is_escaped_and_not_parsed_as_math() -> None:
    svg = plots.render(_fig(label="<script>$x^2$</script>"))
    assert "<script>" not in svg
    assert "<script>$x^2$</script>" in _texts(svg)


def test_output_is_reproducible() -> None:
    a, b = plots.render(_fig()), plots.render(_fig())
    assert a == b and "<dc:date>" not in a


def test_no_panels_no_svg() -> None:
    assert plots.render(Figure("x", "t", "c", [Panel(title="empty")])) == ""


EDGES = (0.0, -0.0, -4096.0, float("nan"), float("inf"), -float("inf"), 1.7e308, -1.7e308,
         1e-320, 5e-324, 1e18)


def test_any_value_at_the_edge_of_a_float_draws_or_is_left_out() -> None:
    """A size of 0 or -4096 on the log axis, NaN, infinities, 1.7e308 and
    subnormals once raised (math domain error, "Axis limits cannot be NaN or Inf"); every
    edge value, in every place a figure takes a number, is drawn or left out: beside
    ordinary values, and alone in its panel."""
    mixed = [
        Panel(title="sizes", x_bytes=True, y_label="GB/s",
              lines=[Line("measured", [*((e, 1.0) for e in EDGES), *((1 << 20, e) for e in EDGES),
                                       (4 << 20, 2.0)]),
                     Line("floor", [(e, e) for e in EDGES], "floor")],
              hlines=[HLine(e, "floor") for e in EDGES]),
        Panel(title="time", lines=[Line("GPU 0", [*((e, 1.0) for e in EDGES),
                                                  *((1.0, e) for e in EDGES)])],
              hlines=[HLine(e, "limit", "limit") for e in EDGES]),
        Panel(title="bars", bars=[(f"GPU {i}", e, bool(i % 2)) for i, e in enumerate(EDGES)],
              hlines=[HLine(EDGES[-1], "floor"), HLine(0.5, "median", "reference")]),
    ]
    alone = [p for e in EDGES for p in (
        Panel(title="size", x_bytes=True, lines=[Line("measured", [(e, e)])],
              hlines=[HLine(e, "floor")]),
        Panel(title="bar", bars=[("GPU 0", e, True)], hlines=[HLine(e, "floor")]))]
    for panels in (mixed, alone):
        ET.fromstring(plots.render(Figure("edge", "edges", "caption", panels, ncols=6)))
