"""The printed node report of the lab's 8-GPU node at the standard level (a real lab run,
tests/fixtures/lab-xe9680-standard): the decision and the key figures, one row per
metric and unit, first (from page 1, ending by page 2); at most 8 pages before the
appendix.

Pages are read with pdftotext (poppler-utils), which ends each page with a form feed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from rackready.report.build import build_reports
from rackready.report.render.pdf import find_chromium

pytestmark = pytest.mark.browser

APPENDIX = "Appendix A · Verdicts by check"


def pages(pdf: Path) -> list[str]:
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True,
                          text=True, check=True).stdout
    return text.split("\f")[:-1]  # the last page ends with one too


@pytest.fixture(scope="module")
def lab_pages(lab_standard_run: Path) -> list[str]:
    if not find_chromium():
        pytest.skip("chromium not installed (Debian package 'chromium')")
    if not shutil.which("pdftotext"):
        pytest.skip("pdftotext not installed (Debian package 'poppler-utils')")
    build_reports(lab_standard_run, {"json", "pdf"})
    return pages(lab_standard_run / "report" / "node-lab-gpu01.pdf")


def test_at_most_8_pages_before_the_appendix(lab_pages: list[str]) -> None:
    first = next(i for i, text in enumerate(lab_pages) if APPENDIX in text)
    # 5 since the launch map's lines wrap (before, their overflow shrank every printed page)
    assert first <= 8, f"the appendix starts on page {first + 1}"
    assert not any(APPENDIX in text for text in lab_pages[:first])


def test_the_decision_and_the_key_figures_come_first(lab_pages: list[str]) -> None:
    page1 = lab_pages[0]
    words = " ".join(page1.split())
    assert "PASS" in words and "Key figures against their limits" in words
    # the note under the table: the whole table ends by page 2 (the identity block and the
    # table's 25 kinds fill page 1 and a fifth of page 2 at print size)
    assert "Each row stands for every measurement" in " ".join(" ".join(lab_pages[:2]).split())
    # 32 DIMMs, one row each kind: how many, the weakest and where
    lines = [line.split() for line in page1.splitlines()]
    speed = [line for line in lines if line[:1] == ["host.dimm_speed_mts"]]
    corrected = [line for line in lines if line[:1] == ["host.edac_corrected"]]
    assert len(speed) == 1 and len(corrected) == 1, (speed, corrected)
    assert speed[0][1] == "32" and " ".join(speed[0][2:5]) == "DIMM slot A1"
    assert corrected[0][1] == "32"
