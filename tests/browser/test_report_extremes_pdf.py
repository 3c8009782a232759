"""Numbers at the edge, printed: the run whose node reports size labels
"0", "-4096" and "nan", GEMM rates of 1.7e308 and intervals of -0.0 and 1e-320
(tests/unit/report/extreme_run.py) renders to PDF like every other format: the page holds
its figures and names what the report clamped. The unit tier renders its HTML and JUnit
(tests/unit/report/test_report_extremes.py); Chromium belongs to this tier."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from rackready.report.build import build_reports
from rackready.report.render.pdf import find_chromium
from rackready.report.schema import NUMBER_BOUND
from tests.unit.real_run_suite import judge_as_its_suite
from tests.unit.report.extreme_run import write_extreme_run

pytestmark = pytest.mark.browser


def test_extreme_values_render_to_pdf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not find_chromium():
        pytest.skip("chromium not installed (Debian package 'chromium')")
    if not shutil.which("pdftotext"):
        pytest.skip("pdftotext not installed (Debian package 'poppler-utils')")
    judge_as_its_suite(monkeypatch)
    run = write_extreme_run(tmp_path)
    build_reports(run, {"json", "html", "junit", "pdf"})  # once raised: math domain error
    report = run / "report"
    for name in ("rack.pdf", "node-h200x2.pdf", "junit.xml", "rack.html"):
        assert (report / name).is_file(), name
    text = subprocess.run(["pdftotext", str(report / "node-h200x2.pdf"), "-"],
                          capture_output=True, text=True, check=True).stdout
    words = " ".join(text.split())
    assert "NCCL bus bandwidth vs message size" in words
    # GEMM at 1.7e308 is read as not measured by the controller (named on the page), so
    # neither a verdict nor the fleet median carries it
    node = json.loads((report / "node-h200x2.json").read_text())
    gemm = [v["value"] for v in node["verdicts"] if v["metric"] == "gemm.tflops"]
    assert gemm and all(v is None for v in gemm)
    assert "gemm.tflops" not in node["fleet"]["medians"]
    assert f"is beyond +-{NUMBER_BOUND:g}" in words
    assert "label size_bytes '-4096' is not a number" in words
