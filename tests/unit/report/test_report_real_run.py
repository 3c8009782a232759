"""Reports from a real run: `python -m validation run --level quick` on 2x H200.

The result.json was brought back from the GPU machine (bench/validate_on_gpu.sh,
2026-11-30; see bench/results/validate-h200x2-2026-11-30.md) and is kept
unedited: it fails two checks for true reasons (NCCL 2.28.3 where the profile
pins 2.28.9; no iommu=pt on that VM's kernel command line).
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rackready.report import build_reports
from rackready.report.render.pdf import find_chromium
from tests.unit.real_run_suite import judge_as_its_suite

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "h200x2-quick-result.json.gz"


def _run_dir(tmp_path: Path) -> Path:
    node = tmp_path / "run" / "h200x2"
    node.mkdir(parents=True)
    (node / "result.json").write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    return tmp_path / "run"


@pytest.fixture(autouse=True, scope="module")
def _the_fixture_suites_checks():
    """Judged as its own suite knew it (tests/unit/real_run_suite.py): the report shows the
    run's true failures, not INCOMPLETE or "not measured" for what it could not know."""
    with pytest.MonkeyPatch.context() as mp:
        judge_as_its_suite(mp)
        yield


def test_real_h200_result_builds_schema_valid_reports_with_its_true_failures(tmp_path):
    run = _run_dir(tmp_path)
    paths = build_reports(run, {"json", "junit"})
    assert {p.name for p in paths} >= {"node-h200x2.json", "rack.json", "junit.xml"}
    doc = json.loads((run / "report" / "node-h200x2.json").read_text())
    # only result.json came back from that machine: the raw outputs it cites are not here,
    # and evidence that is missing backs nothing
    assert doc["outcome"] == "INCOMPLETE"
    assert doc["outcome_reason"].startswith("19 of 19 cited artifact(s) missing")
    failed = sorted({v["check"] for v in doc["verdicts"] if v["outcome"] == "fail"})
    assert failed == ["kernel.cmdline", "nccl.version"]
    # every performance verdict on the real GPUs passed its profile floor
    workload = ("gemm.", "hbm.", "nccl.busbw", "nccl.pair", "nccl.correct", "host.", "p2p.",
                "fsdp.")
    perf = [v for v in doc["verdicts"]
            if v["metric"].startswith(workload) and v["outcome"] != "not_applicable"]
    assert perf and all(v["outcome"] == "pass" for v in perf)
    assert doc["simulated"] is False


def test_real_result_names_both_gpus_by_serial(tmp_path):
    run = _run_dir(tmp_path)
    build_reports(run, {"html"})
    html = (run / "report" / "node-h200x2.html").read_text()
    result = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    gpus = result["inventory"]["gpus"]
    serials = [g["serial"] for g in (gpus.values() if isinstance(gpus, dict) else gpus)]
    assert len(serials) == 2 and all(s in html for s in serials)
    assert "SIMULATED" not in html


def pdf_pages(pdf: Path) -> int:
    """Pages of a PDF: pdfinfo (poppler-utils) when installed, else the /Type /Page objects
    (Chromium writes its page objects uncompressed)."""
    if shutil.which("pdfinfo"):
        out = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True,
                             check=True).stdout
        return int(re.search(r"^Pages:\s+(\d+)", out, re.M).group(1))
    return len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", pdf.read_bytes()))


@pytest.fixture(scope="module")
def real_pdf(tmp_path_factory) -> Path:
    if not find_chromium():
        pytest.skip("chromium not installed (Debian package 'chromium')")
    run = _run_dir(tmp_path_factory.mktemp("real"))
    # The PDF shows the run as judged on its machine: only result.json came back, so the
    # raw outputs it cites are dropped from this copy (on the controller their absence
    # makes the node INCOMPLETE: test_real_h200_result_builds_...), leaving its two true
    # failures on page one.
    path = run / "h200x2" / "result.json"
    result = json.loads(path.read_text())
    result["artifacts"] = {}
    for c in result["checks"]:
        for m in c["measurements"]:
            m["artifact"] = None
    path.write_text(json.dumps(result))
    build_reports(run, {"json", "pdf"})
    return run / "report" / "node-h200x2.pdf"


@pytest.mark.browser
def test_real_node_report_is_at_most_12_pages(real_pdf: Path) -> None:
    # 42 pages before the report was redesigned around the decision.
    pages = pdf_pages(real_pdf)
    assert 3 <= pages <= 12, pages


@pytest.mark.browser
def test_real_node_report_page_one_is_the_decision(real_pdf: Path) -> None:
    if not shutil.which("pdftotext"):
        pytest.skip("pdftotext not installed (Debian package 'poppler-utils')")
    page1 = subprocess.run(["pdftotext", "-f", "1", "-l", "1", "-layout", str(real_pdf), "-"],
                           capture_output=True, text=True, check=True).stdout
    assert "FAIL" in page1 and "Failures (2)" in page1
    for text in ("nccl.version", "2.28.3", "kernel.cmdline", "iommu=pt", "Remediation",
                 "re-run provisioning", "1653924185327", "1653924170482", "580.159.04",
                 "Key figures against their limits", "above floor"):
        assert text in page1, text
    # the note under the key figures table: the whole table fits on page 1
    assert "Each row stands for every measurement" in " ".join(page1.split())
