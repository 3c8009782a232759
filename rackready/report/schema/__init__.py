"""The published JSON Schema of the report and a validator for it."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

from rackready.report.errors import ReportError

SCHEMA_FILE = "report.schema.json"


@cache
def load_schema() -> dict[str, Any]:
    text = resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    schema = json.loads(text)
    Draft202012Validator.check_schema(schema)
    return schema


def schema_errors(doc: dict[str, Any]) -> list[str]:
    """Every way doc breaks the schema, as 'path: message' lines (empty when valid)."""
    schema = load_schema()
    # Validate against the kind's own definition so errors name the field, not
    # "not valid under any of the given schemas".
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if kind in ("node", "rack"):
        schema = {**schema, "$ref": f"#/$defs/{kind}Report"}
        schema.pop("oneOf")
    validator = Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:160]}"
            for e in errors]


def validate_report(doc: dict[str, Any]) -> None:
    errors = schema_errors(doc)
    if errors:
        raise ReportError(f"report {doc.get('kind')} breaks the schema: {errors[0]}"
                          + (f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""))
