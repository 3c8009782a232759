"""The out-of-band step's two halves against each other, no lab needed: the REAL lab Redfish
service (rackready_lab/redfish, in a thread on 127.0.0.1, lab CA, tree built from hwsim's
node state) driven by the REAL controller code: the bios module's run() (what the role's
task calls), the lab's own reset hook and fault kinds, and validate's out-of-band step
(rackready.steps.oob) judged by the real judge against the lab profiles.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rackready.redfish.client import AuthError, Client, RedfishError
from rackready.site.bmc import BmcAccess, Secret
from rackready.site.inventory import Node
from rackready.site.paths import PROJECT_ROOT
from rackready.steps import envelope, oob
from rackready_lab.hwsim.state import build_state
from rackready_lab.redfish import ca, store
from rackready_lab.redfish import resources as rf
from rackready_lab.redfish.faults import apply_fault, heal
from rackready_lab.redfish.server import BmcService
from rackready_lab.redfish.tree import build
from validation.judge import judge
from validation.model import CheckResult
from validation.profile import load_profile

pytestmark = pytest.mark.integration  # the lab BMC served, the controller's steps

USER, PASSWORD = "root", "integ-Lab-pw-5c2e91"

_spec = importlib.util.spec_from_file_location("rackready_bios",
                                               PROJECT_ROOT / "library" / "rackready_bios.py")
bios_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bios_module)  # type: ignore[union-attr]

PLATFORMS = {"dell": ("xe9680-h200", "xe9680"), "hpe": ("dl380a-gen12-h200nvl", "dl380a")}


class LabBmc:
    """One lab BMC as lab.up runs it, in a thread: BmcService over a state file."""

    def __init__(self, tmp: Path, vendor: str) -> None:
        self.vendor = vendor
        self.platform, self.bios_profile = PLATFORMS[vendor]
        self.node = "lab-gpu01" if vendor == "dell" else "lab-gpu02"
        tmp.mkdir(parents=True, exist_ok=True)
        ca.ensure_ca(tmp)
        cert, key = ca.issue(tmp, f"{self.node}-bmc", "127.0.0.1")
        self.cafile = str(tmp / "ca.pem")
        self.hw = build_state(self.platform, self.node)
        self.state_path = tmp / "state.json"
        store.write(self.state_path, build(self.hw))
        self.service = BmcService(self.state_path, "127.0.0.1", 0, cert, key, USER, PASSWORD)
        self.thread = threading.Thread(target=self.service.serve, daemon=True)
        self.thread.start()
        assert self.service.ready.wait(10)
        self.address = f"127.0.0.1:{self.service.port}"
        self.baseline = tmp / "baseline"

    def stop(self) -> None:
        self.service.stop()
        self.thread.join(10)

    # --- the lab's side ------------------------------------------------------------
    def power_cycle(self) -> None:
        """What lab.reboot's hook does (rackready_lab.redfish.bmc.power_cycle)."""
        with store.locked(self.state_path) as state:
            rf.host_reset(state)

    def fault(self, kind: str, target: str | None = None) -> dict[str, Any]:
        """What `invoke lab.fault` does (rackready_lab.redfish.bmc.fault)."""
        with store.locked(self.state_path) as state:
            new = apply_fault(state, kind, target)
            state.clear()
            state.update(new)
        return new["faults"][-1]

    def heal(self) -> None:
        with store.locked(self.state_path) as state:
            new = heal(state)
            state.clear()
            state.update(new)

    # --- the controller's side ----------------------------------------------------
    def role_params(self, password: str = PASSWORD, **extra: Any) -> dict[str, Any]:
        """The module arguments roles/bios/tasks/main.yml builds from the role's profile."""
        prof = yaml.safe_load((PROJECT_ROOT / "roles" / "bios" / "profiles"
                               / f"{self.bios_profile}.yml").read_text())
        return {"address": self.address, "user": USER, "password": password,
                "ca_file": self.cafile, "tls_insecure_skip_verify": False,
                "attributes": {k: v["value"] for k, v in prof["set"].items()},
                "implied": {k: v["value"] for k, v in (prof.get("implied") or {}).items()},
                "profile": self.bios_profile, "node": self.node, "timeout": 5,
                "job_timeout": 10, "poll": 0.1, "reboot": False, "reboot_timeout": 10,
                **extra}

    def bios(self, **extra: Any) -> dict[str, Any]:
        result = bios_module.run(self.role_params(**extra), False)
        if result["bmc_time"]:  # the role's "Record the provisioning time" task
            self.baseline.mkdir(exist_ok=True)
            (self.baseline / f"{self.node}.json").write_text(
                f'{{"node": "{self.node}", "bmc_time": "{result["bmc_time"]}"}}')
        return result

    def node_entry(self, password: str = PASSWORD) -> Node:
        access = BmcAccess(self.address, USER, Secret(password), self.cafile)
        return Node(name=self.node, address="10.213.7.11", profile=f"{self.platform}-lab",
                    platform=self.platform, fabric="ib", user="rradmin", port=22,
                    key_file=None, known_hosts=None, sysroot="/", lab=True,
                    bmc=lambda: access)

    def validate(self, password: str = PASSWORD) -> tuple[dict[str, Any], list]:
        """validate's out-of-band step and its failing verdicts under the lab profile (the
        envelope's aside: it is measured only while a suite runs, rackready.steps.envelope)."""
        rec = oob.collect(self.node_entry(password), baseline_dir=self.baseline, timeout=5)
        verdicts = judge([CheckResult.from_dict(rec["check"])],
                         load_profile(f"{self.platform}-lab"))
        return rec, [v for v in verdicts if v.outcome == "fail"
                     and v.metric not in envelope.METRICS]

    def current(self) -> dict[str, Any]:
        with Client(self.address, USER, PASSWORD, ca_file=self.cafile) as c:
            system = c.get(c.get("/redfish/v1/Systems")["Members"][0]["@odata.id"])
            return c.get(system["Bios"]["@odata.id"])["Attributes"]

    def job_state(self, job: str) -> str:
        with Client(self.address, USER, PASSWORD, ca_file=self.cafile) as c:
            return c.get(f"/redfish/v1/Managers/iDRAC.Embedded.1/Jobs/{job}")["JobState"]


