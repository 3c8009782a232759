"""A node that sends wrong types: the controller conforms what it read, judges that node
INCOMPLETE and names the part, and the rack's judging and reports go on for every node.

The node results are real (the hwsim node-side run of test_judging); each test breaks
one part as a broken or hostile node could."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest
from test_judging import _run, hw_run  # noqa: F401  (the fixture)

from rackready.decide.judge import judge_run
from rackready.remote.result_shape import MALFORMED, conform_result
from rackready.report.build import build_reports

# a real node's result.json: 2x H200, quick (tests/fixtures/README.md)
REAL_RESULT = Path(__file__).resolve().parents[2] / "fixtures" / "h200x2-quick-result.json.gz"


def _measurement(result: dict, name: str) -> dict:
    return next(m for c in result["checks"] for m in c["measurements"] if m["name"] == name)


def _break_label(r):
    _measurement(r, "gpu.temperature")["labels"]["gpu"] = {"nested": ["x"]}


def _break_value(r):
    _measurement(r, "gpu.temperature")["value"] = [35, 36]


def _huge_rate(r):  # GEMM at the edge of a float: every renderer and median had to survive it
    _measurement(r, "gpu.temperature")["value"] = 1.7e308


def _break_unit(r):
    _measurement(r, "gpu.temperature")["unit"] = {"C": True}


def _break_artifact_digest(r):
    r["artifacts"][next(iter(r["artifacts"]))] = None


def _break_status(r):
    r["checks"][0]["status"] = "passed with flying colours"


def _break_inventory(r):
    r["inventory"] = ["gpu0", "gpu1"]


def _break_tools(r):
    r["tool_versions"] = {"python": {"major": 3}}


@pytest.mark.parametrize("edit, part", [
    (_break_label, "labels.gpu"),
    (_break_value, ".value is a list"),
    (_huge_rate, ".value 1.7e+308 is beyond +-1e+18"),
    (_break_unit, ".unit is an object"),
    (_break_artifact_digest, "is not a SHA-256 digest"),
    (_break_status, ".status"),
    (_break_inventory, "inventory is a list"),
    (_break_tools, "tool_versions.python"),
])
def test_a_malformed_part_makes_that_node_incomplete_and_the_rack_reports_build(
        tmp_path, hw_run, edit, part):  # noqa: F811
    result, site = hw_run
    bad = copy.deepcopy(result)
    edit(bad)
    run = _run(tmp_path, {"gpu01": bad, "gpu02": result}, site)
    j = judge_run(run)
    assert j["gpu01"]["outcome"] == "INCOMPLETE", j["gpu01"]["outcome_reason"]
    assert j["gpu01"]["outcome_reason"].startswith(MALFORMED)
    assert any(p.startswith(MALFORMED) and part in p for p in j["gpu01"]["problems"]), \
        j["gpu01"]["problems"]
    # the healthy node is judged as if gpu01 had sent nothing wrong
    assert not any(MALFORMED in p for p in j["gpu02"]["problems"])
    build_reports(run.path, {"json", "html", "junit"})
    rack = json.loads((run.report_dir / "rack.json").read_text())
    assert [n["node"] for n in rack["nodes"]] == ["gpu01", "gpu02"]
    assert rack["outcome"] == "INCOMPLETE"
    node = json.loads((run.report_dir / "node-gpu01.json").read_text())
    assert node["outcome"] == "INCOMPLETE" and any(part in p for p in node["problems"])


def test_conform_replaces_with_what_cannot_pass_and_counts_the_rest():
    problems: list[str] = []
    raw = {
        "schema_version": "1.0", "node": 7, "simulated": "no", "outcome": "NaN",
        "bundle_sha256": "abc", "only": "everything",
        "checks": [
            {"check": "gpu.health", "status": "ok", "duration_s": -3,
             "measurements": [{"name": "gpu.temperature", "value": {"v": 1}, "unit": 5,
                               "labels": {"gpu": "0", "bad\x1b[31m": [1]}, "artifact": 3},
                              {"value": 1}, "not a dict"],
             "needs": ["gpu", 4]},
            {"check": "", "status": "ok"},
            {"status": "ok"},
        ],
    }
    out = conform_result(raw, problems)
    m = out["checks"][0]["measurements"]
    assert len(out["checks"]) == 1 and len(m) == 1
    assert m[0] == {"name": "gpu.temperature", "value": None, "unit": "", "labels": {"gpu": "0"},
                    "artifact": None}
    assert out["checks"][0]["duration_s"] == 0.0 and out["checks"][0]["needs"] == ["gpu"]
    assert out["node"] is None and out["bundle_sha256"] is None and out["only"] is None
    assert out["outcome"] is None  # the node's claim, when it is not an outcome
    assert out["simulated"] is True  # a flag it cannot read never claims real hardware
    assert all(p.startswith(MALFORMED) for p in problems)
    assert len(problems) == 6 and problems[-1].endswith("more part(s) replaced")
    assert not any("\x1b" in p for p in problems)  # a node's key is cleaned for the report


def test_a_well_formed_result_conforms_unchanged(hw_run):  # noqa: F811
    result, _ = hw_run
    problems: list[str] = []
    out = conform_result(result, problems)
    assert problems == []
    assert out["checks"] == result["checks"]
    for key in ("node", "profile", "level", "simulated", "inventory", "artifacts"):
        assert out[key] == result[key], key


# Values a broken or hostile node could put anywhere (the fuzzing that found the crashes).
_ODD = [None, True, 0, -1, 1e308, "", "x" * 5000, "<script>\x1b[31m\x00", [], {}, [1, 2],
        {"a": {"b": None}}, "NaN", 3.5, "../../etc/passwd"]


def _places(o, at=()):
    yield at
    if isinstance(o, dict):
        for k, v in o.items():
            yield from _places(v, (*at, k))
    elif isinstance(o, list):
        for i, v in enumerate(o[:6]):
            yield from _places(v, (*at, i))


DAMAGED_RESULTS = 12


@pytest.fixture(scope="module")
def damaged_results(healthy_hardware_run) -> list[dict]:
    """The healthy node's result, damaged at random (seeded) 12 times: 1-3 odd values put
    in random places each. One module-wide list, so each case can run on its own."""
    import random

    result = healthy_hardware_run.result()
    places = [p for p in _places(result) if p]
    rng = random.Random(11)
    out = []
    for _ in range(DAMAGED_RESULTS):
        bad = copy.deepcopy(result)
        for _ in range(rng.randint(1, 3)):
            *parent, last = rng.choice(places)
            node = bad
            try:
                for k in parent:
                    node = node[k]
                node[last] = copy.deepcopy(rng.choice(_ODD))
            except (KeyError, IndexError, TypeError):
                pass  # an earlier change already replaced a parent
        out.append(bad)
    return out


@pytest.fixture(scope="module")
def healthy_outcome(tmp_path_factory, hw_run) -> str:  # noqa: F811
    result, site = hw_run
    run = _run(tmp_path_factory.mktemp("ref"), {"gpu01": result, "gpu02": result}, site)
    return judge_run(run)["gpu02"]["outcome"]


@pytest.mark.parametrize("i", range(DAMAGED_RESULTS))
def test_random_damage_never_stops_the_rack_and_never_moves_the_healthy_node(
        tmp_path, hw_run, damaged_results, healthy_outcome, i):  # noqa: F811
    result, site = hw_run
    run = _run(tmp_path / f"r{i}", {"gpu01": damaged_results[i], "gpu02": result}, site)
    j = judge_run(run)  # never raises
    assert j["gpu02"]["outcome"] == healthy_outcome
    build_reports(run.path, {"json", "html", "junit"})  # never raises
    assert (run.report_dir / "node-gpu01.json").is_file()


def _fixture_result() -> dict:
    import gzip
    from pathlib import Path

    path = Path(__file__).parents[2] / "fixtures" / "h200x2-quick-result.json.gz"
    return json.loads(gzip.decompress(path.read_bytes()))


def test_a_real_result_is_well_inside_the_count_caps():
    problems: list[str] = []
    out = conform_result(_fixture_result(), problems)
    assert problems == []
    assert sum(len(c["measurements"]) for c in out["checks"]) == 677


def test_counts_are_capped_and_named_so_the_node_cannot_pass():
    """Bytes are capped by the fetch; counts here: checks, measurements per check and in
    all, labels, text lengths. Each cap passed is named; the result stays bounded."""
    from rackready.remote.result_shape import ResultCaps

    caps = ResultCaps(checks=3, measurements_per_check=5, measurements=8, labels=2,
                      text_chars=16, message_chars=32)
    m = {"name": "m", "value": 1.0, "unit": "", "labels": {"a": "1", "b": "2", "c": "3"}}
    checks = [{"check": f"c{i}", "status": "ok", "duration_s": 1.0, "message": "x" * 100,
               "measurements": [copy.deepcopy(m) for _ in range(7)]} for i in range(4)]
    checks[0]["measurements"][0]["labels"]["a"] = "v" * 100
    checks[0]["measurements"][1]["name"] = "n" * 100
    problems: list[str] = []
    out = conform_result({"schema_version": "1.0", "checks": checks}, problems, caps)
    assert len(out["checks"]) == 3
    assert [len(c["measurements"]) for c in out["checks"]] == [5, 3, 0]
    assert all(len(m["labels"]) <= 2 for c in out["checks"] for m in c["measurements"])
    assert out["checks"][0]["measurements"][0]["labels"]["a"] == "v" * 16
    assert len(out["checks"][0]["message"]) == 32
    assert all(p.startswith(MALFORMED) for p in problems)  # so the judge makes it INCOMPLETE
    text = " ".join(problems)
    assert "checks has 4 entries, over the cap of 3" in text
    assert "has 7 entries, over the cap of 5 per check" in text
    # every cap passed is named once, first (other details are summarized after it)
    assert "over the cap of 8 for all checks together" in text
    assert "labels has 3 labels, over the cap of 2" in text
    assert "is 100 characters, over the cap of 16" in text
    assert "is 100 characters, over the cap of 32" in text  # the message
    assert problems[0].endswith("checks has 4 entries, over the cap of 3; the rest dropped")
    assert len(problems) == 6  # one per cap, however many parts passed it


def test_a_result_of_countless_tiny_values_is_refused_before_parsing(tmp_path, monkeypatch):
    from rackready.remote import result_shape
    from rackready.run.rundir import RunDir

    monkeypatch.setattr(result_shape, "CAPS", result_shape.ResultCaps(json_values=1000))
    (tmp_path / "result.json").write_text(json.dumps(
        {"schema_version": "1.0", "checks": [], "pad": [{}] * 2000}))
    got = RunDir.open(tmp_path).read_result(tmp_path.name)
    assert got.result is None
    assert got.problems == ["result.json is unreadable (more than 1000 JSON values (the cap "
                            "per file))"]


def test_the_controller_reads_what_the_node_s_schema_says_with_no_edit_of_its_own():
    # The reader is derived from validation/schema/result.schema.json (its differences:
    # rackready.remote.result_overlay). A key, a status or a record field the schema gains
    # is read by the controller as the schema types it; nothing else is edited.
    from rackready.remote.result_shape import CHECK_STATUSES, ResultSchema, conform_with
    from validation.result_schema import check_result, load_schema

    schema = copy.deepcopy(load_schema())
    statuses = schema["$defs"]["checkResult"]["properties"]["status"]["enum"]
    assert (*statuses, "interrupted") == CHECK_STATUSES  # what a rebuilt run adds
    schema["properties"]["rack_slot"] = {"type": ["string", "null"]}
    schema["properties"]["firmware_digest"] = {"$ref": "#/$defs/sha256"}
    schema["$defs"]["checkResult"]["properties"]["status"]["enum"].append("waived")
    schema["$defs"]["checkResult"]["properties"]["retries"] = {"type": "number", "minimum": 0}
    schema["$defs"]["measurement"]["properties"]["raw"] = {"$ref": "#/$defs/scalar"}
    result = json.loads(gzip.decompress(REAL_RESULT.read_bytes()))
    result["rack_slot"] = "U12"
    result["firmware_digest"] = "ab" * 32
    result["checks"][0].update(status="waived", retries=2)
    result["checks"][0]["measurements"][0]["raw"] = "0x1f"
    assert check_result(result, schema) == []  # the node writes it under the new schema
    ResultSchema(schema).check_readable()
    problems: list[str] = []
    out = conform_with(ResultSchema(schema), result, problems)
    assert problems == []
    assert out["rack_slot"] == "U12" and out["firmware_digest"] == "ab" * 32
    first = out["checks"][0]
    assert first["status"] == "waived" and first["retries"] == 2.0
    assert first["measurements"][0]["raw"] == "0x1f"
    # a new part sent wrong is named, as precisely as any other, and read as what cannot pass
    result["rack_slot"] = {"row": 3}
    result["firmware_digest"] = "not hex"
    result["checks"][0]["measurements"][0]["raw"] = [1]
    out = conform_with(ResultSchema(schema), result, problems)
    name = result["checks"][0]["check"]
    assert problems == [  # in the schema's order: the new keys come after the checks
        f"{MALFORMED}: checks[{name}].measurements[0].raw is a list, not a number, text, "
        "boolean or null",
        f"{MALFORMED}: rack_slot is an object, not text",
        f"{MALFORMED}: firmware_digest is not a SHA-256 digest"]
    assert out["rack_slot"] is None and out["firmware_digest"] is None
    # the controller's own copy of the schema has none of them: they are not read
    assert "rack_slot" not in conform_result(result, [])


def test_a_schema_part_the_controller_cannot_read_fails_when_loaded():
    # not on some node's result later: a shape the reader has no reading for is refused
    from rackready.remote.result_shape import ResultSchema
    from validation.result_schema import load_schema

    ResultSchema(load_schema()).check_readable()
    schema = copy.deepcopy(load_schema())
    schema["$defs"]["measurement"]["properties"]["samples"] = {
        "type": "array", "items": {"type": "number"}}
    with pytest.raises(ValueError, match="cannot read"):
        ResultSchema(schema).check_readable()


def test_a_resumed_run_s_result_conforms_with_its_resume_times():
    # result.json of a run that `--resume` continued: resumed_at is a list, per the schema
    from validation.result_schema import check_result

    result = json.loads(gzip.decompress(REAL_RESULT.read_bytes()))
    result["resumed_at"] = ["2026-12-04T10:00:00+00:00", "2026-12-04T11:00:00+00:00"]
    assert check_result(result) == []
    problems: list[str] = []
    out = conform_result(result, problems)
    assert problems == [] and out["resumed_at"] == result["resumed_at"]
    result["resumed_at"] = "2026-12-04T10:00:00+00:00"  # not what the schema allows
    conform_result(result, problems)
    assert problems == [f"{MALFORMED}: resumed_at is not a list of text"]
