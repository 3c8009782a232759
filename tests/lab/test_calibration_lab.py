"""Site calibration on the three-node lab, over SSH with real validation runs.

`invoke calibrate --only <the hardware checks>` validates the known-good nodes at the
standard level and writes the profile's overlay: the two XE9680-like nodes (lab-gpu01,
lab-gpu03) share a profile; the DL380a-like lab-gpu02 is the only node of its own, which
no calibration can use alone. (The whole standard level of two lab nodes takes minutes of
CPU workloads that calibrate nothing in the lab; the hardware checks take seconds.)
In the lab the calibratable floor is the GPUDirect rail bandwidth (hwsim's ib_write_bw
answers at a stable per-port rate; the CPU workloads' lab smoke floors are no performance
expectation and are not calibrated). Then:

- the lab's slow-rail and thermal-throttle faults still fail the node (a calibration
  cannot absorb a gross fault);
- a rail at 85 % of its rate, above the profile's gross-fault line (only "below expected"
  without calibration), fails against the calibrated floor;
- a calibration set with that node in it is refused, naming it, and the overlay stays.
"""

from __future__ import annotations

import json

import pytest
import yaml
from fault_expectations import HARDWARE_CHECKS, naming_failures

from rackready.errors import UserError
from rackready.lab import lab
from rackready.lab.hwsim.sysroot import locked_node_state, read_node_state
from rackready.steps.calibrate import run_calibration
from rackready.steps.validate import run_validation

pytestmark = [pytest.mark.lab, pytest.mark.lab_phase("three-nodes")]

REFERENCES = "lab-gpu01,lab-gpu03"
SUSPECT = "lab-gpu03"
RAIL = "rdma.gpudirect_bw_gbps"
MILD = 0.85  # of the rail's rate: above the profile's gross line, under the floor
ONLY = ",".join(HARDWARE_CHECKS)
GROSS_LINE = 252.0  # Gb/s: the profile's gross-fault line for a rail (validation/profiles)


@pytest.fixture(scope="module")
def overlay(three_nodes, tmp_path_factory):
    """The overlay a healthy calibration wrote (removed afterwards: later lab tests judge
    against the profile's own limits)."""
    path = three_nodes.inventory.parent / "calibration" / "xe9680-h200-lab.yml"
    path.unlink(missing_ok=True)
    run = tmp_path_factory.mktemp("calibrate") / "healthy"
    code = run_calibration("lab", REFERENCES, level="standard", out=str(run), only=ONLY)
    assert code == 0  # its refusals, if any, are in the test's output
    assert path.exists()
    yield path
    path.unlink(missing_ok=True)


def _rail_limit(path) -> dict:
    doc = yaml.safe_load(path.read_text())
    limits = [t for t in doc["thresholds"] if t["metric"] == RAIL]
    assert len(limits) == 1, doc["thresholds"]
    return {**limits[0], "doc": doc}


def _hardware_run(tmp_path, name: str) -> dict:
    out = tmp_path / name
    run_validation(SUSPECT, "lab", "quick", str(out), formats="json",
                   only=",".join(HARDWARE_CHECKS))
    return json.loads((out / SUSPECT / "judgement.json").read_text())


def _mild_slow_rail() -> str:
    """The lab's slow-rail fault, made milder: that NIC carries 85 % of its rate."""
    lab.fault(SUSPECT, "slow-rail")
    with locked_node_state(lab.find(SUSPECT).root) as state:
        nic = next(n for n in state["nics"] if "bw_factor" in n)
        nic["bw_factor"] = MILD
    return nic["name"]


def test_calibration_writes_a_tighter_floor_with_its_provenance(overlay):
    limit = _rail_limit(overlay)
    doc = limit.pop("doc")
    assert [n["name"] for n in doc["nodes"]] == REFERENCES.split(",")
    assert all(n["gpu_serials"] for n in doc["nodes"])
    assert doc["level"] == "standard" and doc["profile"] == "xe9680-h200-lab"
    assert doc["checks"] == list(HARDWARE_CHECKS) and "only" in doc["source"]
    # hwsim's rails run at 96-97.5 % of 400 Gb/s: tighter than the 360 floor, and
    # never looser than the gross line
    assert 360 < limit["value"] < 390, limit
    assert "lab-gpu01" in limit["provenance"] and "lab-gpu03" in limit["provenance"]


def test_a_calibrated_run_says_so_and_a_healthy_node_passes(overlay, tmp_path):
    lab.heal(SUSPECT)
    judged = _hardware_run(tmp_path, "healthy")
    assert [v["message"] for v in judged["verdicts"] if v["outcome"] == "fail"] == []
    assert "site calibration" in judged["limits"]["calibration"]
    rails = [v for v in judged["verdicts"] if v["metric"] == RAIL]
    assert rails and {v["threshold"]["tier"] for v in rails} == {"calibrated"}


@pytest.mark.parametrize("kind", ["slow-rail", "thermal-throttle"])
def test_gross_faults_still_fail_the_node_naming_the_part(overlay, tmp_path, kind):
    lab.fault(SUSPECT, kind)
    try:
        record = read_node_state(lab.find(SUSPECT).root)["faults"][-1]
        judged = _hardware_run(tmp_path, kind)
    finally:
        lab.heal(SUSPECT)
    assert judged["outcome"] == "FAIL"
    assert naming_failures(judged["verdicts"], kind, record["component"], raid=False), \
        [(v["check"], v["message"]) for v in judged["verdicts"] if v["outcome"] == "fail"]


def test_a_mild_slow_rail_fails_against_the_calibrated_floor(overlay, tmp_path):
    try:
        nic = _mild_slow_rail()
        judged = _hardware_run(tmp_path, "mild")
    finally:
        lab.heal(SUSPECT)
    failed = [v for v in judged["verdicts"] if v["outcome"] == "fail" and v["metric"] == RAIL]
    assert judged["outcome"] == "FAIL" and len(failed) == 1, judged["outcome_reason"]
    assert failed[0]["threshold"]["tier"] == "calibrated"
    assert f"NIC {nic}" in failed[0]["message"] + " " + failed[0]["remediation"]
    # the same figure against the profile's own floor: above its gross line
    assert failed[0]["value"] > GROSS_LINE


def test_a_calibration_set_with_a_slow_node_refuses_it_and_keeps_the_overlay(
        overlay, tmp_path, capfd):
    before = overlay.read_text()
    try:
        _mild_slow_rail()
        code = run_calibration("lab", REFERENCES, level="standard", out=str(tmp_path / "c"),
                               only=ONLY)
    finally:
        lab.heal(SUSPECT)
    out = capfd.readouterr().out
    assert code == 1
    refused = [line for line in out.splitlines() if line.startswith("calibrate: refused:")]
    assert refused and all(SUSPECT in line for line in refused), out
    assert "no overlay written" in out and overlay.read_text() == before


def test_a_profile_with_one_node_cannot_be_calibrated(three_nodes):
    with pytest.raises(UserError, match="at least 2 known-good nodes of profile "
                                        "dl380a-gen12-h200nvl-lab; --nodes gives lab-gpu02"):
        run_calibration("lab", "lab-gpu01,lab-gpu02,lab-gpu03", level="standard")
