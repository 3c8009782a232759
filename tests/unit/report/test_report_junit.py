"""JUnit XML: one suite per node, one case per verdict, incomplete nodes are errors."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from test_report_synthetic import healthy_and_faulty, result, write_node

from rackready.report.build import build_documents
from rackready.report.render.junit import render_junit


def test_suites_cases_failures_and_skips(tmp_path: Path) -> None:
    rack, docs = build_documents(healthy_and_faulty(tmp_path / "run"))
    root = ET.fromstring(render_junit(rack, docs).encode())
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"gpu01", "gpu02"}
    n_verdicts = len(docs[1]["verdicts"])  # 1 count + 8 gemm + 1 nccl + 1 ib
    assert n_verdicts == 11
    assert suites["gpu02"].get("tests") == "11" and suites["gpu02"].get("failures") == "1"
    assert suites["gpu01"].get("failures") == "0" and suites["gpu01"].get("skipped") == "1"
    fail = suites["gpu02"].find("testcase/failure")
    assert fail.get("message") == "GPU 3 sustained 540 TFLOP/s, below 600"
    assert "remediation: Check GPU 3 cooling" in fail.text
    assert "component: GPU 3 (serial 1653124042737 as the inventory lists)" in fail.text
    skip = suites["gpu01"].find("testcase/skipped")
    assert skip.get("message") == "the profile asks for no InfiniBand"
    assert root.get("failures") == "1" and root.get("tests") == "22"


def test_incomplete_node_is_an_error_case(tmp_path: Path) -> None:
    write_node(tmp_path, result("gpu05"), with_result=False)
    rack, docs = build_documents(tmp_path)
    root = ET.fromstring(render_junit(rack, docs).encode())
    err = root.find("testsuite/testcase[@name='run_complete']/error")
    assert err is not None and "result.json" in err.text
    assert root.get("errors") == "1"


def test_junit_is_well_formed_xml_whatever_the_node_sent(tmp_path: Path) -> None:
    """Characters XML 1.0 forbids, in any node text (U+FFFE, U+FFFF, NUL, a lone
    surrogate): the file still parses, for the whole rack."""
    rack, docs = build_documents(healthy_and_faulty(tmp_path / "run"))
    odd = "x\ufffe\uffff\x00\ud800\x1b[2Jy"
    for doc in docs:
        doc["problems"] = [f"problem {odd}"]
        for v in doc["verdicts"]:
            v["message"] = f"{v['message']} {odd}"
            v["remediation"] = odd
            v["labels"] = {**v["labels"], "note": odd}
    text = render_junit(rack, docs)
    root = ET.fromstring(text.encode("utf-8"))  # raises on any character XML forbids
    assert len(root.findall("testsuite")) == 2
    fail = root.find("testsuite/testcase/failure")
    assert fail is not None and "xy" not in fail.get("message") and "\\ud800" in text
