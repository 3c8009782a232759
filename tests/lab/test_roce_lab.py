"""RoCE as NCCL uses it, on the lab's RoCE node (lab-gpu01, provisioned by rdma_network):
the settings the role applied are read back on the node and NCCL's traffic class is the
lossless one; a NIC whose ECN was switched off or whose DSCP map drifted fails the node
naming the NIC, its interface and the priority or DSCP (both kinds over SSH; the other
nic-rail kinds are covered by test_faults_lab.py's family run).
"""

from __future__ import annotations

import json

import pytest
from fault_expectations import naming_failures

from rackready.steps.validate import run_validation
from rackready_lab import lab
from rackready_lab.hwsim.sysroot import read_node_state

pytestmark = pytest.mark.lab

NODE = "lab-gpu01"  # the lab's RoCE node (config.DEFAULT_PLATFORMS)


def _validate(tmp_path, name: str) -> dict:
    out = tmp_path / name
    code = run_validation(NODE, "lab", "quick", str(out), formats="json",
                          only="network.roce_qos")
    assert code == 1  # a narrowed run is never an acceptance
    return json.loads((out / NODE / "judgement.json").read_text())


def _measured(tmp_path, name: str, metric: str) -> list:
    result = json.loads((tmp_path / name / NODE / "result.json").read_text())
    return [m["value"] for c in result["checks"] for m in c.get("measurements", [])
            if m["name"] == metric]


def _roce(j: dict) -> list[dict]:
    return [v for v in j["verdicts"] if v["check"] == "network.roce_qos"]


def test_the_role_s_settings_read_back_and_nccl_uses_the_lossless_class(provisioned_lab,
                                                                        tmp_path):
    lab.heal(NODE)
    j = _validate(tmp_path, "healthy")
    verdicts = _roce(j)
    assert verdicts and all(v["outcome"] == "pass" for v in verdicts), \
        [v["message"] for v in verdicts if v["outcome"] != "pass"]
    metrics = {v["metric"] for v in verdicts}
    assert {"roce.ecn_np_enabled", "roce.ecn_rp_enabled", "roce.dscp_priority",
            "roce.pfc_priority_enabled", "roce.trust"} <= metrics
    # what every NCCL workload of the run is given: the role's DSCP in the upper six bits
    # of the traffic class (rdma_network_roce_dscp 26 -> NCCL_IB_TC 104), its GID index
    assert _measured(tmp_path, "healthy", "nccl.ib_tc") == [104]
    assert _measured(tmp_path, "healthy", "nccl.ib_gid_index") == [3]
    # every RoCE compute NIC is read, not just the first
    nics = [n for n in read_node_state(provisioned_lab.spec(NODE).root)["nics"]
            if n["role"] == "compute" and n["link_layer"] == "Ethernet"]
    ecn = {v["labels"].get("nic") for v in verdicts if v["metric"] == "roce.ecn_np_enabled"}
    assert len(nics) >= 2 and {n["name"] for n in nics} <= ecn, ecn


@pytest.mark.parametrize("kind", ["ecn-off", "dscp-map-drift"])
def test_a_drifted_nic_fails_the_node_naming_it(provisioned_lab, tmp_path, kind):
    lab.fault(NODE, kind)
    try:
        record = read_node_state(provisioned_lab.spec(NODE).root)["faults"][-1]
        j = _validate(tmp_path, kind)
    finally:
        lab.heal(NODE)
    assert j["outcome"] == "FAIL"
    failed = [v for v in j["verdicts"] if v["outcome"] == "fail"]
    assert naming_failures(failed, kind, record["component"], raid=False), \
        (record["component"], [v["message"] for v in failed])
    # the other NICs kept their settings: only the faulted one is named
    named = {v["labels"].get("nic") for v in failed if v["check"] == "network.roce_qos"}
    assert named == {record["component"]["name"]}, named
