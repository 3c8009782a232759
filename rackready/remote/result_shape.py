"""A node's result.json brought to the shape the controller reads, or the node is incomplete.

What a node sends is untrusted. A broken or hostile node can put any JSON under any key.
The judge and the reports assume types: a label value must be hashable, a unit must be a
string, an artifact digest must be hex. So every part is checked here, once, as it is
read (rundir.read_result and the event-stream rebuild). A part of the wrong type is
replaced by the value that cannot pass: a measurement value by null (judged "could not
be read"), a check with no name or an unknown status is left out (so it is missing).
Each replacement is recorded as a problem starting with MALFORMED, and the controller
then judges the node INCOMPLETE (rackready.decide.outcome._decide). One node's bad data never
stops the judging or the reports of the others, and never reads as a pass.

Keys the controller does not read (the node's own verdicts and thresholds) are dropped:
the controller judges against its own copy of the profile.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, overload

from rackready.sanitize import one_line

MALFORMED = "result.json malformed"
CHECK_STATUSES = ("ok", "skipped", "error", "timeout", "interrupted")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_TEXT_KEYS = ("run_id", "node", "hostname", "profile", "level", "started", "finished",
              "nonce")
OUTCOMES = ("PASS", "FAIL", "INCOMPLETE", "PARTIAL")
_MAX_DETAILS = 5  # problems named one by one; the rest are counted
# No figure a node measures comes near 1e18 in its unit (bytes, FLOP/s in TFLOPS, counts,
# seconds); past it a value is a lie or an overflow that every renderer, canonical form
# and statistic would have to survive. The report schema bounds its numbers by the same.
VALUE_BOUND = 1e18


@dataclass(frozen=True)
class ResultCaps:
    """How much one node's result may hold: bytes are capped by the fetch, counts here.

    Past a cap the rest is dropped (a text cut) and named as a MALFORMED problem, so the
    node is INCOMPLETE and the judge and reports only ever see a bounded result. Measured
    on tests/fixtures/h200x2-quick-result.json.gz (2 GPUs, quick): 27 checks, 677
    measurements, 264 in one check (gemm_burnin), at most 7 labels, the longest text 331
    characters, the longest check message 49; an 8-GPU standard run holds a few thousand
    measurements. Each cap is 10-100x that. What the reports cost per measurement
    (about 0.5 ms and 6 KB of memory for the JSON reports alone) is why the total is not
    higher: 100 000 measurements take about a minute and well under a GB.
    """

    checks: int = 500
    measurements_per_check: int = 50_000
    measurements: int = 100_000  # all checks together
    labels: int = 32  # per measurement
    text_chars: int = 1024  # a check or metric name, unit, label key or value, version
    message_chars: int = 16 << 10  # a check's message
    events: int = 200_000  # events streamed live, or read back from events.jsonl
    json_values: int = 4_000_000  # values one result.json may parse into (bounds memory)
    # the live stream, capped like result.json: its events together hold at most
    # json_values values; one event at most event_values (counted as commas and brackets:
    # the fixture's largest check_finished, gemm_burnin's 264 measurements, holds 2 361;
    # 26 lab runs of 8 simulated GPUs, quick and standard: at most 5 844 in one event,
    # 60 542 in all; a 1 MiB line of real measurements about 60 000), nested at most event_depth
    # containers (a real one: 5), no text (nor key) longer than message_chars
    event_values: int = 100_000
    event_depth: int = 16


CAPS = ResultCaps()


class _Problems:
    """The problems found, the first few named (a result can hold millions of bad parts),
    and what is left of the caps while the result is walked."""

    def __init__(self, caps: ResultCaps) -> None:
        self.items: list[str] = []
        self.count = 0
        self.over_caps: dict[str, str] = {}  # the first problem per cap passed
        self.caps = caps
        self.measurements_left = caps.measurements

    def add(self, where: str, why: str) -> None:
        self.count += 1
        if len(self.items) < _MAX_DETAILS:
            self.items.append(f"{MALFORMED}: {where} {why}")

    def over(self, cap: str, where: str, why: str) -> None:
        """A count cap passed: always named (first, so it is the node's outcome reason)."""
        self.over_caps.setdefault(cap, f"{MALFORMED}: {where} {why}")

    def lines(self) -> list[str]:
        rest = self.count - len(self.items)
        more = [f"{MALFORMED}: {rest} more part(s) replaced"] if rest else []
        return [*self.over_caps.values(), *self.items, *more]

    @overload
    def cut(self, v: str, where: str, limit: int | None = None) -> str: ...
    @overload
    def cut(self, v: None, where: str, limit: int | None = None) -> None: ...
    @overload
    def cut(self, v: str | None, where: str, limit: int | None = None) -> str | None: ...

    def cut(self, v: str | None, where: str, limit: int | None = None) -> str | None:
        limit = limit or self.caps.text_chars
        if v is None or len(v) <= limit:
            return v
        self.over(f"text{limit}", where, f"is {len(v)} characters, over the cap of {limit}; "
                                         "cut")
        return v[:limit]


def _name(text: str) -> str:
    """A node's key or name inside a problem line: one clean, short line."""
    return one_line(str(text), 60)


def _shown(v: int | float) -> str:
    """A huge number in a problem line (a 400-digit integer has no float form)."""
    if isinstance(v, int) and len(str(abs(v))) > 20:
        return f"an integer of {len(str(abs(v)))} digits"
    return f"{v:.4g}"


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "text", bool: "a boolean",
            type(None): "null"}.get(type(v), "a number")


