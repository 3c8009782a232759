"""Integrity and sign-off: a SHA-256 over the report's canonical JSON.

Canonical form: the report object without its "sha256" key, serialised with
sorted keys, no whitespace, UTF-8 (non-ASCII kept as is). A customer can
recompute it with any JSON library:

    python3 -c 'import json,hashlib,sys; d=json.load(open(sys.argv[1])); s=d.pop("sha256");
    print(hashlib.sha256(json.dumps(d,sort_keys=True,separators=(",",":"),
    ensure_ascii=False).encode()).hexdigest()==s)' report.json
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rackready.report.errors import ReportError

SIGNOFF_STATEMENT = (
    "I have reviewed this acceptance report and confirm that it reflects the tests run "
    "on the hardware identified above."
)


def canonical_bytes(doc: dict[str, Any]) -> bytes:
    body = {k: v for k, v in doc.items() if k != "sha256"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def report_sha256(doc: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_bytes(doc)).hexdigest()


def seal(doc: dict[str, Any]) -> dict[str, Any]:
    """Return the document with its sha256 field set (over everything else)."""
    sealed = {k: v for k, v in doc.items() if k != "sha256"}
    sealed["sha256"] = report_sha256(sealed)
    return sealed


def empty_signoff() -> dict[str, Any]:
    return {"name": None, "date": None, "statement": SIGNOFF_STATEMENT}


def write_report(path: Path, doc: dict[str, Any]) -> None:
    # Pretty on disk for people; the hash is over the canonical form, not these bytes.
    path.write_text(json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                    encoding="utf-8")


def read_report(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportError(f"report not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReportError(f"{path}: not a readable report JSON ({e})") from None
    if not isinstance(doc, dict) or "sha256" not in doc or "signoff" not in doc:
        raise ReportError(f"{path}: not a rackready report (no sha256/signoff)")
    return doc


def verify_report(path: Path) -> bool:
    """True when the file's sha256 matches its canonical content."""
    doc = read_report(path)
    return doc.get("sha256") == report_sha256(doc)


def sign_report(path: Path, operator: str, when: datetime | None = None) -> None:
    """Record the operator's sign-off and reseal; refuses a tampered or signed report."""
    operator = operator.strip()
    if not operator:
        raise ReportError("sign-off needs the operator's name")
    doc = read_report(path)
    if doc["sha256"] != report_sha256(doc):
        raise ReportError(f"{path}: content does not match its sha256; refusing to sign")
    signoff = doc.get("signoff") or empty_signoff()
    if signoff.get("name"):
        raise ReportError(f"{path}: already signed by {signoff['name']} on {signoff['date']}")
    stamp = (when or datetime.now(timezone.utc)).astimezone(timezone.utc)
    doc["signoff"] = {**signoff, "name": operator,
                      "date": stamp.isoformat(timespec="seconds").replace("+00:00", "Z")}
    write_report(Path(path), seal(doc))
