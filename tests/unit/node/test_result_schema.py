"""result.json's schema (validation/schema/result.schema.json) and validation's own checker.

The checker is stdlib only (a node has no jsonschema); jsonschema's Draft202012Validator
checks the schema itself here and must agree with it on every document below.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from validation import model
from validation.result_schema import SchemaError, check_result, load_schema

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "h200x2-quick-result.json.gz"


@pytest.fixture(scope="module")
def real() -> dict[str, Any]:
    return json.loads(gzip.decompress(FIXTURE.read_bytes()))


def jsonschema_paths(doc: Any) -> set[str]:
    validator = Draft202012Validator(load_schema())
    return {"/".join(map(str, e.absolute_path)) or "<root>" for e in validator.iter_errors(doc)}


def test_the_schema_is_draft_2020_12():
    Draft202012Validator.check_schema(load_schema())


def test_a_real_result_validates(real):
    assert check_result(real) == []
    assert jsonschema_paths(real) == set()


def test_the_enums_are_the_models_own(real):
    defs = load_schema()["$defs"]
    assert defs["checkResult"]["properties"]["status"]["enum"] == list(
        model.CheckStatus.__args__)
    assert defs["verdict"]["properties"]["outcome"]["enum"] == list(model.Outcome.__args__)
    assert defs["threshold"]["properties"]["op"]["enum"] == list(model.Op.__args__)
    assert defs["threshold"]["properties"]["tier"]["enum"] == list(model.TIERS)
    props = load_schema()["properties"]
    assert props["outcome"]["enum"] == list(model.NodeOutcome.__args__)
    assert props["schema_version"]["enum"] == [model.SCHEMA_VERSION]


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


def _del(doc: dict[str, Any], path: tuple[Any, ...]) -> None:
    for key in path[:-1]:
        doc = doc[key]
    del doc[path[-1]]


# (how the document is broken, the path the problem names, words of the problem)
BROKEN = [
    ("simulated as text", lambda d: _set(d, ("simulated",), "yes"), "simulated",
     "is string"),
    ("unknown check status", lambda d: _set(d, ("checks", 0, "status"), "exploded"),
     "checks/0/status", "is not one of"),
    ("no outcome", lambda d: _del(d, ("outcome",)), "outcome", "missing"),
    ("unknown node outcome", lambda d: _set(d, ("outcome",), "PARTIAL"), "outcome",
     "is not one of"),
    ("a check without its measurements",
     lambda d: _del(d, ("checks", 1, "measurements")), "checks/1/measurements", "missing"),
    ("a measurement value that is an object",
     lambda d: _set(d, ("checks", 0, "measurements", 0, "value"), {"x": 1}),
     "checks/0/measurements/0/value", "is object"),
    ("a label that is a number",
     lambda d: _set(d, ("checks", 0, "measurements", 1, "labels", "source"), 7),
     "checks/0/measurements/1/labels/source", "is integer"),
    ("an unknown verdict outcome", lambda d: _set(d, ("verdicts", 0, "outcome"), "ok"),
     "verdicts/0/outcome", "is not one of"),
    ("a verdict's threshold with an unknown op",
     lambda d: _set(d, ("verdicts", 12, "threshold", "op"), "=>"),
     "verdicts/12/threshold/op", "is not one of"),
    ("an artifact digest that is not SHA-256",
     lambda d: _set(d, ("artifacts", "artifacts/nvidia-smi-q-x.xml"), "abc"),
     "artifacts/artifacts/nvidia-smi-q-x.xml", "does not match"),
    ("a negative duration", lambda d: _set(d, ("checks", 2, "duration_s"), -1),
     "checks/2/duration_s", "less than the minimum"),
    ("an unknown level", lambda d: _set(d, ("level",), "fast"), "level", "is not one of"),
    ("a key no writer writes", lambda d: _set(d, ("verdict",), "PASS"), "verdict",
     "not a key"),
    ("checks as an object", lambda d: _set(d, ("checks",), {}), "checks", "is object"),
    ("a bad start time", lambda d: _set(d, ("started",), "yesterday"), "started",
     "does not match"),
    ("true where a number of GPUs goes", lambda d: _set(d, ("scope", "gpus"), True),
     "scope/gpus", "is boolean"),
]


@pytest.mark.parametrize("break_it, path, words", [b[1:] for b in BROKEN],
                         ids=[b[0] for b in BROKEN])
def test_each_malformed_document_names_the_path(real, break_it, path, words):
    doc = copy.deepcopy(real)
    # the fixture's first verdict with a threshold (those before judge a check's status)
    assert doc["verdicts"][12]["threshold"] is not None
    break_it(doc)
    problems = check_result(doc)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}: ") and words in problems[0], problems
    # jsonschema finds the same place (a missing key: at the object that lacks it; an
    # anyOf that fails: at the anyOf)
    found = jsonschema_paths(doc)
    assert len(found) == 1 and path.startswith(next(iter(found)).replace("<root>", "")), found


def test_a_document_that_is_not_an_object():
    assert check_result([]) == ["<root>: is array [], not object"]


def test_every_problem_is_named_not_only_the_first(real):
    doc = copy.deepcopy(real)
    doc["simulated"] = 1
    doc["checks"][0]["status"] = "maybe"
    del doc["artifacts"]
    problems = check_result(doc)
    assert [p.split(":")[0] for p in problems] == ["artifacts", "simulated", "checks/0/status"]


def test_a_result_of_today_with_every_optional_key_validates(real):
    doc = copy.deepcopy(real)
    doc.update(only=["gpu.inventory"], nonce="n-1", resumed_at=[doc["finished"]])
    for t in doc["thresholds"]:
        t.update(tier="spec", gross=None)
    assert check_result(doc) == [] and jsonschema_paths(doc) == set()


def test_a_keyword_the_checker_does_not_apply_is_refused():
    with pytest.raises(SchemaError, match="oneOf"):
        check_result({}, {"type": "object", "oneOf": [{"type": "object"}]})
    with pytest.raises(SchemaError, match="local references"):
        check_result({}, {"$ref": "https://example.invalid/s.json"})


def test_a_problem_line_is_one_line_whatever_the_keys_and_values():
    doc = {"checks": [], "x\n\u202e" + "k" * 100: "a\nb"}
    problems = [p for p in check_result(doc) if "not a key" in p]
    assert len(problems) == 1 and "\n" not in problems[0] and problems[0].isascii()


def test_the_node_says_when_what_it_writes_breaks_its_schema(capsys):
    from validation.runner import _say_schema_problems

    real = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    _say_schema_problems(real)
    assert capsys.readouterr().err == ""
    del real["run_id"]
    real["checks"][0]["status"] = "fine"
    _say_schema_problems(real)
    err = capsys.readouterr().err
    assert err.startswith("validation: result.json breaks validation/schema/result.schema.json: ")
    assert "run_id" in err and "(and 1 more)" in err
