"""One lab.fault kind of each fault family (tests/fault_expectations.py FAULT_FAMILIES),
validated over SSH on a provisioned lab node: the node fails, and the failing check names
the faulted part (GPU serial, NVLink, NIC port, ...). Every kind runs through hwsim in
tests/unit/lab/test_validation_hwsim.py with the same expectation.

Only the hardware checks run here (`--only`): a fault lives in the hardware state,
which the CPU workloads never read; the healthy node's full run is in
test_validate_lab.py.
"""

from __future__ import annotations

import json

import pytest
from fault_expectations import HARDWARE_CHECKS, LAB_FAULT_KINDS, naming_failures

from rackready.steps.validate import run_validation
from rackready_lab import lab
from rackready_lab.hwsim.sysroot import read_node_state

pytestmark = pytest.mark.lab

NODE = "lab-gpu01"


def _validate(tmp_path, name: str) -> dict:
    """The controller's judgement of a hardware-checks-only run (a narrowed run: exit 1)."""
    out = tmp_path / name
    code = run_validation(NODE, "lab", "quick", str(out), formats="json",
                          only=",".join(HARDWARE_CHECKS))
    result = json.loads((out / NODE / "judgement.json").read_text())
    assert code == 1 and result["scope"]["partial"]
    return result


def test_healthy_node_passes_the_hardware_checks(provisioned_lab, tmp_path):
    lab.heal(NODE)
    result = _validate(tmp_path, "healthy")
    failed = [v["message"] for v in result["verdicts"] if v["outcome"] == "fail"]
    # every check passed, and a narrowed run is still never an acceptance
    assert result["outcome"] == "PARTIAL" and failed == []


@pytest.mark.parametrize("kind", LAB_FAULT_KINDS)
def test_fault_fails_the_node_naming_the_part(provisioned_lab, tmp_path, kind):
    lab.fault(NODE, kind)
    try:
        record = read_node_state(provisioned_lab.spec(NODE).root)["faults"][-1]
        result = _validate(tmp_path, kind)
    finally:
        lab.heal(NODE)
    assert result["outcome"] == "FAIL"
    # the lab has no md: its RAID checks are not applicable (rackready_validation_without)
    failed = [v for v in result["verdicts"] if v["outcome"] == "fail"]
    assert naming_failures(failed, kind, record["component"], raid=False), \
        (record, [(v["check"], v["message"]) for v in failed])
