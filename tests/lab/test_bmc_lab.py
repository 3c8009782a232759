"""The lab's BMCs (rackready_lab/redfish): one HTTPS Redfish service per booted node,
at the inventory's rackready_bmc_address, with the vault's credentials and the lab CA;
`invoke provision --inventory lab --tags bios` converges and a rerun changes nothing;
`invoke validate` reads each BMC, fails a node on each BMC fault naming the part, and
bios-drift is detected and corrected by the role.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from rackready.site.paths import PROJECT_ROOT
from rackready_lab import lab
from rackready_lab.hwsim.sysroot import read_node_state
from rackready_lab.redfish import bmc
from rackready_lab.redfish.faults import FAULT_KINDS

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


IDRAC_BIOS = "/redfish/v1/Systems/System.Embedded.1/Bios"
IDRAC_JOBS = "/redfish/v1/Managers/iDRAC.Embedded.1/Jobs"


def _job_states(address: str) -> dict[str, str]:
    return {m["@odata.id"]: _get(address, m["@odata.id"])["JobState"]
            for m in _get(address, IDRAC_JOBS)["Members"]}


def _bios_job_through_reboot(spec, attributes: dict[str, str]) -> None:
    """PATCH the iDRAC's BIOS settings to apply OnReset: the job is Scheduled, and
    lab.reboot completes it (as POST does)."""
    address = bmc.address(spec)
    creds = bmc.credentials()
    body = json.dumps({"Attributes": attributes,
                       "@Redfish.SettingsApplyTime": {"ApplyTime": "OnReset"}}).encode()
    token = base64.b64encode(f"{creds['user']}:{creds['password']}".encode()).decode()
    req = urllib.request.Request(f"https://{address}{IDRAC_BIOS}/Settings", data=body,
                                 method="PATCH",
                                 headers={"Authorization": "Basic " + token,
                                          "Content-Type": "application/json"})
    ctx = ssl.create_default_context(cafile=str(bmc.ca_file()))
    states = _job_states(address)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            assert resp.status == 202
            job = resp.headers["Location"]
    except urllib.error.HTTPError as e:  # say what the BMC said, and which jobs it had
        raise AssertionError(f"PATCH {e.code}: {e.read()[:400]!r}; jobs before: {states}") from None
    assert _get(address, job)["JobState"] == "Scheduled"
    lab.reboot(spec.name)
    deadline = time.monotonic() + 30
    while _get(address, job)["JobState"] != "Completed" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _get(address, job)["JobState"] == "Completed"


def test_lab_reboot_completes_a_pending_bios_job(lab_nodes):
    spec = lab_nodes.spec("lab-gpu01")  # iDRAC-like
    address = bmc.address(spec)
    # a BIOS job an earlier provisioning left Scheduled (its reboot not yet made) blocks a
    # new one, as on an iDRAC (SYS011): power-cycle first so this test owns its job
    if any(st in ("Scheduled", "Running", "New") for st in _job_states(address).values()):
        lab.reboot(spec.name)
        deadline = time.monotonic() + 30
        while (any(st in ("Scheduled", "Running", "New")
                   for st in _job_states(address).values())
               and time.monotonic() < deadline):
            time.sleep(0.5)
    before = _get(address, IDRAC_BIOS)["Attributes"]["SriovGlobalEnable"]
    # SriovGlobalEnable: free under any system profile (ASPM/C-states follow SysProfile)
    _bios_job_through_reboot(spec, {"SriovGlobalEnable": "Disabled"})
    assert _get(address, IDRAC_BIOS)["Attributes"]["SriovGlobalEnable"] == "Disabled"
    # as it was: the later tests start from the lab the provision phase converged
    _bios_job_through_reboot(spec, {"SriovGlobalEnable": before})
    assert _get(address, IDRAC_BIOS)["Attributes"]["SriovGlobalEnable"] == before


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


# --- the feature end to end: `invoke provision --tags bios` and `invoke validate` ---------

INVOKE = str(Path(sys.executable).with_name("invoke"))


def _invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([INVOKE, *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=1800, check=False)


def _changed(out: str) -> dict[str, int]:
    return {m[0]: int(m[1]) for m in re.findall(r"^(\S+)\s+ok\s+changed=(\d+)", out, re.M)}


def _bios_converged(lab_nodes) -> None:
    """provision --tags bios; when it changed something, reboot (as the role asks) and
    run it again: in the end a run with changed=0 everywhere."""
    first = _invoke("provision", "--inventory", "lab", "--tags", "bios")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    runs = [first]
    if any(_changed(first.stdout).values()):
        lab.reboot_all(lab_nodes.names)  # the reboot the BIOS change asks for
        time.sleep(3)  # the iDRAC's configuration job runs through POST
        runs.append(_invoke("provision", "--inventory", "lab", "--tags", "bios"))
        assert runs[-1].returncode == 0, runs[-1].stdout[-2000:]
    changed = _changed(runs[-1].stdout)
    assert set(changed) == set(lab_nodes.names) and not any(changed.values()), runs[-1].stdout
    password = bmc.credentials()["password"]
    assert not any(password in r.stdout + r.stderr for r in runs)


def test_provision_bios_converges_and_a_rerun_changes_nothing(provisioned_lab):
    _bios_converged(provisioned_lab)
    attrs = _get(bmc.address(provisioned_lab.spec("lab-gpu01")),
                 "/redfish/v1/Systems/System.Embedded.1/Bios")["Attributes"]
    # the profile's settings, and the ones the BIOS derives from SysProfile
    assert attrs["SysProfile"] == "PerfOptimized" and attrs["ProcCStates"] == "Disabled"


def _validate_bmc(tmp_path, node: str, name: str, formats: str = "json") -> dict:
    """`invoke validate` narrowed to one cheap node check: the out-of-band step always
    runs beside it (a narrowed run is PARTIAL: exit 1 even when all passed)."""
    out = tmp_path / name
    done = _invoke("validate", "--node", node, "--inventory", "lab", "--level", "quick",
                   "--only", "gpu.inventory", "--out", str(out),
                   "--report-formats", formats)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    assert bmc.credentials()["password"] not in done.stdout + done.stderr
    return json.loads((out / node / "judgement.json").read_text())


def _bmc_failures(result: dict) -> list[dict]:
    return [v for v in result["verdicts"] if v["check"] == "bmc" and v["outcome"] == "fail"]


@pytest.mark.parametrize("node", ["lab-gpu01", "lab-gpu02"])
def test_validate_records_identity_and_bios_drift_is_corrected(provisioned_lab, tmp_path, node):
    _bios_converged(provisioned_lab)
    lab.heal(node)
    healthy = _validate_bmc(tmp_path, node, "healthy", formats="json,html")
    assert _bmc_failures(healthy) == [], _bmc_failures(healthy)
    ident = healthy["bmc"]["identity"]
    chassis = read_node_state(provisioned_lab.spec(node).root)["chassis"]
    assert ident["model"] == chassis["product"] and chassis["bmc"]["firmware"] in ident["bmc"]
    assert {"bios", "bmc", "cpld", "gpu", "nic", "drive", "psu"} <= {
        f["component"] for f in ident["firmware"]}
    # the node report shows the BMC's identity and firmware on page 1
    html = (tmp_path / "healthy" / "report" / f"node-{node}.html").read_text()
    assert "System (BMC)" in html and chassis["product"] in html and "Firmware" in html
    drift = lab.fault(node, "bios-drift")
    attr = drift.split()[2]  # "BIOS attribute <name> changed from ..."
    bad = _bmc_failures(_validate_bmc(tmp_path, node, "drift"))
    assert any(attr in v["message"] for v in bad), bad
    _bios_converged(provisioned_lab)  # the role corrects it (and the reboot applies it)
    assert _bmc_failures(_validate_bmc(tmp_path, node, "corrected")) == []
    lab.heal(node)


@pytest.mark.parametrize("kind,words", [
    ("psu-redundancy-lost", ("bmc.psu.health", "serial")),
    ("fan-failed", ("bmc.fan.health", "Fan")),
    ("sel-critical-entry", ("bmc.log.critical_new", "DIMM")),
    ("bmc-unreachable", ("unreachable",)),
])
def test_bmc_fault_fails_the_node_through_invoke_validate(provisioned_lab, tmp_path, kind,
                                                          words):
    node = "lab-gpu02" if kind == "fan-failed" else "lab-gpu01"
    other = "lab-gpu02" if node == "lab-gpu01" else "lab-gpu01"
    lab.fault(node, kind)
    try:
        time.sleep(1)
        result = _validate_bmc(tmp_path, node, kind)
        fine = _validate_bmc(tmp_path, other, f"{kind}-other")
    finally:
        lab.heal(node)
    assert result["outcome"] == "FAIL"
    bad = _bmc_failures(result)
    text = [f"{v['metric']} {v['message']} {v.get('remediation', '')}" for v in bad]
    assert any(all(w in t for w in words) for t in text), text
    assert _bmc_failures(fine) == []  # that node fails alone


def test_a_bmc_listing_another_gpu_serial_fails_the_node_naming_both(provisioned_lab,
                                                                    tmp_path):
    """The BMC's GPU serials against the node's (rackready.decide.integrity): two narrowed
    validate runs, about 3 s each on the lab."""
    node = "lab-gpu01"
    serials = [g["serial"] for g in read_node_state(provisioned_lab.spec(node).root)["gpus"]]
    hit = lab.fault(node, "bmc-gpu-serial-mismatch", "3")
    try:
        swapped = _validate_bmc(tmp_path, node, "swapped")
    finally:
        lab.heal(node)
    listed = re.search(r"the BMC lists serial (\S+),", hit)
    assert listed and listed[1] not in serials, hit
    assert swapped["outcome"] == "FAIL"
    reason = swapped["outcome_reason"]
    assert "differ between the node and its BMC" in reason
    assert f"{listed[1]} (at GPU 3)" in reason and f"{serials[2]} (GPU 2)" in reason, reason
    healed = _validate_bmc(tmp_path, node, "healed")
    assert [g["serial"] for g in healed["bmc"]["identity"]["gpus"]] == serials
    assert not [p for p in healed["problems"] if "BMC" in p], healed["problems"]
    assert not healed["integrity"], healed["integrity"]
