"""Numbers at the edge (issue 35, item 4): a node's size label "0", "-4096" or "nan" and a
GEMM rate of 1.7e308 once raised in the plots and the fleet median, leaving no rack.html,
no JUnit and no exit code. Every report is written now; what the report cannot hold is
clamped into the schema's range or left out of a figure, and named among the node's
problems. A renderer that fails still leaves the other formats and says so in one line.
(The PDF of this run: tests/browser/test_report_extremes_pdf.py.)"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from extreme_run import GEMM_RATE, write_extreme_run

from rackready.report import build
from rackready.report.errors import ReportError
from rackready.report.schema import NUMBER_BOUND, load_schema
from tests.unit.real_run_suite import judge_as_its_suite


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with pytest.MonkeyPatch.context() as mp:
        judge_as_its_suite(mp)
        run = write_extreme_run(tmp_path_factory.mktemp("extreme"))
        build.build_reports(run, {"json", "html", "junit"})  # once raised: math domain error
    return run / "report"


def test_every_report_is_written_from_extreme_values(report_dir: Path) -> None:
    node = json.loads((report_dir / "node-h200x2.json").read_text())
    # the 1.7e308 is clamped into the schema's range, the fleet median with it
    gemm = [v["value"] for v in node["verdicts"] if v["metric"] == "gemm.tflops"]
    assert gemm and all(v == NUMBER_BOUND for v in gemm)
    assert node["fleet"]["medians"]["gemm.tflops"]["median"] == NUMBER_BOUND
    problems = "\n".join(node["problems"])
    assert f"gemm.tflops value: {GEMM_RATE:.3g} is outside the report's range" in problems
    for size in ("'0'", "'-4096'", "'nan'"):
        assert f"nccl.busbw: label size_bytes {size} is not a number" in problems
    # the page and its bus-bandwidth figure, drawn from the sizes it can place
    html = (report_dir / "node-h200x2.html").read_text()
    assert 'aria-label="NCCL bus bandwidth vs message size"' in html
    assert (report_dir / "rack.html").is_file()
    suites = ET.fromstring((report_dir / "junit.xml").read_text())
    assert [s.get("name") for s in suites.iter("testsuite")] == ["h200x2"]


def test_the_schema_states_the_range_of_every_number() -> None:
    def walk(s: object) -> list[dict]:
        if isinstance(s, dict):
            kinds = s.get("type") if isinstance(s.get("type"), list) else [s.get("type")]
            own = [s] if {"number", "integer"} & set(kinds) else []
            return own + [x for v in s.values() for x in walk(v)]
        return [x for v in s for x in walk(v)] if isinstance(s, list) else []

    numbers = walk(load_schema())
    assert numbers and all(s.get("maximum") == NUMBER_BOUND and "minimum" in s
                           for s in numbers), [s for s in numbers if "maximum" not in s][:2]


def test_a_failing_renderer_leaves_the_other_formats_and_one_line(
        report_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(doc: dict) -> str:
        raise RuntimeError("a renderer's bug\nover two lines")

    monkeypatch.setattr(build, "render_node_html", broken)
    (report_dir / "junit.xml").unlink()
    with pytest.raises(ReportError) as caught:
        build.render_reports(report_dir, {"html", "junit", "pdf"})
    said = str(caught.value)
    assert "\n" not in said and said.startswith("HTML renderer failed: RuntimeError")
    assert "the other reports were written" in said
    assert (report_dir / "junit.xml").is_file()
    assert report_dir / "junit.xml" in caught.value.written
