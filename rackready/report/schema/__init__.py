"""The published JSON Schema of the report and a validator for it.

Every report is checked as it is written, and a node report of an 8-GPU run holds
thousands of verdicts: Python's jsonschema took about 1 s per such report, most of a
report build. So a report is first checked by jsonschema-rs (compiled; the same Draft
2020-12); only a report it refuses is walked again by jsonschema, whose messages name
the field. jsonschema stays the authority: what it finds is what is said.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator

from rackready.remote.result_shape import VALUE_BOUND
from rackready.report.errors import ReportError

SCHEMA_FILE = "report.schema.json"
KINDS = ("node", "rack")
# every number a report holds lies within +-NUMBER_BOUND (the schema's minimum and
# maximum): beyond any figure of a rack (an exabyte, 1e18 FLOP/s), far enough from a
# float's edge that a median, a sum of 100,000 of them or an axis limit stays finite.
# The loader clamps what is outside (rackready.report.loader._bounded), naming it; a node's
# measurement beyond it is already read as not measured (rackready.remote.result_shape).
NUMBER_BOUND = VALUE_BOUND


@cache
def load_schema() -> dict[str, Any]:
    text = resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    schema = json.loads(text)
    Draft202012Validator.check_schema(schema)
    return schema


def _schema_of(kind: Any) -> dict[str, Any]:
    """The schema; for a known kind, that kind's own definition, so errors name the
    field, not "not valid under any of the given schemas"."""
    schema = load_schema()
    if kind not in KINDS:
        return schema
    own = {**schema, "$ref": f"#/$defs/{kind}Report"}
    own.pop("oneOf")
    return own


@cache
def _fast_validator(kind: Any) -> Any:
    return jsonschema_rs.Draft202012Validator(_schema_of(kind))


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """Every way doc breaks the schema, as 'path: message' lines (empty when valid)."""
    kind = doc.get("kind") if isinstance(doc, dict) else None
    kind = kind if kind in KINDS else None
    try:
        if _fast_validator(kind).is_valid(doc):
            return []
    except (ValueError, TypeError):  # a value with no JSON type: jsonschema says where
        pass
    validator = Draft202012Validator(_schema_of(kind))
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:160]}"
            for e in errors]


def validate_report(doc: dict[str, Any]) -> None:
    errors = schema_errors(doc)
    if errors:
        raise ReportError(f"report {doc.get('kind')} breaks the schema: {errors[0]}"
                          + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""))
