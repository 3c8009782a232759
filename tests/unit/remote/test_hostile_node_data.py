"""The real controller path (`invoke validate`, rackready.steps.validate.run_validation) over
in-process SSH nodes (fake_node.py) whose suite sends hostile data: text that is valid
JSON but no Unicode (lone surrogates), characters XML 1.0 forbids, more measurements
than any real node has. Every node is reported; the honest one is judged as usual."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
import xml.etree.ElementTree as ET

import pytest
from fake_node import FakeNode
from fake_rack import play_every_node, provisioned_roles

from rackready.remote import result_shape
from rackready.steps import validate

# `python -m validation run ...` from the shipped bundle: this tiny package, not the suite
SUITE = r'''
import json, os, sys
argv = sys.argv[1:]
out = argv[argv.index("--out") + 1]
os.makedirs(out, exist_ok=True)
mode, node = os.environ["HOSTILE"], os.environ["NODE_NAME"]
odd = {"surrogate": "\ud800", "xml": "\ufffe\uffff"}.get(mode, "")
def ev(**e):
    print(json.dumps(e), flush=True)
ev(event="run_started", run_id="r", node=node, level="quick")
ev(event="check_started", check="kernel.cmdline" + odd)
ev(event="progress", check="kernel.cmdline", fraction=0.5, label="half" + odd)
n = 400 if mode == "counts" else 1
ms = [{"name": "kernel.cmdline_ok", "value": True, "unit": "",
       "labels": {"i": str(i), "note": "n" + odd}} for i in range(n)]
check = {"check": "kernel.cmdline", "status": "ok", "duration_s": 0.1,
         "measurements": ms, "message": "said" + odd}
ev(event="check_finished", check="kernel.cmdline" + odd, result={**check, "check":
   "kernel.cmdline" + odd})
with open(os.path.join(out, "result.json"), "w") as f:
    json.dump({"schema_version": "1.0", "node": node, "hostname": node + odd,
               "profile": "xe9680-h200-lab", "level": "quick", "checks": [check],
               "outcome": "PASS", "only": ["kernel.cmdline"]}, f)
ev(event="run_finished", outcome="PASS")
'''


class _Tty(io.TextIOWrapper):
    """A terminal: the board redraws every node's line on each update, strict UTF-8."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    roles = provisioned_roles(tmp_path)
    lab = {"profile": "xe9680-h200-lab", "validation_without": ("bmc",),
           "provisioned": roles}
    fakes, nodes = [], {}
    for name, mode in (("gpu01", "honest"), ("gpu02", "surrogate"), ("gpu03", "xml"),
                       ("gpu04", "counts")):
        fake = FakeNode(tmp_path / name, env={"HOSTILE": mode, "NODE_NAME": name})
        fakes.append(fake)
        nodes[name] = dataclasses.replace(fake.node, name=name, **lab)
    play_every_node(monkeypatch, tmp_path, nodes, SUITE)
    monkeypatch.setattr(result_shape, "CAPS", result_shape.ResultCaps(measurements=300))
    tty = _Tty(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stdout", tty)
    yield tmp_path, tty
    for fake in fakes:
        fake.close()


def test_hostile_node_text_and_counts_never_take_the_reports_down(hostile):
    tmp_path, tty = hostile
    out = tmp_path / "run"
    code = validate.run_validation(node=None, inventory="test", level="quick", out=str(out),
                                   formats="json,junit", only="kernel.cmdline")
    printed = tty.buffer.getvalue().decode()
    assert code == 1 and "Traceback" not in printed
    rack = json.loads((out / "report" / "rack.json").read_text())
    by_node = {n["node"]: n for n in rack["nodes"]}
    assert set(by_node) == {"gpu01", "gpu02", "gpu03", "gpu04"}
    for name in by_node:  # no node's session was ended by another's text on the board
        session = json.loads((out / name / "session.json").read_text())
        assert session["problem"] == "", (name, session)
    # a lone surrogate is written as its escape and named; it is not a pass by itself
    j2 = json.loads((out / "gpu02" / "judgement.json").read_text())
    assert any("lone surrogates" in p for p in j2["problems"])
    node2 = (out / "report" / "node-gpu02.json").read_text()
    assert "\\\\ud800" in node2  # the visible escape, as text
    # more measurements than the cap: named, and the node cannot pass
    assert by_node["gpu04"]["outcome"] == "INCOMPLETE"
    assert "over the cap of 300 for all checks together" in by_node["gpu04"]["outcome_reason"]
    # JUnit parses for the whole rack, whatever the nodes sent
    root = ET.fromstring((out / "report" / "junit.xml").read_bytes())
    assert {s.get("name") for s in root.findall("testsuite")} == set(by_node)


def test_invoke_report_on_a_run_holding_lone_surrogates_works(hostile):
    """A run directory written before node data was cleaned: the node's result.json and
    the controller's own judgement.json hold "\\ud800"; `invoke report` still writes."""
    from rackready.report.cli import write_reports

    tmp_path, _ = hostile
    out = tmp_path / "run"
    validate.run_validation(node=None, inventory="test", level="quick", out=str(out),
                            formats="json", only="kernel.cmdline")
    path = out / "gpu02" / "judgement.json"
    j = json.loads(path.read_text())
    j["problems"].append("from an older controller \ud800")
    path.write_text(json.dumps(j))  # ensure_ascii: the escape, as the old run wrote it
    paths = write_reports(out, "json,junit")
    assert any(p.name == "junit.xml" for p in paths)
    node2 = json.loads((out / "report" / "node-gpu02.json").read_text())
    assert "from an older controller \\ud800" in node2["problems"]


def test_node_text_reaches_the_reports_without_c1_controls_or_bidi_overrides(tmp_path):
    """Read once, cleaned once: report JSON never carries a node's C1 controls (\\x9b is
    a terminal's CSI) or bidi overrides (text that reads differently than it is)."""
    from rackready.run.rundir import RunDir

    (tmp_path / "result.json").write_text(json.dumps({
        "schema_version": "1.0", "hostname": "gpu\x9b2J01", "checks": [
            {"check": "a", "status": "ok", "message": "fine \u202egnp.exe\u202c\nnext",
             "measurements": [{"name": "m", "value": 1, "labels": {"\u2066k": "v\x85"}}]}]}))
    got = RunDir.open(tmp_path).read_result(tmp_path.name)
    r = got.result
    assert r["hostname"] == "gpu2J01"
    assert r["checks"][0]["message"] == "fine gnp.exe\nnext"
    assert r["checks"][0]["measurements"][0]["labels"] == {"k": "v"}
    assert got.problems == ["4 text value(s) held control characters or bidi overrides; "
                            "removed"]
