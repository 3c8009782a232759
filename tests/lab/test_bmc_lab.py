"""The lab's BMCs (rackready/lab/redfish): one HTTPS Redfish service per booted node,
at the inventory's rackready_bmc_address, with the vault's credentials and the lab CA.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request

import pytest
import yaml

from rackready.lab import lab
from rackready.lab.hwsim.sysroot import read_node_state
from rackready.lab.redfish import bmc
from rackready.lab.redfish.faults import FAULT_KINDS

pytestmark = pytest.mark.lab


def _hosts(lab_nodes) -> dict:
    groups = yaml.safe_load(lab_nodes.inventory.read_text())["all"]["children"]
    return {name: hv for g in groups.values() for name, hv in g["hosts"].items()}


def _get(address: str, path: str, password: str | None = None) -> dict:
    creds = bmc.credentials()
    token = base64.b64encode(f"{creds['user']}:{password or creds['password']}".encode())
    req = urllib.request.Request(f"https://{address}{path}",
                                 headers={"Authorization": "Basic " + token.decode()})
    ctx = ssl.create_default_context(cafile=str(bmc.ca_file()))
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        return json.loads(resp.read())


def test_each_node_has_its_bmc_at_the_inventory_address(lab_nodes):
    hosts = _hosts(lab_nodes)
    main = (lab_nodes.inventory.parent / "group_vars/all/main.yml").read_text()
    vault = (lab_nodes.inventory.parent / "group_vars/all/vault.yml").read_text()
    assert vault.startswith("$ANSIBLE_VAULT") and bmc.credentials()["password"] not in main
    for spec in lab_nodes.specs:
        address = hosts[spec.name]["rackready_bmc_address"]
        root = _get(address, "/redfish/v1")
        system = _get(address, root["Systems"]["@odata.id"])["Members"][0]["@odata.id"]
        chassis = read_node_state(spec.root)["chassis"]
        data = _get(address, system)
        assert data["Model"] == chassis["product"]
        assert chassis["serial"] in (data["SKU"], data["SerialNumber"])
        with pytest.raises(urllib.error.HTTPError) as err:
            _get(address, system, password="not-the-password")
        assert err.value.code == 401
        # out of band: the node itself cannot reach its BMC
        probe = lab_nodes.sh(spec.name, f"timeout 3 bash -c '</dev/tcp/{address}/443'",
                             check=False)
        assert probe.returncode != 0


def test_lab_reboot_completes_a_pending_bios_job(lab_nodes):
    spec = lab_nodes.spec("lab-gpu01")  # iDRAC-like
    address = bmc.address(spec)
    creds = bmc.credentials()
    settings = "/redfish/v1/Systems/System.Embedded.1/Bios/Settings"
    body = json.dumps({"Attributes": {"PcieAspmL1": "Disabled"},
                       "@Redfish.SettingsApplyTime": {"ApplyTime": "OnReset"}}).encode()
    token = base64.b64encode(f"{creds['user']}:{creds['password']}".encode()).decode()
    req = urllib.request.Request(f"https://{address}{settings}", data=body, method="PATCH",
                                 headers={"Authorization": "Basic " + token,
                                          "Content-Type": "application/json"})
    ctx = ssl.create_default_context(cafile=str(bmc.ca_file()))
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        assert resp.status == 202
        job = resp.headers["Location"]
    assert _get(address, job)["JobState"] == "Scheduled"
    lab.reboot(spec.name)
    deadline = time.monotonic() + 30
    while _get(address, job)["JobState"] != "Completed" and time.monotonic() < deadline:
        time.sleep(0.5)
    attrs = _get(address, "/redfish/v1/Systems/System.Embedded.1/Bios")["Attributes"]
    assert attrs["PcieAspmL1"] == "Disabled"


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_bmc_fault_shows_and_heals(lab_nodes, kind):
    spec = lab_nodes.spec("lab-gpu02")  # iLO-like
    address = bmc.address(spec)
    hit = lab.fault(spec.name, kind)
    try:
        assert hit and kind in next(s for s in lab.status() if s.name == spec.name).faults
        if kind == "bmc-unreachable":
            time.sleep(1)
            with pytest.raises(urllib.error.URLError):
                _get(address, "/redfish/v1")
        else:
            assert _get(address, "/redfish/v1")["Vendor"] == "HPE"
    finally:
        lab.heal(spec.name)
    time.sleep(1)
    assert _get(address, "/redfish/v1")["Vendor"] == "HPE"
    assert kind not in next(s for s in lab.status() if s.name == spec.name).faults