@pytest.fixture(autouse=True)
def fast_post(monkeypatch):
    monkeypatch.setattr(rf, "JOB_RUN_S", 0.1)  # a BIOS job runs 0.1 s after the reset


@pytest.fixture(params=["dell", "hpe"])
def bmc(request, tmp_path):
    server = LabBmc(tmp_path, request.param)
    yield server
    server.stop()


def _converge(bmc: LabBmc) -> None:
    """Provision (bios), reboot, and wait until the settings are in force."""
    r1 = bmc.bios()
    assert r1["changed"] and r1["reboot_required"], r1["msg"]
    assert "REBOOT REQUIRED" in r1["msg"]
    if bmc.vendor == "dell":
        assert r1["job"].startswith("JID_") and bmc.job_state(r1["job"]) == "Scheduled"
    r2 = bmc.bios()  # before the reboot: nothing new to send
    assert not r2["changed"] and r2["reboot_required"], r2["msg"]
    bmc.power_cycle()
    deadline = time.monotonic() + 5
    if bmc.vendor == "dell":
        while bmc.job_state(r1["job"]) != "Completed" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert bmc.job_state(r1["job"]) == "Completed"
    attrs = bmc.current()
    want = bmc.role_params()
    assert {k: attrs[k] for k in want["attributes"]} == want["attributes"]
    # Dell: C-states, C1E and ASPM L1 follow SysProfile PerfOptimized at POST
    assert {k: attrs[k] for k in want["implied"]} == want["implied"]
    r3 = bmc.bios()
    assert not r3["changed"] and not r3["reboot_required"], r3["msg"]
    assert r3["bmc_time"]
    time.sleep(1.05)  # BMC log times are whole seconds: later entries are after provisioning


def test_bios_converges_then_validate_passes_with_identity(bmc):
    _converge(bmc)
    rec, failing = bmc.validate()
    assert rec["check"]["status"] == "ok" and failing == [], failing
    ident = rec["identity"]
    chassis = bmc.hw["chassis"]
    assert ident["model"] == chassis["product"] and chassis["serial"] in (
        ident["serial"], ident["service_tag"])
    assert ident["chassis_serial"]
    classes = {f["component"] for f in ident["firmware"]}
    wanted = {"bios", "bmc", "cpld", "gpu", "nic", "drive", "psu"} | (
        {"hgx"} if bmc.vendor == "dell" else set())
    assert wanted <= classes, classes
    versions = {f["component"]: f["version"] for f in ident["firmware"]}
    assert versions["bmc"] == chassis["bmc"]["firmware"]
    gpu_vbios = {f["version"] for f in ident["firmware"] if f["component"] == "gpu"}
    assert gpu_vbios == {g["vbios"] for g in bmc.hw["gpus"]}
    assert {d["fw"] for d in bmc.hw["nvme"]} <= {f["version"] for f in ident["firmware"]
                                                 if f["component"] == "drive"}
    assert len(ident["psus"]) >= 4 and all(p["serial"] and p["model"] for p in ident["psus"])
    # the firmware floors were judged (not merely recorded)
    verdicts = judge([CheckResult.from_dict(rec["check"])],
                     load_profile(f"{bmc.platform}-lab"))
    judged = {v.labels.get("component") for v in verdicts
              if v.metric == "bmc.firmware.version" and v.outcome == "pass"}
    assert {"bios", "bmc"} <= judged
    assert any(v.metric == "bmc.bios.matches_profile" and v.outcome == "pass"
               for v in verdicts)