def is_scalar(v: Any) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    return v is None or isinstance(v, str | int | bool)


def _text(v: Any, where: str, p: _Problems, default: str | None = None,
          limit: int | None = None) -> str | None:
    if v is None or isinstance(v, str):
        return p.cut(v, where, limit) if v is not None else default
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
    if len(v) > p.caps.labels:
        p.over("labels", where, f"has {len(v)} labels, over the cap of {p.caps.labels}; "
                                "the rest dropped")
    out = {}
    for k, x in list(v.items())[: p.caps.labels]:
        if x is not None and is_scalar(x):
            key = p.cut(k, f"{where} key {_name(k)}")
            out[key] = p.cut(str(x), f"{where}.{_name(k)}")
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
    if isinstance(value, str):
        value = p.cut(value, f"{where}.value")
    elif isinstance(value, int | float) and not isinstance(value, bool) \
            and abs(value) > VALUE_BOUND:
        p.add(f"{where}.value", f"{_shown(value)} is beyond +-{VALUE_BOUND:g}, no figure a "
                                "node measures; read as not measured")
        value = None
    return {
        "name": p.cut(m["name"], f"{where}.name"),
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
    name = p.cut(c["check"], where)
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
    raw_ms = _capped(raw_ms, f"{where}.measurements", p)
    ms = [m for i, raw in enumerate(raw_ms)
          if (m := _measurement(raw, f"{where}.measurements[{i}]", p)) is not None]
    needs = _texts(c.get("needs", []), f"{where}.needs", "needs", p, "names")
    message = _text(c.get("message"), f"{where}.message", p, "", p.caps.message_chars)
    return {"check": name, "status": c["status"], "duration_s": float(dur),
            "measurements": ms, "message": message or "", "needs": needs}


def _texts(v: Any, where: str, cap: str, p: _Problems, noun: str = "text") -> list[str]:
    """A list of short texts (a check's needs, a resumed run's resume times): what is not
    text is left out, and past the labels cap the rest is dropped; either is a problem."""
    if not isinstance(v, list) or not all(isinstance(n, str) for n in v):
        p.add(where, f"is not a list of {noun}")
        v = [n for n in v if isinstance(n, str)] if isinstance(v, list) else []
    if len(v) > p.caps.labels:
        p.over(cap, where, f"has {len(v)} entries, over the cap of {p.caps.labels}; "
                           "the rest dropped")
    return [n for i, x in enumerate(v[: p.caps.labels])
            if (n := p.cut(x, f"{where}[{i}]")) is not None]


def _capped(raw_ms: list[Any], where: str, p: _Problems) -> list[Any]:
    """The measurements this check may keep: its own cap and what is left of the total."""
    per, left = p.caps.measurements_per_check, p.measurements_left
    if len(raw_ms) > min(per, left):
        cap = (f"the cap of {per} per check" if per <= left else
               f"the cap of {p.caps.measurements} for all checks together")
        p.over(cap, where, f"has {len(raw_ms)} entries, over {cap}; the rest dropped")
        raw_ms = raw_ms[: min(per, left)]
    p.measurements_left -= len(raw_ms)
    return raw_ms


def conform_result(data: dict[str, Any], problems: list[str],
                   caps: ResultCaps | None = None) -> dict[str, Any]:
    """The result in the controller's shape; what had to be replaced goes to `problems`.
    caps: the counts it may hold (CAPS when not given)."""
    p = _Problems(caps or CAPS)
    out: dict[str, Any] = {"schema_version": None if data.get("schema_version") is None
                           else str(data["schema_version"])}
    for key in _TEXT_KEYS:
        out[key] = _text(data.get(key), key, p)
    # a resumed run's: one time per resume (absent on a run that never stopped)
    if data.get("resumed_at") is not None:
        out["resumed_at"] = _texts(data["resumed_at"], "resumed_at", "resumed_at", p)
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
            out["tool_versions"][k] = p.cut(v, f"tool_versions.{_name(k)}") \
                if isinstance(v, str) else v
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
        if len(checks) > p.caps.checks:
            p.over("checks", "checks", f"has {len(checks)} entries, over the cap of "
                                       f"{p.caps.checks}; the rest dropped")
        out["checks"] = [c for i, raw in enumerate(checks[: p.caps.checks])
                         if (c := _check(raw, f"checks[{i}]", p)) is not None]
    problems.extend(p.lines())
    return out
