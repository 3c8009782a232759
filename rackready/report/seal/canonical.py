"""Canonical bytes and the report hash.

Canonical form: RFC 8785, the JSON Canonicalization Scheme (JCS), through the
maintained `rfc8785` package: keys sorted by UTF-16 code units, no whitespace,
numbers in ECMAScript form (662.0 -> 662, 1e21 -> 1e+21), UTF-8. Any JCS
implementation in any language gives the same bytes; Python's json.dumps alone does
not (float repr, key order outside the BMP), so it writes only the documents where
those differences are handled (_through_json_module: every report, much faster) and
rfc8785 the rest. NaN, Infinity and integers beyond 2**53-1 have no JCS form and are
refused with the place they occur.

Reports are read through load_json: nesting deeper than MAX_DEPTH is refused before the
parser sees it (a file nested 100,000 deep would otherwise end the verify in a
RecursionError, in the parser or in any of the recursive walks after it).

A report's "sha256" is the SHA-256 of the canonical bytes of the report without
its "sha256" and "signoff" keys. Leaving the signoff out keeps the hash (and the
rack report's list of node hashes) unchanged when a report is signed; the
signature itself covers the hash and the signoff (see signing.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
from pathlib import Path
from typing import Any

import rfc8785

from rackready.report.errors import ReportError

# Keys left out of the hashed body (docs/signing.md, "What is covered").
HASH_EXCLUDED = ("sha256", "signoff")
SAFE_INT = 2**53 - 1
# a report is 6 levels deep (measured on the lab's node and rack reports); every walk of
# a document (the parser, _plain, _first_bad, rfc8785) recurses once per level, under
# Python's default limit of 1000
MAX_DEPTH = 64
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")

SIGNOFF_STATEMENT = (
    "I have reviewed this acceptance report and confirm that it reflects the tests run "
    "on the hardware identified above."
)


def _first_bad(value: Any, where: str) -> str | None:
    """Where value holds something JCS cannot write, and what (None: nothing found)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where or '<root>'} is {value!r}; JSON has no NaN or Infinity"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > SAFE_INT:
        return f"{where or '<root>'} is {value}, beyond JSON's exact integer range (2**53-1)"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{where or '<root>'} holds text that is not valid Unicode"
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{where or '<root>'} has a non-text key {k!r}"
            found = _first_bad(v, f"{where}/{k}" if where else k)
            if found:
                return found
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = _first_bad(v, f"{where}/{i}" if where else str(i))
            if found:
                return found
    return None


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 bytes of any JSON value; a value with no JSON form is a ReportError."""
    fast = _through_json_module(value)
    if fast is not None:
        return fast
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as e:
        raise ReportError(f"no canonical JSON form: {_first_bad(value, '') or e}") from None


class _NotPlain(Exception):
    """The value holds something only rfc8785 writes right (or refuses)."""


def _through_json_module(value: Any) -> bytes | None:
    """The same RFC 8785 bytes through the json module's C encoder, or None.

    rfc8785 writes in pure Python: about 0.2 s for an 8-GPU node report, hashed at every
    build and verify. json.dumps (sorted keys, no whitespace, no ASCII escaping) writes the
    same text for strings (JCS escapes only '"', '\\' and controls, as \\b \\t \\n
    \\f \\r or lowercase \\u00xx), integers, booleans and null, and sorts the same keys
    unless a key holds a character beyond U+FFFF (JCS sorts UTF-16 units). Floats differ:
    an integer-valued float is written here as that integer (JCS: 662.0 -> 662), any other
    is left to rfc8785 itself where Python's repr is not JCS's form (below 1e-4: 1e-05
    against 0.00001), through a placeholder. Anything else (other types, NaN, integers
    past 2**53, lone surrogates) is None: the caller takes the rfc8785 path, which writes
    it or says what is wrong. tests/unit/report/test_report_canonical.py holds the two
    paths to the same bytes."""
    odd: list[float] = []
    token = secrets.token_hex(16)
    try:
        plain = _plain(value, odd, token)
        text = json.dumps(plain, ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                          allow_nan=False)
        if odd:
            if text.count(token) != len(odd):
                return None
            text = re.sub(f'"{token}(\\d+)"',
                          lambda m: rfc8785.dumps(odd[int(m.group(1))]).decode(), text)
        return text.encode("utf-8")
    except (_NotPlain, ValueError, UnicodeEncodeError, RecursionError):
        return None


def _plain(v: Any, odd: list[float], token: str) -> Any:
    t = type(v)
    if t is str or t is bool or v is None:
        return v
    if t is int:
        if -SAFE_INT <= v <= SAFE_INT:
            return v
        raise _NotPlain
    if t is float:
        if not math.isfinite(v):
            raise _NotPlain
        if v.is_integer():
            if -SAFE_INT <= v <= SAFE_INT:
                return int(v)
        elif abs(v) >= 1e-4:  # repr's fixed notation, JCS's digits (a fraction is < 2**53)
            return v
        odd.append(v)
        return f"{token}{len(odd) - 1}"
    if t is dict:
        out = {}
        for k, x in v.items():
            if type(k) is not str or (not k.isascii() and max(k) > "\uffff"):
                raise _NotPlain
            out[k] = _plain(x, odd, token)
        return out
    if t is list:
        return [_plain(x, odd, token) for x in v]
    raise _NotPlain


def json_depth(text: str) -> int:
    """How deep the JSON text's arrays and objects nest (brackets outside strings)."""
    deepest = depth = 0
    for m in _BRACKET.finditer(_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def load_json(text: str, **kwargs: Any) -> Any:
    """json.loads for a document to verify: deeper than MAX_DEPTH is a ValueError naming
    the cap, never a RecursionError (kwargs: json.loads's, e.g. object_pairs_hook)."""
    depth = json_depth(text)
    if depth > MAX_DEPTH:
        raise ValueError(f"nested {depth} levels deep, more than the {MAX_DEPTH} a report "
                         "may have")
    try:
        return json.loads(text, **kwargs)
    except RecursionError:  # a bracket the scan misread: still one line, never a traceback
        raise ValueError(f"nested more than the {MAX_DEPTH} levels a report may have"
                         ) from None


def hashed_body(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in HASH_EXCLUDED}


def report_sha256(doc: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_bytes(hashed_body(doc))).hexdigest()


def seal(doc: dict[str, Any]) -> dict[str, Any]:
    """Return the document with its sha256 field set (over everything but sha256/signoff)."""
    sealed = {k: v for k, v in doc.items() if k != "sha256"}
    sealed["sha256"] = report_sha256(sealed)
    return sealed


def empty_signoff() -> dict[str, Any]:
    return {"name": None, "date": None, "statement": SIGNOFF_STATEMENT}


def write_report(path: Path, doc: dict[str, Any]) -> None:
    # Pretty on disk for people; the hash is over the canonical form, not these bytes.
    # Written whole then renamed, so an interrupted write never leaves half a report.
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False,
                              allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_report(path: Path) -> dict[str, Any]:
    try:
        doc = load_json(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportError(f"report not found: {path}") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ReportError(f"{path}: not a readable report JSON ({e})") from None
    if not isinstance(doc, dict) or "sha256" not in doc or "signoff" not in doc:
        raise ReportError(f"{path}: not a rackready report (no sha256/signoff)")
    return doc


def verify_report(path: Path) -> bool:
    """True when the file's sha256 matches its canonical content (no signature check)."""
    doc = read_report(path)
    return doc.get("sha256") == report_sha256(doc)
