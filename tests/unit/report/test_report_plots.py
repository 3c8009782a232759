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
