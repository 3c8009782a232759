"""PDF: missing Chromium is one line and the other formats still get written."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_report_synthetic import healthy_and_faulty

from rackready.report.build import build_reports
from rackready.report.errors import ReportError
from rackready.report.render.pdf import find_chromium


def test_missing_chromium_is_a_one_line_error_naming_the_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RACKREADY_CHROMIUM", str(tmp_path / "no-such-chromium"))
    run = healthy_and_faulty(tmp_path / "run")
    with pytest.raises(ReportError) as e:
        build_reports(run, {"json", "html", "junit", "pdf"})
    assert "'chromium'" in str(e.value) and "\n" not in str(e.value)
    names = {p.name for p in e.value.written}
    assert {"rack.json", "rack.html", "junit.xml", "node-gpu02.html"} <= names
    assert all(p.is_file() for p in e.value.written)
    assert not list((run / "report").glob("*.pdf"))


@pytest.mark.browser
def test_pdf_is_printed_for_rack_and_nodes(tmp_path: Path) -> None:
    if not find_chromium():
        pytest.skip("chromium not installed")
    paths = build_reports(healthy_and_faulty(tmp_path / "run"), {"pdf"})
    pdfs = sorted(p.name for p in paths if p.suffix == ".pdf")
    assert pdfs == ["node-gpu01.pdf", "node-gpu02.pdf", "rack.pdf"]
    assert all((tmp_path / "run/report" / n).read_bytes().startswith(b"%PDF") for n in pdfs)
