"""result.json against its schema (validation/schema/result.schema.json), stdlib only.

The schema is JSON Schema draft 2020-12 and the contract for what `validation run` writes.
A node has no jsonschema package (roles/validation_tools/files/node-requirements.txt), so
this module applies the part of 2020-12 the schema uses: type, enum, required,
properties, additionalProperties, items, anyOf, $ref into $defs, pattern, minLength,
minimum. A schema that uses any other keyword is refused when loaded, so the schema can
not outgrow this checker unnoticed (the tests also check the schema, and the same
documents, with jsonschema's own Draft202012Validator).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_FILE = Path(__file__).parent / "schema" / "result.schema.json"

# what a schema may say: keywords this module applies, and annotations it may ignore
APPLIED = frozenset({"type", "enum", "required", "properties", "additionalProperties",
                     "items", "anyOf", "$ref", "pattern", "minLength", "minimum"})
ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "title", "description", "$comment"})

_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    # 2020-12: a number with a zero fractional part is an integer (1.0 too)
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
}


class SchemaError(ValueError):
    """The schema itself uses what this checker cannot apply."""


@cache
def load_schema() -> dict[str, Any]:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    _check_keywords(schema, "#")
    return schema


def check_result(doc: Any, schema: dict[str, Any] | None = None) -> list[str]:
    """Every way doc breaks the result schema, one 'path: problem' line each (path: the
    keys and list indexes from the top, '/'-joined; '<root>' for the document itself).
    Empty when doc is a valid result.json."""
    root = schema if schema is not None else load_schema()
    if schema is not None:
        _check_keywords(schema, "#")
    out: list[str] = []
    _Walk(root, out).at(root, doc, ())
    return out


def _check_keywords(s: Any, where: str) -> None:
    if not isinstance(s, dict):
        raise SchemaError(f"{where}: a schema must be an object")
    unknown = set(s) - APPLIED - ANNOTATIONS
    if unknown:
        raise SchemaError(f"{where}: keyword(s) {sorted(unknown)} not applied by "
                          "validation.result_schema")
    ref = s.get("$ref")
    if ref is not None and not (isinstance(ref, str) and ref.startswith("#/$defs/")):
        raise SchemaError(f"{where}: only local references into $defs, not {ref!r}")
    if ref is not None and set(s) - ANNOTATIONS - {"$ref"}:
        raise SchemaError(f"{where}: $ref beside other keywords (put them in the $defs entry)")
    for key in ("properties", "$defs"):
        for name, sub in s.get(key, {}).items():
            _check_keywords(sub, f"{where}/{key}/{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(s.get(key), dict):
            _check_keywords(s[key], f"{where}/{key}")
    for i, sub in enumerate(s.get("anyOf", ())):
        _check_keywords(sub, f"{where}/anyOf/{i}")


def _show(v: Any) -> str:
    """v in a problem line: a scalar as JSON, cut; a container only by its brackets (it
    may be anything a broken writer put there)."""
    if isinstance(v, dict | list):
        return ("{" if isinstance(v, dict) else "[") + ("..." if v else "") + \
            ("}" if isinstance(v, dict) else "]")
    text = json.dumps(v, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(v: Any) -> str:
    for name in ("boolean", "null", "object", "array", "string", "integer", "number"):
        if _TYPES[name](v):
            return name
    return type(v).__name__


class _Walk:
    def __init__(self, root: dict[str, Any], out: list[str]) -> None:
        self.root, self.out = root, out

    def ref(self, s: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in s:
            s = self.root["$defs"][s["$ref"].removeprefix("#/$defs/")]
        return s

    def problem(self, path: tuple[str, ...], why: str) -> None:
        # a key is the writer's text: escaped to one ASCII line, cut
        where = "/".join(json.dumps(k)[1:-1][:60] for k in path)
        self.out.append(f"{where or '<root>'}: {why}")

    def admits(self, s: dict[str, Any], v: Any) -> bool:
        """Does s's own type (if it says one) take v's JSON type?"""
        want = self.ref(s).get("type")
        if want is None:
            return True
        return any(_TYPES[t](v) for t in ([want] if isinstance(want, str) else want))

    def at(self, s: dict[str, Any], v: Any, path: tuple[str, ...]) -> None:
        s = self.ref(s)
        if not self.admits(s, v):
            want = s["type"] if isinstance(s["type"], str) else " or ".join(s["type"])
            self.problem(path, f"is {_kind(v)} {_show(v)}, not {want}")
            return
        if "enum" in s and not any(e == v and isinstance(e, bool) == isinstance(v, bool)
                                   for e in s["enum"]):
            self.problem(path, f"{_show(v)} is not one of {', '.join(map(_show, s['enum']))}")
            return
        if "anyOf" in s:
            self.any_of(s["anyOf"], v, path)
        if isinstance(v, str):
            if "pattern" in s and not re.search(s["pattern"], v):
                self.problem(path, f"{_show(v)} does not match {s['pattern']}")
            if len(v) < s.get("minLength", 0):
                self.problem(path, f"is shorter than {s['minLength']} character(s)")
        if _TYPES["number"](v) and "minimum" in s and v < s["minimum"]:
            self.problem(path, f"{_show(v)} is less than the minimum {s['minimum']}")
        if isinstance(v, dict):
            self.obj(s, v, path)
        if isinstance(v, list) and "items" in s:
            for i, x in enumerate(v):
                self.at(s["items"], x, (*path, str(i)))

    def obj(self, s: dict[str, Any], v: dict[str, Any], path: tuple[str, ...]) -> None:
        props = s.get("properties", {})
        for key in s.get("required", ()):
            if key not in v:
                self.problem((*path, key), "is missing (a required key)")
        extra = s.get("additionalProperties", True)
        for key, x in v.items():
            if key in props:
                self.at(props[key], x, (*path, key))
            elif extra is False:
                self.problem((*path, key), "is not a key this object may have")
            elif isinstance(extra, dict):
                self.at(extra, x, (*path, key))

    def any_of(self, alternatives: list[dict[str, Any]], v: Any, path: tuple[str, ...]) -> None:
        """Valid under one alternative at least; else the problems of the one alternative
        whose type takes v (an object where 'an object or null' is allowed), if one does."""
        tries = []
        for alt in alternatives:
            found: list[str] = []
            _Walk(self.root, found).at(alt, v, path)
            if not found:
                return
            tries.append((alt, found))
        typed = [found for alt, found in tries if self.admits(alt, v)]
        if len(typed) == 1:
            self.out.extend(typed[0])
        else:
            self.problem(path, f"is {_kind(v)} {_show(v)}, which none of the allowed shapes "
                               "takes")
