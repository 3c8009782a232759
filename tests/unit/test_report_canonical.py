"""Integrity hash and operator sign-off."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from test_report_synthetic import healthy_and_faulty

from rackready.report.build import build_reports
from rackready.report.canonical import canonical_bytes, report_sha256, sign_report, verify_report
from rackready.report.errors import ReportError


@pytest.fixture()
def report(tmp_path: Path) -> Path:
    build_reports(healthy_and_faulty(tmp_path / "run"), {"json"})
    return tmp_path / "run" / "report" / "node-gpu02.json"


def test_canonical_form_is_sorted_compact_and_excludes_the_hash() -> None:
    doc = {"b": 1, "a": "é", "sha256": "x"}
    assert canonical_bytes(doc) == '{"a":"é","b":1}'.encode()
    assert report_sha256(doc) == hashlib.sha256('{"a":"é","b":1}'.encode()).hexdigest()


def test_written_report_verifies_with_a_plain_json_recompute(report: Path) -> None:
    assert verify_report(report)
    doc = json.loads(report.read_text())
    want = doc.pop("sha256")
    body = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert hashlib.sha256(body.encode()).hexdigest() == want


def test_any_edit_breaks_verification(report: Path) -> None:
    doc = json.loads(report.read_text())
    doc["outcome"] = "PASS"
    report.write_text(json.dumps(doc))
    assert not verify_report(report)
    with pytest.raises(ReportError, match="refusing to sign"):
        sign_report(report, "A. Operator")


def test_sign_records_operator_and_reseals(report: Path) -> None:
    before = json.loads(report.read_text())["sha256"]
    sign_report(report, "  Dana Tech  ", when=datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc))
    doc = json.loads(report.read_text())
    assert doc["signoff"]["name"] == "Dana Tech"
    assert doc["signoff"]["date"] == "2026-12-01T09:30:00Z"
    assert doc["sha256"] != before and verify_report(report)
    with pytest.raises(ReportError, match="already signed by Dana Tech"):
        sign_report(report, "Someone Else")


def test_sign_needs_a_name_and_a_report(report: Path, tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="operator's name"):
        sign_report(report, " ")
    with pytest.raises(ReportError, match="not found"):
        verify_report(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text("[]")
    with pytest.raises(ReportError, match="not a rackready report"):
        verify_report(tmp_path / "other.json")
