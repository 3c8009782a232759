"""The rack-level step and fault combinations on the lab, validated over SSH.

`invoke validate --inventory lab` runs the node suites, then the rack step across
both nodes (one fabric: the lab bridge; gloo, SIMULATED rails gated by hwsim's port
state). Only the hardware checks run in the node suites (`--only`), as in
test_faults_lab.py: a fault lives in the hardware state; the rack step runs anyway.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fault_expectations import HARDWARE_CHECKS, expected_failure, naming_failures

from rackready.steps.validate import run_validation
from rackready_lab import lab
from rackready_lab.hwsim.sysroot import read_node_state

pytestmark = pytest.mark.lab

NODES = ("lab-gpu01", "lab-gpu02")


def _validate(out: Path, node: str | None = None, formats: str = "json") -> int:
    """The hardware checks and the rack step; the HTML reports only where a test reads
    them (about 2 s per node to render)."""
    return run_validation(node, "lab", "quick", str(out), formats=formats,
                          only=",".join(HARDWARE_CHECKS))


def _judgement(out: Path, node: str) -> dict:
    return json.loads((out / node / "judgement.json").read_text())


def _report(out: Path, name: str) -> dict:
    return json.loads((out / "report" / f"{name}.json").read_text())


def _faults(spec_root, kinds: list[tuple[str, str | None]]) -> list[dict]:
    for kind, target in kinds:
        lab.fault(spec_root[0], kind, target)
    return read_node_state(spec_root[1])["faults"]


def _hits(verdicts: list[dict], kind: str, comp: dict) -> list[dict]:
    return naming_failures(verdicts, kind, comp, raid=False)


@pytest.fixture
def healed(provisioned_lab):
    for n in NODES:
        lab.heal(n)
    yield provisioned_lab
    for n in NODES:
        lab.heal(n)


def test_healthy_lab_rack_step_passes(healed, tmp_path):
    code = _validate(tmp_path)
    rack = _report(tmp_path, "rack")
    (g,) = rack["rack_checks"]
    assert code == 1  # a narrowed (--only) run is never an acceptance ...
    assert (g["fabric"], g["outcome"], g["problems"]) == ("lab-network", "PASS", [])
    assert sorted(g["members"]) == list(NODES) and g["left_out"] == []
    # XE9680 has 8 compute NICs, DL380a 4: four rails pair up, every one carried traffic
    assert len(g["pairs"]) == 4 and all(p["outcome"] == "pass" and p["value"] > 0
                                        for p in g["pairs"])
    assert g["allreduce"]["correct"] is True and g["allreduce"]["outcome"] == "pass"
    for n in NODES:  # ... but nothing failed, on the nodes or between them
        j = _judgement(tmp_path, n)
        assert j["outcome"] == "PARTIAL" and j.get("rack_verdicts", []) == []
    print("rack step (healthy):", json.dumps({"allreduce": g["allreduce"]["value"],
                                              "rails": [p["value"] for p in g["pairs"]]}))


def test_ib_port_down_is_named_by_the_pairwise_step(healed, tmp_path):
    hit = lab.fault("lab-gpu02", "ib-port-down")  # its first compute NIC: rail 0
    code = _validate(tmp_path, formats="json,html")
    (g,) = _report(tmp_path, "rack")["rack_checks"]
    assert code == 1 and g["outcome"] == "FAIL"
    bad = [p for p in g["pairs"] if p["outcome"] == "fail"]
    assert [(p["rail"], p["value"]) for p in bad] == [(0, 0.0)], hit
    assert bad[0]["refused"] == "lab-gpu02 mlx5_0 port Down"
    assert g["suspects"] == [{"node": "lab-gpu02", "rail": 0, "nic": "mlx5_0",
                              "why": "its port refused the rail"}]
    for n in NODES:  # both ends get a FAIL item naming the link
        j = _judgement(tmp_path, n)
        (v,) = j["rack_verdicts"]
        assert j["outcome"] == "FAIL" and v["scope"] == "rack"
        assert "lab-gpu01 mlx5_0" in v["component"] and "lab-gpu02 mlx5_0" in v["component"]
        assert "rail 0" in v["component"]
    node_report = _report(tmp_path, "node-lab-gpu01")
    assert [v["component"] for v in node_report["verdicts"] if v["scope"] == "rack"] == [
        "link lab-gpu01 mlx5_0 <-> lab-gpu02 mlx5_0 (rail 0)"]
    # the faulted node's own suite names its port too
    assert _hits(_judgement(tmp_path, "lab-gpu02")["verdicts"], "ib-port-down",
                 read_node_state(healed.spec("lab-gpu02").root)["faults"][-1]["component"])
    assert "Rack-level checks" in (tmp_path / "report" / "rack.html").read_text()


def test_two_faults_on_one_node_are_reported_separately(healed, tmp_path):
    node = "lab-gpu01"
    faults = _faults((node, healed.spec(node).root),
                     [("nvlink-down", None), ("nvme-missing", None)])
    code = _validate(tmp_path / "run", node)
    doc = _report(tmp_path / "run", f"node-{node}")
    assert code == 1 and doc["outcome"] == "FAIL"
    found = {f["kind"]: _hits(doc["verdicts"], f["kind"], f["component"]) for f in faults}
    assert all(found.values()), {k: len(v) for k, v in found.items()}
    # separately: no verdict stands for both faults
    assert not {id(v) for v in found["nvlink-down"]} & {id(v) for v in found["nvme-missing"]}
    assert {v["check"] for v in found["nvlink-down"]}.isdisjoint(
        {v["check"] for v in found["nvme-missing"]})


def test_faults_on_two_nodes_each_in_their_own_report_and_the_rack_report(healed, tmp_path):
    records = {
        "lab-gpu01": _faults(("lab-gpu01", healed.spec("lab-gpu01").root),
                             [("pcie-downtrained", "3")])[-1],
        "lab-gpu02": _faults(("lab-gpu02", healed.spec("lab-gpu02").root),
                             [("nvme-missing", None)])[-1],
    }
    code = _validate(tmp_path)
    rack = _report(tmp_path, "rack")
    assert code == 1 and rack["outcome"] == "FAIL"
    rows = {n["node"]: n for n in rack["nodes"]}
    for node, rec in records.items():
        other = next(r for n, r in records.items() if n != node)
        doc = _report(tmp_path, f"node-{node}")
        assert doc["outcome"] == "FAIL"
        assert _hits(doc["verdicts"], rec["kind"], rec["component"]), node
        assert not _hits(doc["verdicts"], other["kind"], other["component"]), node
        checks, _ = expected_failure(rec["kind"], rec["component"], raid=False)
        assert rows[node]["outcome"] == "FAIL"
        assert {f["check"] for f in rows[node]["failures"]} & set(checks), rows[node]
    # the links between them are healthy: neither fault is a fabric fault
    (g,) = rack["rack_checks"]
    assert g["outcome"] == "PASS", g["outcome_reason"]
