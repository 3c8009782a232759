"""Canonical bytes (RFC 8785) and the report hash."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest
from test_report_synthetic import healthy_and_faulty

from rackready.report.build import build_reports
from rackready.report.errors import ReportError
from rackready.report.seal.canonical import (
    canonical_bytes,
    read_report,
    report_sha256,
    seal,
    verify_report,
)

# RFC 8785 Appendix B: IEEE-754 binary64 (hex) -> the ECMAScript number text.
APPENDIX_B = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.fixture()
def report(tmp_path: Path) -> Path:
    build_reports(healthy_and_faulty(tmp_path / "run"), {"json"})
    return tmp_path / "run" / "report" / "node-gpu02.json"


@pytest.mark.parametrize(("bits", "text"), APPENDIX_B)
def test_rfc8785_appendix_b_numbers(bits: str, text: str) -> None:
    assert canonical_bytes(struct.unpack(">d", bytes.fromhex(bits))[0]) == text.encode()


def test_rfc8785_section_3_2_2_example() -> None:
    # The input of RFC 8785 3.2.2, as a JSON text, and its published canonical output.
    given = json.loads(r'''{
      "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
      "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
      "literals": [null, true, false]
    }''')
    want = ('{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
            '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}')
    assert canonical_bytes(given) == want.encode("utf-8")


def test_rfc8785_section_3_2_3_sorts_keys_by_utf16_code_units() -> None:
    given = json.loads(r'''{"\u20ac": "Euro Sign", "\r": "Carriage Return",
      "\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One",
      "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control",
      "\u00f6": "Latin Small Letter O With Diaeresis"}''')
    order = [v for v in json.loads(canonical_bytes(given)).values()]
    assert order == ["Carriage Return", "One", "Control", "Latin Small Letter O With Diaeresis",
                     "Euro Sign", "Emoji: Grinning Face", "Hebrew Letter Dalet With Dagesh"]
    # Code-point order (Python's sort_keys) puts the emoji last: JCS differs on purpose.
    assert list(json.loads(json.dumps(given, sort_keys=True)))[-1] == "\U0001f600"


@pytest.mark.parametrize(("value", "where"), [
    ({"a": [1, {"b": float("nan")}]}, "a/1/b is nan"),
    ({"loss": float("inf")}, "loss is inf"),
    ({"n": -float("inf")}, "n is -inf"),
    ({"big": 2**53}, "big is 9007199254740992, beyond"),
])
def test_values_without_a_json_form_are_refused_with_their_place(value, where: str) -> None:
    with pytest.raises(ReportError, match="no canonical JSON form: " + where):
        report_sha256(value)


def test_hash_leaves_out_sha256_and_signoff() -> None:
    doc = {"b": 1.0, "a": "é", "sha256": "x", "signoff": {"name": "anyone"}}
    assert canonical_bytes({k: doc[k] for k in ("a", "b")}) == '{"a":"é","b":1}'.encode()
    assert report_sha256(doc) == hashlib.sha256('{"a":"é","b":1}'.encode()).hexdigest()
    # Signing fills the signoff: the hash (and so the rack's chain) stays the same.
    assert seal(doc)["sha256"] == seal({**doc, "signoff": {"name": "other"}})["sha256"]
    assert seal(doc)["sha256"] != seal({**doc, "a": "e"})["sha256"]


def test_written_report_verifies_with_an_independent_recompute(report: Path) -> None:
    import rfc8785

    assert verify_report(report)
    doc = json.loads(report.read_text())
    body = {k: v for k, v in doc.items() if k not in ("sha256", "signoff")}
    assert hashlib.sha256(rfc8785.dumps(body)).hexdigest() == doc["sha256"]


def test_any_edit_breaks_the_hash(report: Path) -> None:
    doc = json.loads(report.read_text())
    doc["hostname"] = "gpu99.lab"
    report.write_text(json.dumps(doc))
    assert not verify_report(report)


def test_missing_and_foreign_files_are_report_errors(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="not found"):
        verify_report(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text("[]")
    with pytest.raises(ReportError, match="not a rackready report"):
        read_report(tmp_path / "other.json")
