"""A rack with two nodes of one model: the lab grown to three nodes (lab-gpu03 is a
second XE9680-like node beside lab-gpu01), provisioned, validated as one inventory.

Every real rack is many nodes of one model, so the reference job's loss curves are
compared across nodes there; the two-node demo (two models) never does that.
"""

from __future__ import annotations

import json

import pytest
import yaml

from rackready.lab import lab
from rackready.validate import run_validation

pytestmark = pytest.mark.lab

NODES = ("lab-gpu01", "lab-gpu02", "lab-gpu03")


@pytest.fixture(scope="module")
def three_nodes(provisioned_lab):
    from rackready.provision import run_playbook

    specs = lab.up(3, progress=lambda msg: print(f"[lab] {msg}"))
    assert [s.name for s in specs] == list(NODES)
    assert specs[2].platform == specs[0].platform  # two of one model
    result = run_playbook(provisioned_lab.inventory, limit="lab-gpu03", quiet=True)
    assert result.rc == 0, result.failures
    lab.reboot("lab-gpu03")
    for name in NODES:
        lab.heal(name)
    return specs


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


@pytest.fixture
def calibrated(three_nodes):
    """The two XE9680-like nodes calibrated at the quick level; the overlay is removed
    after the test (the lab's other tests judge against the profile's own limits)."""
    from rackready.calibrate import run_calibration
    from rackready.calibration import overlay_path
    from rackready.inventory import inventory_path

    path = overlay_path(inventory_path("lab").parent, three_nodes[0].profile)
    try:
        yield run_calibration, path
    finally:
        path.unlink(missing_ok=True)
        for name in NODES:
            lab.heal(name)


def test_calibrated_floors_still_fail_a_slow_rail_and_a_thermal_throttle(calibrated,
                                                                          tmp_path, capsys):
    run_calibration, path = calibrated
    code = run_calibration("lab", "lab-gpu01,lab-gpu03", level="quick",
                           out=str(tmp_path / "calibrate"))
    assert code == 0, capsys.readouterr().out
    overlay = yaml.safe_load(path.read_text())
    assert [n["name"] for n in overlay["nodes"]] == ["lab-gpu01", "lab-gpu03"]
    assert any(t["metric"] == "rdma.gpudirect_bw_gbps" for t in overlay["thresholds"])
    lab.fault("lab-gpu03", "slow-rail")
    lab.fault("lab-gpu03", "thermal-throttle")
    run_validation("lab-gpu03", "lab", "quick", str(tmp_path / "after"), formats="json")
    doc = json.loads((tmp_path / "after" / "report" / "node-lab-gpu03.json").read_text())
    assert doc["outcome"] == "FAIL"
    assert doc["limits"]["calibration"].startswith("site calibration")
    failed = {v["check"] for v in doc["verdicts"] if v["outcome"] == "fail"}
    assert {"rdma.gpudirect_bw", "gpu.health"} <= failed, failed
    rail = [v for v in doc["verdicts"] if v["metric"] == "rdma.gpudirect_bw_gbps"
            and v["outcome"] == "fail"]
    assert rail and all(v["threshold"]["tier"] == "calibrated" for v in rail)


def test_calibrating_with_a_faulty_node_names_it_and_writes_nothing(calibrated, tmp_path,
                                                                     capsys):
    run_calibration, path = calibrated
    lab.fault("lab-gpu03", "slow-rail")
    code = run_calibration("lab", "lab-gpu01,lab-gpu03", level="quick",
                           out=str(tmp_path / "calibrate"))
    out = capsys.readouterr().out
    assert code == 1 and "refused: lab-gpu03" in out and "no overlay written" in out
    assert not path.exists()
