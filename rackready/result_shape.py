"""A node's result.json brought to the shape the controller reads, or the node is incomplete.

What a node sends is untrusted. A broken or hostile node can put any JSON under any key.
The judge and the reports assume types: a label value must be hashable, a unit must be a
string, an artifact digest must be hex. So every part is checked here, once, as it is
read (rundir.read_result and the event-stream rebuild). A part of the wrong type is
replaced by the value that cannot pass: a measurement value by null (judged "could not
be read"), a check with no name or an unknown status is left out (so it is missing).
Each replacement is recorded as a problem starting with MALFORMED, and the controller
then judges the node INCOMPLETE (rackready.judging._decide). One node's bad data never
stops the judging or the reports of the others, and never reads as a pass.

Keys the controller does not read (the node's own verdicts and thresholds) are dropped:
the controller judges against its own copy of the profile.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rackready.sanitize import one_line

MALFORMED = "result.json malformed"
CHECK_STATUSES = ("ok", "skipped", "error", "timeout", "interrupted")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_TEXT_KEYS = ("run_id", "node", "hostname", "profile", "level", "started", "finished",
              "resumed_at", "nonce")
OUTCOMES = ("PASS", "FAIL", "INCOMPLETE", "PARTIAL")
_MAX_DETAILS = 5  # problems named one by one; the rest are counted


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, where: str, why: str) -> None:
        self.items.append(f"{MALFORMED}: {where} {why}")

    def lines(self) -> list[str]:
        if len(self.items) <= _MAX_DETAILS:
            return self.items
        rest = len(self.items) - _MAX_DETAILS
        return [*self.items[:_MAX_DETAILS], f"{MALFORMED}: {rest} more part(s) replaced"]


def _name(text: str) -> str:
    """A node's key or name inside a problem line: one clean, short line."""
    return one_line(str(text), 60)


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "text", bool: "a boolean",
            type(None): "null"}.get(type(v), "a number")


def is_scalar(v: Any) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    return v is None or isinstance(v, str | int | bool)


def _text(v: Any, where: str, p: _Problems, default: str | None = None) -> str | None:
    if v is None or isinstance(v, str):
        return v if v is not None else default
    p.add(where, f"is {_kind(v)}, not text")
    return default


def _object(data: dict[str, Any], key: str, p: _Problems) -> dict[str, Any]:
    """data[key] when it is an object; {} when absent or (said as a problem) not one."""
    v = data.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        p.add(key, f"is {_kind(v)}, not an object")
        return {}
    return v


def _labels(v: Any, where: str, p: _Problems) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        p.add(where, f"is {_kind(v)}, not an object")
        return {}
    out = {}
    for k, x in v.items():
        if x is not None and is_scalar(x):
            out[k] = str(x)
        else:
            p.add(f"{where}.{_name(k)}", f"is {_kind(x)}, not a label value")
    return out


def _measurement(m: Any, where: str, p: _Problems) -> dict[str, Any] | None:
    if not isinstance(m, dict) or not isinstance(m.get("name"), str) or not m["name"]:
        p.add(where, "has no metric name")
        return None
    value = m.get("value")
    if not is_scalar(value):
        p.add(f"{where}.value", f"is {_kind(value)}, not a number, text, boolean or null")
        value = None
    return {
        "name": m["name"],
        "value": value,
        "unit": _text(m.get("unit"), f"{where}.unit", p, "") or "",
        "labels": _labels(m.get("labels"), f"{where}.labels", p),
        "artifact": _text(m.get("artifact"), f"{where}.artifact", p),
    }


def _check(c: Any, where: str, p: _Problems) -> dict[str, Any] | None:
    if not isinstance(c, dict) or not isinstance(c.get("check"), str) or not c["check"]:
        p.add(where, "has no check name")
        return None
    where = f"checks[{_name(c['check'])}]"
    if c.get("status") not in CHECK_STATUSES:
        p.add(f"{where}.status", f"{_name(repr(c.get('status')))} is not one of "
                                 f"{', '.join(CHECK_STATUSES)}")
        return None
    dur = c.get("duration_s", 0.0)
    if isinstance(dur, bool) or not isinstance(dur, int | float) or not is_scalar(dur) or dur < 0:
        p.add(f"{where}.duration_s", "is not a number of seconds")
        dur = 0.0
    raw_ms = c.get("measurements", [])
    if not isinstance(raw_ms, list):
        p.add(f"{where}.measurements", f"is {_kind(raw_ms)}, not a list")
        raw_ms = []
    ms = [m for i, raw in enumerate(raw_ms)
          if (m := _measurement(raw, f"{where}.measurements[{i}]", p)) is not None]
    needs = c.get("needs", [])
    if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
        p.add(f"{where}.needs", "is not a list of names")
        needs = [n for n in needs if isinstance(n, str)] if isinstance(needs, list) else []
    return {"check": c["check"], "status": c["status"], "duration_s": float(dur),
            "measurements": ms, "message": _text(c.get("message"), f"{where}.message", p, "")
            or "", "needs": needs}


def conform_result(data: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """The result in the controller's shape; what had to be replaced goes to `problems`."""
    p = _Problems()
    out: dict[str, Any] = {"schema_version": None if data.get("schema_version") is None
                           else str(data["schema_version"])}
    for key in _TEXT_KEYS:
        out[key] = _text(data.get(key), key, p)
    claimed = data.get("outcome")
    if claimed is not None and claimed not in OUTCOMES:
        p.add("outcome", f"{_name(repr(claimed))} is not one of {', '.join(OUTCOMES)}")
        claimed = None
    out["outcome"] = claimed
    sim = data.get("simulated", False)
    if not isinstance(sim, bool):
        p.add("simulated", f"is {_kind(sim)}, not a boolean; read as simulated")
        sim = True  # a report never claims real hardware on a flag it cannot read
    out["simulated"] = sim
    digest = data.get("bundle_sha256")
    if digest is not None and not (isinstance(digest, str) and _SHA256.match(digest)):
        p.add("bundle_sha256", "is not a SHA-256 digest")
        digest = None
    out["bundle_sha256"] = digest
    only = data.get("only")
    if only is not None and not (isinstance(only, list) and all(isinstance(c, str) for c in only)):
        p.add("only", "is not a list of check names")
        only = None
    out["only"] = only
    out["scope"] = _object(data, "scope", p)
    out["tool_versions"] = {}
    for k, v in _object(data, "tool_versions", p).items():
        if is_scalar(v):
            out["tool_versions"][k] = v
        else:
            p.add(f"tool_versions.{_name(k)}", f"is {_kind(v)}, not a version")
    out["inventory"] = _object(data, "inventory", p)
    out["artifacts"] = {}
    arts = _object(data, "artifacts", p)
    for rel, digest in arts.items():
        if isinstance(digest, str) and _SHA256.match(digest):
            out["artifacts"][rel] = digest
        else:
            p.add(f"artifacts[{_name(rel)}]", "is not a SHA-256 digest")
    checks = data.get("checks")
    if not isinstance(checks, list):
        # judging says it once ("result.json has no list of checks"); nothing to conform
        out["checks"] = checks
    else:
        out["checks"] = [c for i, raw in enumerate(checks)
                         if (c := _check(raw, f"checks[{i}]", p)) is not None]
    problems.extend(p.lines())
    return out