def test_bios_drift_is_detected_and_the_role_corrects_it(bmc):
    _converge(bmc)
    hit = bmc.fault("bios-drift")["component"]
    rec, failing = bmc.validate()
    names = {v.labels["bios"].split()[0] for v in failing
             if v.metric == "bmc.bios.matches_profile"}
    assert hit["name"] in names, failing
    assert all(v.metric == "bmc.bios.matches_profile" for v in failing)
    if bmc.vendor == "dell":  # the system profile drifted: its C-states went with it
        assert {"SysProfile", "ProcCStates", "ProcC1E", "PcieAspmL1"} <= names
    fixed = bmc.bios(reboot=True)  # the role, allowed to reboot: resets and waits
    assert fixed["changed"] and fixed["rebooted"] and fixed["applied"] == {
        hit["name"]: hit["was"]}
    assert bmc.bios()["changed"] is False
    rec, failing = bmc.validate()
    assert failing == [], failing


@pytest.mark.parametrize("kind,metric,part", [
    ("psu-redundancy-lost", "bmc.psu.health", "psu"),
    ("fan-failed", "bmc.fan.health", "fan"),
    ("sel-critical-entry", "bmc.log.critical_new", "entry"),
])
def test_each_hardware_fault_fails_naming_the_part(bmc, kind, metric, part):
    _converge(bmc)
    comp = bmc.fault(kind)["component"]
    rec, failing = bmc.validate()
    assert rec["check"]["status"] == "ok"
    hits = [v for v in failing if v.metric == metric]
    assert hits, failing
    label = hits[0].labels[part]
    if kind == "psu-redundancy-lost":
        assert comp["name"] in label and comp["serial"] in label
        assert any(v.metric == "bmc.psu.redundancy" for v in failing)
    elif kind == "fan-failed":
        assert label == comp["name"]
    else:
        assert comp["part"] in label and comp["id"] in label
    bmc.heal()
    assert bmc.validate()[1] == []  # healed, and the fault's log entries gone with it


def test_unreachable_bmc_fails_that_node_alone(tmp_path):
    dell, hpe = LabBmc(tmp_path / "d", "dell"), LabBmc(tmp_path / "h", "hpe")
    try:
        dell.fault("bmc-unreachable")
        deadline = time.monotonic() + 5
        while dell.service.ready.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        rec, failing = dell.validate()
        assert rec["check"]["status"] == "error" and "unreachable" in rec["problem"]
        assert failing and failing[0].check == "bmc"
        with pytest.raises(RedfishError, match="unreachable"):
            dell.bios()
        rec, _ = hpe.validate()  # the other node's BMC is read as usual
        assert rec["check"]["status"] == "ok" and rec["identity"]["model"]
    finally:
        dell.stop()
        hpe.stop()


def test_wrong_password_is_one_line_and_never_shown(bmc):
    wrong = PASSWORD + "-not"
    with pytest.raises(AuthError) as err:
        bios_module.run(bmc.role_params(password=wrong), False)
    msg = str(err.value)
    assert msg == f"BMC {bmc.address} of {bmc.node}: authentication failed"
    rec, failing = bmc.validate(password=wrong)
    assert rec["check"]["status"] == "error" and "authentication failed" in rec["problem"]
    assert failing
    text = repr(rec) + msg + bmc.state_path.read_text()
    assert wrong not in text and PASSWORD not in text


def test_unknown_attribute_is_one_line_naming_it(bmc):
    params = bmc.role_params()
    params["attributes"] = {**params["attributes"], "NoSuchKnob": "Enabled"}
    with pytest.raises(RedfishError, match="'NoSuchKnob'") as err:
        bios_module.run(params, False)
    assert "\n" not in str(err.value)
