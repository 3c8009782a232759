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

What is read is the node's own schema (validation/schema/result.schema.json): its keys,
their types, the enums and digest patterns the controller holds. A key the schema gains is
read with no edit here. Where the controller reads otherwise (rebuilt runs, repairs, caps,
the node's verdicts dropped) is rackready.remote.result_overlay, and nowhere else.
"""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Any, overload

from rackready.remote.result_overlay import (
    AS_TEXT_OF_ANYTHING,
    DROPPED,
    HELD_PATTERNS,
    ITEM_CAPS,
    ITEM_NAMES,
    PASSED_WHOLE,
    READINGS,
    UNLISTED_AS_IS,
    VALUE_BOUND,
    Reading,
    ResultCaps,
)
from rackready.sanitize import one_line
from validation.result_schema import load_schema

__all__ = ["CAPS", "CHECK_STATUSES", "MALFORMED", "OUTCOMES", "VALUE_BOUND", "ResultCaps",
           "ResultSchema", "conform_result", "conform_with", "is_scalar"]

MALFORMED = "result.json malformed"
_MAX_DETAILS = 5  # problems named one by one; the rest are counted
CAPS = ResultCaps()  # read at each call: a test may narrow them


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


_MISSING: Any = object()  # a key the result does not have (a rebuilt run lacks many)
_OMIT: Any = object()  # a key left out of what is read
_DROP: Any = object()  # a list item left out (its name or a held enum unreadable)
_PLAIN = Reading()  # where the controller reads as the schema says


class ResultSchema:
    """The node's schema, as the controller reads it: $refs resolved, and what kind of
    reading each part takes (from its type; the overlay where the controller differs)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.root = schema
        self.kinds: dict[str, str] = {}
        self.keys: dict[str, list[tuple[str, dict[str, Any], str]]] = {}
        defs = schema.get("$defs", {})
        self.patterns = {defs[name]["pattern"]: noun for name, noun in HELD_PATTERNS.items()}

    def resolve(self, s: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in s:
            s = self.root["$defs"][s["$ref"].removeprefix("#/$defs/")]
        return s

    def said(self, s: dict[str, Any]) -> str:
        """What a part of a held pattern is called in a problem ("a SHA-256 digest")."""
        return self.patterns[self.resolve(s)["pattern"]]

    def fields(self, loc: str, s: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
        """An object's keys the controller reads, their schemas and places, once per place."""
        if loc not in self.keys:
            self.keys[loc] = [(key, sub, f"{loc}.{key}" if loc else key)
                              for key, sub in self.resolve(s)["properties"].items()
                              if loc or key not in DROPPED]
        return self.keys[loc]

    def kind_at(self, loc: str, s: dict[str, Any], rd: Reading) -> str:
        """kind, once per place (a result holds thousands of measurements)."""
        if loc not in self.kinds:
            self.kinds[loc] = self.kind(s, rd)
        return self.kinds[loc]

    def kind(self, s: dict[str, Any], rd: Reading) -> str:
        s = self.resolve(s)
        types = s.get("type", [])
        types = {types} if isinstance(types, str) else set(types)
        if "enum" in s:
            return "enum" if rd.also else "text"  # an enum the controller does not hold
        if s.get("pattern") in self.patterns:
            return "digest"
        if {"number", "string", "boolean"} <= types:
            return "scalar"
        if "array" in types:
            items = self.resolve(s.get("items", {})).get("type")
            if items in ("object", "string"):
                return "records" if items == "object" else "texts"
        elif "object" in types:  # keys of its own, or any keys of one schema
            return "map" if isinstance(s.get("additionalProperties"), dict) else "record"
        elif len(types - {"null"}) == 1:
            one = str(next(iter(types - {"null"})))
            if one in ("boolean", "number", "integer", "string"):
                return {"boolean": "flag", "string": "text"}.get(one, one)
        raise ValueError(f"the result schema has a part the controller cannot read: {s}")

    def held_enum(self, loc: str) -> tuple[str, ...]:
        """An enum the controller holds: the schema's values, then what it adds (after
        check_readable, which finds every place)."""
        parent = loc.rpartition(".")[0]
        sub = next(sub for _, sub, at in self.fields(parent, {}) if at == loc)
        return (*self.resolve(sub)["enum"], *READINGS[loc].also)

    def check_readable(self, loc: str = "", s: dict[str, Any] | None = None) -> None:
        """Every part the controller reads has a kind: a schema it cannot read fails when
        loaded, not on some node's result."""
        named = ITEM_NAMES.get(loc, ("",))[0]
        for key, sub, at in self.fields(loc, self.root if s is None else s):
            if at in AS_TEXT_OF_ANYTHING or at in PASSED_WHOLE or key == named:
                continue
            kind, sub = self.kind_at(at, sub, READINGS.get(at, _PLAIN)), self.resolve(sub)
            if kind in ("records", "record"):
                self.check_readable(f"{at}[]" if kind == "records" else at,
                                    sub["items"] if kind == "records" else sub)
            elif kind == "map":
                self.kind_at(f"{at}{{}}", sub["additionalProperties"], _PLAIN)


@cache
def _node_schema() -> ResultSchema:
    schema = ResultSchema(load_schema())
    schema.check_readable()
    return schema


CHECK_STATUSES = _node_schema().held_enum("checks[].status")
OUTCOMES = _node_schema().held_enum("outcome")


class _Reader:
    def __init__(self, schema: ResultSchema, p: _Problems) -> None:
        self.schema, self.p = schema, p

    def record(self, s: dict[str, Any], v: dict[str, Any], where: str, loc: str,
               named: str | None = None, named_at: str = "") -> dict[str, Any] | None:
        """An object of the schema's properties, in the schema's order; None when a held
        enum of a list item cannot be read (the item is left out)."""
        out: dict[str, Any] = {}
        for key, sub, at in self.schema.fields(loc, s):
            place = f"{where}.{key}" if where else key
            if key == named:  # the item's name, checked before: only cut
                out[key] = self.p.cut(v[key], named_at or place)
                continue
            got = self.read(sub, v.get(key, _MISSING), place, at, in_item=bool(loc))
            if got is _DROP:
                return None
            if got is not _OMIT:
                out[key] = got
        return out

    def read(self, s: dict[str, Any], v: Any, place: str, loc: str, in_item: bool) -> Any:
        p, rd = self.p, READINGS.get(loc, _PLAIN)
        if loc in AS_TEXT_OF_ANYTHING:
            return None if v is _MISSING or v is None else str(v)
        if loc in PASSED_WHOLE:
            return self.object(v, place)
        kind = self.schema.kind_at(loc, s, rd)
        s = self.schema.resolve(s)
        if kind == "text":
            limit = p.caps.message_chars if rd.message else None
            return _text(None if v is _MISSING else v, place, p, rd.default, limit)
        if kind == "enum":
            allowed = (*s["enum"], *rd.also)
            if v not in allowed and (in_item or v not in (None, _MISSING)):
                shown = repr(None if v is _MISSING else v)
                p.add(place, f"{_name(shown)} is not one of {', '.join(allowed)}")
                return _DROP if in_item else None
            return None if v is _MISSING else v
        if kind == "digest":
            if v is _MISSING or v is None:
                return None
            if self.digest(s, v):
                return v
            p.add(place, f"is not {self.schema.said(s)}")
            return None
        if kind == "flag":
            if v is _MISSING:
                return rd.default
            if not isinstance(v, bool):
                p.add(place, f"is {_kind(v)}, not a boolean{rd.unreadable_note}")
                return rd.unreadable
            return v
        if kind in ("number", "integer"):
            if v is _MISSING:
                return rd.default
            if isinstance(v, bool) or not isinstance(v, int | float) or not is_scalar(v) \
                    or v < s.get("minimum", -math.inf) \
                    or (kind == "integer" and not float(v).is_integer()):
                p.add(place, f"is not a number of {rd.noun}" if rd.noun else f"is not {kind}")
                return rd.unreadable
            return float(v) if kind == "number" else v
        if kind == "scalar":
            return self.scalar(None if v is _MISSING else v, place, rd)
        if kind == "texts":
            return self.texts(v, place, loc, rd)
        if kind == "records":
            return self.records(s, v, place, loc)
        if kind == "record":
            return self.record(s, self.object(v, place), place, loc)
        return self.map(s, v, place, loc, rd)

    def digest(self, s: dict[str, Any], v: Any) -> bool:
        return isinstance(v, str) and re.search(self.schema.resolve(s)["pattern"], v) is not None

    def scalar(self, v: Any, place: str, rd: Reading) -> Any:
        p = self.p
        if not is_scalar(v):
            p.add(place, f"is {_kind(v)}, not {rd.noun or 'a number, text, boolean or null'}")
            return None
        if isinstance(v, str):
            return p.cut(v, place)
        if rd.bounded and isinstance(v, int | float) and not isinstance(v, bool) \
                and abs(v) > VALUE_BOUND:
            p.add(place, f"{_shown(v)} is beyond +-{VALUE_BOUND:g}, no figure a node "
                         "measures; read as not measured")
            return None
        return v

    def texts(self, v: Any, place: str, loc: str, rd: Reading) -> Any:
        key = loc.rsplit(".", 1)[-1]
        if rd.when_present and (v is _MISSING or v is None):
            return _OMIT
        if rd.whole_or_null:
            if v is _MISSING or v is None:
                return None
            if isinstance(v, list) and all(isinstance(x, str) for x in v):
                return v
            self.p.add(place, f"is not a list of {rd.noun}")
            return None
        return _texts([] if v is _MISSING else v, place, key, self.p, rd.noun or "text")

    def object(self, v: Any, place: str) -> dict[str, Any]:
        """v when it is an object; {} when absent or (said as a problem) not one."""
        if v is _MISSING or v is None:
            return {}
        if not isinstance(v, dict):
            self.p.add(place, f"is {_kind(v)}, not an object")
            return {}
        return v

    def map(self, s: dict[str, Any], v: Any, place: str, loc: str, rd: Reading
            ) -> dict[str, Any]:
        """An object of any keys, each value read by additionalProperties; a wrong entry
        is left out."""
        p, entries = self.p, self.object(v, place)
        values = s["additionalProperties"]
        kind = self.schema.kind_at(f"{loc}{{}}", values, _PLAIN)
        if rd.counted and len(entries) > p.caps.labels:
            p.over("labels", place, f"has {len(entries)} labels, over the cap of "
                                    f"{p.caps.labels}; the rest dropped")
        out: dict[str, Any] = {}
        for k, x in list(entries.items())[: p.caps.labels] if rd.counted else entries.items():
            shown = _name(k)
            at = f"{place}[{shown}]" if rd.bracketed else f"{place}.{shown}"
            if kind == "digest":
                if not self.digest(values, x):
                    p.add(at, f"is not {self.schema.said(values)}")
                    continue
                got = x
            elif kind == "text" and rd.stringified:
                if x is None or not is_scalar(x):
                    p.add(at, f"is {_kind(x)}, not {rd.noun}")
                    continue
                got = p.cut(str(x), at)
            elif kind == "scalar":
                if not is_scalar(x):
                    p.add(at, f"is {_kind(x)}, not {rd.noun or 'a scalar'}")
                    continue
                got = p.cut(x, at) if isinstance(x, str) else x
            else:
                got = self.read(values, x, at, f"{loc}{{}}", in_item=False)
            out[p.cut(k, f"{place} key {shown}") if rd.counted else k] = got
        return out

    def records(self, s: dict[str, Any], v: Any, place: str, loc: str) -> Any:
        """A list of objects of one schema (checks, measurements), capped; an item without
        its name is left out."""
        p = self.p
        if not isinstance(v, list):
            if loc in UNLISTED_AS_IS:
                return None if v is _MISSING else v
            if v is not _MISSING:
                p.add(place, f"is {_kind(v)}, not a list")
            v = []
        cap = ITEM_CAPS.get(loc)
        if cap == "measurements_per_check":
            v = _capped(v, place, p)
        elif cap is not None:
            limit = getattr(p.caps, cap)
            if len(v) > limit:
                p.over(cap, place, f"has {len(v)} entries, over the cap of {limit}; "
                                   "the rest dropped")
            v = v[:limit]
        item_loc = f"{loc}[]"
        key, noun, named_by_it = ITEM_NAMES[item_loc]
        out = []
        for i, raw in enumerate(v):
            where = f"{place}[{i}]"
            if not isinstance(raw, dict) or not isinstance(raw.get(key), str) or not raw[key]:
                p.add(where, f"has no {noun}")
                continue
            if named_by_it:
                where = f"{place}[{_name(raw[key])}]"
            got = self.record(s["items"], raw, where, item_loc, named=key,
                              named_at=where if named_by_it else "")
            if got is not None:
                out.append(got)
        return out


def conform_result(data: dict[str, Any], problems: list[str],
                   caps: ResultCaps | None = None) -> dict[str, Any]:
    """The result in the controller's shape; what had to be replaced goes to `problems`.
    caps: the counts it may hold (CAPS when not given)."""
    return conform_with(_node_schema(), data, problems, caps)


def conform_with(schema: ResultSchema, data: dict[str, Any], problems: list[str],
                 caps: ResultCaps | None = None) -> dict[str, Any]:
    """conform_result under a given schema (a test shows a key the schema gains is read)."""
    p = _Problems(caps or CAPS)
    out = _Reader(schema, p).record(schema.root, data, "", "")
    assert out is not None  # only a list item is ever left out
    problems.extend(p.lines())
    return out
