"""The BMC's GPU serials, end to end without the lab: the REAL lab Redfish service (in a
thread, tree built from hwsim's node state) read by validate's out-of-band step
(rackready.steps.oob), compared with the serials the node's tools report from the same
hwsim state (rackready.decide.integrity.bmc_serial_findings)."""

from __future__ import annotations

import pytest
from test_bmc_integration import LabBmc

from rackready.decide.integrity import bmc_serial_findings
from rackready.steps import oob

pytestmark = pytest.mark.integration  # the lab BMC served, the controller's step


@pytest.fixture(params=["dell", "hpe"])
def bmc(request, tmp_path):
    server = LabBmc(tmp_path, request.param)
    yield server
    server.stop()


def _node_result(bmc: LabBmc) -> dict:
    """gpu.serial as the node's gpu.inventory measures it (nvidia-smi over hwsim's state)."""
    return {"checks": [{"check": "gpu.inventory", "status": "ok", "measurements": [
        {"name": "gpu.serial", "value": g["serial"], "unit": "", "labels": {"gpu": str(g["index"])}}
        for g in bmc.hw["gpus"]]}]}


def _read(bmc: LabBmc) -> dict:
    return oob.collect(bmc.node_entry(), baseline_dir=bmc.baseline, timeout=5)


def test_the_lab_bmc_lists_the_node_gpus_and_a_mismatch_names_both(bmc):
    rec = _read(bmc)
    listed = rec["identity"]["gpus"]
    assert [g["serial"] for g in listed] == [g["serial"] for g in bmc.hw["gpus"]]
    assert len(listed) == 8 and all(g["slot"] and g["model"] for g in listed)
    assert bmc_serial_findings(rec, _node_result(bmc)) == ([], "")
    hit = bmc.fault("bmc-gpu-serial-mismatch", "3")["component"]
    assert hit["serial"] == bmc.hw["gpus"][2]["serial"] != hit["bmc_serial"]
    found, note = bmc_serial_findings(_read(bmc), _node_result(bmc))
    (f,) = found
    assert f["outcome"] == "FAIL" and note == ""
    assert f"{hit['bmc_serial']} (at GPU 3)" in f["problem"]
    assert f"{hit['serial']} (GPU 2)" in f["problem"]
    bmc.heal()
    assert bmc_serial_findings(_read(bmc), _node_result(bmc)) == ([], "")
