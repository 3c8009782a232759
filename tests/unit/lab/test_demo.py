"""`invoke demo`'s own decisions, without a lab: "as designed" read from the written rack
report, each report format written on its own, and where the reports are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rackready.errors import UserError
from rackready.report.errors import ReportError
from rackready_lab import demo


def rack_dir(tmp_path: Path, nodes: list[dict]) -> Path:
    d = tmp_path / "report"
    d.mkdir()
    (d / "rack.json").write_text(json.dumps({"kind": "rack", "outcome": "FAIL", "nodes": nodes}))
    return d


def node(name: str, outcome: str, *failures: tuple[str, str]) -> dict:
    return {"node": name, "outcome": outcome, "outcome_reason": "" if outcome == "PASS" else "x",
            "failures": [{"check": c, "message": m} for c, m in failures]}


ECC = ("gpu.health", "gpu.ecc_dram_uncorrectable = 1 on GPU 1 (serial 1654, PCI 00000000:19:00.0)")


def test_as_designed_is_read_from_the_rack_report(tmp_path):
    lines: list[str] = []
    d = rack_dir(tmp_path, [node("lab-gpu01", "PASS"), node("lab-gpu02", "FAIL", ECC)])
    assert demo.judge_demo(d, ["lab-gpu01", "lab-gpu02"], "lab-gpu02", lines.append)
    assert lines[0] == "lab-gpu01: PASS (expected PASS, as designed)"
    assert lines[1].startswith("lab-gpu02: FAIL (expected FAIL, as designed): gpu.health: ")
    assert "serial 1654" in lines[1]


@pytest.mark.parametrize("nodes", [
    [node("a", "PASS"), node("b", "PASS")],                       # the fault went unseen
    [node("a", "FAIL", ECC), node("b", "FAIL", ECC)],             # the healthy node failed
    [node("a", "PASS"), node("b", "FAIL", ("kernel.cmdline", "iommu=pt missing"))],  # wrong cause
    [node("a", "PASS"), node("b", "INCOMPLETE")],
    [node("a", "PASS")],                                          # no report for b
    [node("a", "PARTIAL"), node("b", "FAIL", ECC)],
])
def test_anything_else_is_not_as_designed(tmp_path, nodes):
    lines: list[str] = []
    assert not demo.judge_demo(rack_dir(tmp_path, nodes), ["a", "b"], "b", lines.append)
    assert any("NOT as designed" in line for line in lines)


def test_a_missing_rack_report_is_one_line(tmp_path):
    with pytest.raises(UserError, match="no readable .*rack.json"):
        demo.judge_demo(tmp_path, ["a", "b"], "b", print)


def test_each_format_is_written_on_its_own(tmp_path, monkeypatch):
    written = []

    def render(report_dir: Path, formats: set[str]) -> list[Path]:
        (fmt,) = formats
        if fmt == "pdf":
            raise ReportError("PDF needs headless Chromium, which was not found:\ninstall it")
        written.append(fmt)
        return []

    monkeypatch.setattr("rackready.report.build.render_reports", render)
    lines: list[str] = []
    problems = demo.write_rendered(tmp_path, lines.append)
    assert written == ["html", "junit"]  # the failing PDF stops neither
    assert problems == ["PDF reports not written: PDF needs headless Chromium, which was not "
                        "found: install it"]
    assert lines == ["   pdf: not written"]
    # a cause found earlier (the install step) is the reason given
    problems = demo.write_rendered(tmp_path, lines.append,
                                   known={"pdf": "Chromium/fonts could not be installed (x)"})
    assert problems == ["PDF reports not written: Chromium/fonts could not be installed (x)"]


def test_where_the_reports_are(tmp_path):
    d = tmp_path / "report"
    d.mkdir()
    for name in ("rack.html", "rack.pdf", "node-a.pdf", "rack.json", "node-a.json", "junit.xml"):
        (d / name).write_text("x")
    lines: list[str] = []
    demo.show_where(d, lines.append)
    assert lines[0] == f"reports in {d.resolve()}/"
    assert lines[1] == f"  open in a browser: file://{d.resolve()}/rack.html"
    assert lines[2] == f"  PDF: {d.resolve()}/node-a.pdf, {d.resolve()}/rack.pdf"
    assert lines[3] == "  JSON: node-a.json, rack.json; JUnit: junit.xml"


def test_one_node_is_refused():
    with pytest.raises(UserError, match="at least 2 nodes"):
        demo.run_demo(1)
