"""A rack with two nodes of one model: the lab grown to three nodes (lab-gpu03 is a
second XE9680-like node beside lab-gpu01), provisioned, validated as one inventory.

Every real rack is many nodes of one model, so the reference job's loss curves are
compared across nodes there; the two-node demo (two models) never does that.
"""

from __future__ import annotations

import json

import pytest

from rackready.steps.validate import run_validation

pytestmark = [pytest.mark.lab, pytest.mark.lab_phase("three-nodes")]

NODES = ("lab-gpu01", "lab-gpu02", "lab-gpu03")  # the three_nodes fixture: tests/lab/conftest.py


def test_a_rack_with_two_nodes_of_one_profile_writes_every_report(three_nodes, tmp_path):
    code = run_validation(None, "lab", "quick", str(tmp_path), formats="json,html,junit")
    report = tmp_path / "report"
    for name in NODES:
        assert (report / f"node-{name}.json").exists(), sorted(p.name for p in report.iterdir())
        assert (report / f"node-{name}.html").exists()
    rack = json.loads((report / "rack.json").read_text())
    assert {n["node"] for n in rack["nodes"]} == set(NODES)
    assert (report / "junit.xml").exists()
    # the two XE9680-like nodes' reference-job curves were compared with each other
    for name in ("lab-gpu01", "lab-gpu03"):
        doc = json.loads((report / f"node-{name}.json").read_text())
        curve = [v for v in doc["verdicts"] if v["metric"] == "fsdp.loss_rack_deviation"]
        assert len(curve) == 1 and curve[0]["outcome"] == "pass", curve
        assert curve[0]["threshold"]["provenance"]
    outcomes = {n["node"]: n["outcome"] for n in rack["nodes"]}
    assert outcomes == dict.fromkeys(NODES, "PASS") and code == 0, rack["outcome_reason"]

