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


def _random_value(rng, depth: int = 0):
    """A JSON value of the kinds reports hold, with the edges JCS cares about: floats of
    every magnitude (random bit patterns), integer-valued floats, controls, quotes,
    non-ASCII text and keys, nesting."""
    import math

    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        while True:
            f = struct.unpack(">d", rng.getrandbits(64).to_bytes(8, "big"))[0]
            if math.isfinite(f):
                return f
    if kind == 1:
        return rng.choice([0.0, -0.0, 662.0, 1e16, 2.0**53, 1e21, 1e-4, 9.99e-5, 1e-7,
                           0.1, 1e15 + 0.5, -3.5e-9, 123.456])
    if kind == 2:
        return rng.randint(-(2**53) + 1, 2**53 - 1)
    if kind == 3:
        return "".join(rng.choice('ab"\\\n\t\x00\x1f\x7f é€\u2028😀<') for _ in range(8))
    if kind == 4:
        return rng.choice([True, False, None])
    if kind == 5:
        return rng.choice(["", "gpu.temperature", "H200 sustained bf16 662"])
    if kind in (6, 7):
        return {"".join(rng.choice("abzé€A_\x01\ufb33") for _ in range(rng.randint(0, 4))):
                _random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]


def test_the_json_module_path_writes_exactly_what_rfc8785_writes(report: Path) -> None:
    """canonical_bytes writes plain documents through the json module's C encoder; its bytes
    must be rfc8785's, on real reports and on random documents full of edge values."""
    import random

    import rfc8785

    from rackready.report.seal.canonical import _through_json_module

    for path in sorted(report.parent.glob("*.json")):
        doc = json.loads(path.read_text())
        fast = _through_json_module(doc)
        assert fast is not None, path.name  # a report takes the fast path
        assert fast == rfc8785.dumps(doc), path.name
    rng = random.Random(8785)
    taken = 0
    for _ in range(3000):
        value = _random_value(rng)
        fast = _through_json_module(value)
        assert canonical_bytes(value) == rfc8785.dumps(value), value
        if fast is not None:
            assert fast == rfc8785.dumps(value), value
            taken += 1
    assert taken > 2000  # most take the fast path; the rest fall back to rfc8785


@pytest.mark.parametrize("value", [
    {"\U0001f600": 1, "\ufb33": 2},  # a key past U+FFFF: JCS sorts UTF-16 units
    [2**60],  # past 2**53: rfc8785 refuses it
    ["\ud800"],  # a lone surrogate: no UTF-8 form
    (1, 2),  # not a JSON type of the json module's own
    [float("nan")],
])
def test_what_the_json_module_path_cannot_write_goes_to_rfc8785(value) -> None:
    from rackready.report.seal.canonical import _through_json_module

    assert _through_json_module(value) is None
