"""The lab BMC (rackready_lab/redfish): a Redfish service over HTTPS, no lab needed.

Each test starts the service on 127.0.0.1 (a free port) in a thread, with a tree built
from a node's hwsim state, and talks to it with urllib trusting only the lab CA.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rackready_lab.hwsim.state import build_state
from rackready_lab.redfish import ca, store
from rackready_lab.redfish import resources as rf
from rackready_lab.redfish.faults import FAULT_KINDS, FaultError, apply_fault, heal
from rackready_lab.redfish.server import BmcService
from rackready_lab.redfish.tree import build

USER, PASSWORD = "root", "lab-Secret-9f3c1e77"


class Bmc:
    """One lab BMC in a thread; service_kw go to BmcService (load=..., node=...)."""

    def __init__(self, tmp: Path, platform: str, **service_kw: Any) -> None:
        ca.ensure_ca(tmp)
        cert, key = ca.issue(tmp, "bmc", "127.0.0.1")
        self.cafile = tmp / "ca.pem"
        self.state_path = tmp / "state.json"
        self.hw = build_state(platform, "lab-gpu01")
        store.write(self.state_path, build(self.hw))
        self.service = BmcService(self.state_path, "127.0.0.1", 0, cert, key, USER, PASSWORD,
                                  **service_kw)
        self.thread = threading.Thread(target=self.service.serve, daemon=True)
        self.thread.start()
        assert self.service.ready.wait(10)
        self.ctx = ssl.create_default_context(cafile=str(self.cafile))

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.service.port}"

    def call(self, method: str, path: str, body: Any = None, auth: tuple[str, str] | None =
             (USER, PASSWORD), headers: dict[str, str] | None = None
             ) -> tuple[int, dict[str, Any], dict[str, str]]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if auth:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=10) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else {}, dict(resp.headers)
        except urllib.error.HTTPError as err:
            raw = err.read()
            return err.code, json.loads(raw) if raw else {}, dict(err.headers)

    def get(self, path: str, **kw: Any) -> dict[str, Any]:
        status, body, _ = self.call("GET", path, **kw)
        assert status == 200, (path, status, body)
        return body

    def fault(self, kind: str, target: str | None = None) -> dict[str, Any]:
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

    def stop(self) -> None:
        self.service.stop()
        self.thread.join(10)


@pytest.fixture()
def dell(tmp_path: Path):
    bmc = Bmc(tmp_path, "xe9680-h200")
    yield bmc
    bmc.stop()


@pytest.fixture()
def hpe(tmp_path: Path):
    bmc = Bmc(tmp_path, "dl380a-gen12-h200nvl")
    yield bmc
    bmc.stop()


def _links(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        out = [obj["@odata.id"]] if set(obj) == {"@odata.id"} else []
        return out + [x for v in obj.values() for x in _links(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _links(v)]
    return []


@pytest.mark.parametrize("platform", ["xe9680-h200", "dl380a-gen12-h200nvl"])
def test_every_linked_resource_answers_with_its_own_odata_id(tmp_path: Path,
                                                             platform: str) -> None:
    bmc = Bmc(tmp_path, platform)
    try:
        root = bmc.get("/redfish/v1", auth=None)  # the service root needs no credentials
        assert root["Vendor"] in ("Dell", "HPE") and root["RedfishVersion"]
        seen, todo = set(), ["/redfish/v1"]
        while todo:
            path = todo.pop()
            if path in seen:
                continue
            seen.add(path)
            res = bmc.get(path.split("#")[0])
            if "#" not in path:
                assert res["@odata.id"] == path and res["@odata.type"].startswith("#")
            if "Members" in res:
                assert res["Members@odata.count"] == len(res["Members"])
            todo += [x for x in _links(res) if x not in seen]
        assert len(seen) > 60
        system = bmc.get(root["Systems"]["@odata.id"])["Members"][0]["@odata.id"]
        bios = bmc.get(bmc.get(system)["Bios"]["@odata.id"])
        assert bios["@Redfish.Settings"]["SettingsObject"]["@odata.id"] in seen
        fw = bmc.get("/redfish/v1/UpdateService/FirmwareInventory")["Members"]
        names = " ".join(bmc.get(m["@odata.id"])["Name"] for m in fw)
        for part in ("VBIOS", "ConnectX-7", "Power Supply"):
            assert part in names
    finally:
        bmc.stop()


def test_sessions_log_in_and_out(dell: Bmc) -> None:
    status, body, headers = dell.call("POST", "/redfish/v1/SessionService/Sessions",
                                      {"UserName": USER, "Password": PASSWORD}, auth=None)
    assert status == 201 and body["UserName"] == USER
    token, location = headers["X-Auth-Token"], headers["Location"]
    assert location == body["@odata.id"]
    hdr = {"X-Auth-Token": token}
    assert dell.call("GET", "/redfish/v1/Systems", auth=None, headers=hdr)[0] == 200
    members = dell.get("/redfish/v1/SessionService/Sessions")["Members"]
    assert {"@odata.id": location} in members
    assert dell.call("DELETE", location, auth=None, headers=hdr)[0] == 200
    assert dell.call("GET", "/redfish/v1/Systems", auth=None, headers=hdr)[0] == 401


def test_bad_password_is_401_and_never_logged(dell: Bmc, capfd: pytest.CaptureFixture) -> None:
    wrong = "Wrong-Pass-51d0"
    status, body, headers = dell.call("GET", "/redfish/v1/Systems", auth=(USER, wrong))
    assert status == 401 and "Basic" in headers["WWW-Authenticate"]
    assert body["error"]["@Message.ExtendedInfo"][0]["MessageId"].endswith("NoValidSession")
    status, _, headers = dell.call("POST", "/redfish/v1/SessionService/Sessions",
                                   {"UserName": USER, "Password": wrong}, auth=None)
    assert status == 401 and "X-Auth-Token" not in headers
    assert dell.call("GET", "/redfish/v1/Systems", auth=None)[0] == 401
    entries = dell.get("/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Lclog/Entries")
    assert len(entries["Members"]) == 2  # the failed logins, as the BMC records them
    out = capfd.readouterr()
    text = out.out + out.err + dell.state_path.read_text()
    assert wrong not in text and PASSWORD not in text
    assert "401" in out.err  # the request was logged, without credentials


def test_untrusted_certificate_is_refused(dell: Bmc) -> None:
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(dell.base + "/redfish/v1", context=ssl.create_default_context(),
                               timeout=5)


SETTINGS = "/redfish/v1/Systems/System.Embedded.1/Bios/Settings"
BIOS = "/redfish/v1/Systems/System.Embedded.1/Bios"
RESET = "/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset"


def test_bios_change_is_a_job_that_completes_at_reset(dell: Bmc, monkeypatch) -> None:
    monkeypatch.setattr(rf, "JOB_RUN_S", 0.3)
    assert dell.get(BIOS)["Attributes"]["ProcCStates"] == "Enabled"
    # C-states belong to the system profile: refused alone, set by PerfOptimized at POST
    status, err, _ = dell.call("PATCH", SETTINGS, {"Attributes": {"ProcCStates": "Disabled"}})
    assert status == 400 and "SysProfile" in err["error"]["message"]
    status, _, headers = dell.call("PATCH", SETTINGS, {
        "Attributes": {"SriovGlobalEnable": "Enabled", "SysProfile": "PerfOptimized"},
        "@Redfish.SettingsApplyTime": {"ApplyTime": "OnReset"}})
    assert status == 202
    job_path = headers["Location"]
    assert job_path.startswith("/redfish/v1/Managers/iDRAC.Embedded.1/Jobs/JID_")
    assert dell.get(job_path)["JobState"] == "Scheduled"
    assert dell.get(SETTINGS)["Attributes"] == {"SriovGlobalEnable": "Enabled",
                                                "SysProfile": "PerfOptimized"}
    assert dell.get(BIOS)["Attributes"]["ProcCStates"] == "Enabled"  # needs a reboot
    jid = job_path.rsplit("/", 1)[1]
    monitor = dell.get(f"/redfish/v1/TaskService/Tasks/{jid}")["TaskMonitor"]
    assert dell.call("GET", monitor)[0] == 202
    assert dell.call("POST", RESET, {"ResetType": "ForceRestart"})[0] == 204
    assert dell.get(job_path)["JobState"] == "Running"
    time.sleep(0.5)
    job = dell.get(job_path)
    assert job["JobState"] == "Completed" and job["PercentComplete"] == 100
    attrs = dell.get(BIOS)["Attributes"]
    assert attrs["SysProfile"] == "PerfOptimized" and attrs["SriovGlobalEnable"] == "Enabled"
    # the profile's dependents, as the BIOS sets them at POST
    assert (attrs["ProcCStates"], attrs["ProcC1E"], attrs["PcieAspmL1"]) == ("Disabled",) * 3
    assert dell.get(SETTINGS)["Attributes"] == {}
    status, task, _ = dell.call("GET", monitor)
    assert status == 200 and task["TaskState"] == "Completed"


def test_a_pending_job_blocks_another_change(dell: Bmc) -> None:
    body = {"Attributes": {"SriovGlobalEnable": "Enabled"},
            "@Redfish.SettingsApplyTime": {"ApplyTime": "OnReset"}}
    status, _, headers = dell.call("PATCH", SETTINGS, body)
    assert status == 202
    status, err, _ = dell.call("PATCH", SETTINGS, {
        "Attributes": {"SubNumaCluster": "2Way"},
        "@Redfish.SettingsApplyTime": {"ApplyTime": "OnReset"}})
    assert status == 400
    assert err["error"]["@Message.ExtendedInfo"][0]["MessageId"].endswith("SYS011")
    # deleting the scheduled job drops its pending values and unblocks
    assert dell.call("DELETE", headers["Location"])[0] == 200
    assert dell.get(SETTINGS)["Attributes"] == {}
    assert dell.call("PATCH", SETTINGS, body)[0] == 202


@pytest.mark.parametrize("attrs,message_id,named", [
    ({"NoSuchKnob": "Enabled"}, "PropertyUnknown", "NoSuchKnob"),
    ({"ProcCStates": "Sometimes"}, "PropertyValueNotInList", "ProcCStates"),
    ({"SystemServiceTag": "ABC1234"}, "PropertyNotWritable", "SystemServiceTag"),
])
def test_bad_attribute_is_400_naming_it(dell: Bmc, attrs: dict, message_id: str,
                                        named: str) -> None:
    status, err, _ = dell.call("PATCH", SETTINGS, {"Attributes": attrs})
    assert status == 400
    info = err["error"]["@Message.ExtendedInfo"][0]
    assert info["MessageId"].endswith(message_id) and named in info["MessageArgs"]
    assert named in err["error"]["message"]
    assert dell.get(SETTINGS)["Attributes"] == {}  # nothing half-applied


def test_etag_if_match(dell: Bmc) -> None:
    _, _, headers = dell.call("GET", "/redfish/v1/Systems/System.Embedded.1")
    path = "/redfish/v1/Systems/System.Embedded.1"
    assert dell.call("PATCH", path, {"AssetTag": "R1"}, headers={"If-Match": 'W/"0"'}
                     )[0] == 412
    assert dell.call("PATCH", path, {"AssetTag": "R1"},
                     headers={"If-Match": headers["ETag"]})[0] == 200
    assert dell.get(path)["AssetTag"] == "R1"
    assert dell.call("PATCH", BIOS, {"Attributes": {"ProcCStates": "Disabled"}})[0] == 405


def test_ilo_pending_settings_apply_at_reboot(hpe: Bmc) -> None:
    settings = hpe.get("/redfish/v1/Systems/1/Bios")["@Redfish.Settings"]
    path = settings["SettingsObject"]["@odata.id"]
    assert path == "/redfish/v1/Systems/1/Bios/settings"
    status, body, _ = hpe.call("PATCH", path, {"Attributes": {"WorkloadProfile":
                                                             "HighPerformanceCompute(HPC)"}})
    assert status == 200
    ids = [m["MessageId"] for m in body["@Message.ExtendedInfo"]]
    assert any(i.endswith("SystemResetRequired") for i in ids)
    assert hpe.get(path)["Attributes"]["WorkloadProfile"] == "HighPerformanceCompute(HPC)"
    assert hpe.get("/redfish/v1/Systems/1/Bios")["Attributes"]["WorkloadProfile"] == \
        "GeneralPowerEfficientCompute"
    # the lab reboot hook (bmc.power_cycle) does what a reset does
    with store.locked(hpe.state_path) as state:
        rf.host_reset(state)
    assert hpe.get("/redfish/v1/Systems/1/Bios")["Attributes"]["WorkloadProfile"] == \
        "HighPerformanceCompute(HPC)"
    # IML reachable where iLO lists it: under the manager's log services too
    members = hpe.get("/redfish/v1/Managers/1/LogServices")["Members"]
    assert {"@odata.id": "/redfish/v1/Systems/1/LogServices/IML"} in members


def _entries(bmc: Bmc, path: str) -> list[dict[str, Any]]:
    return [bmc.get(m["@odata.id"]) for m in bmc.get(path)["Members"]]


SEL = "/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Sel/Entries"


def test_psu_redundancy_lost_is_visible_and_healed(dell: Bmc) -> None:
    rec = dell.fault("psu-redundancy-lost", "2")
    power = dell.get("/redfish/v1/Chassis/System.Embedded.1/Power")
    psu = power["PowerSupplies"][1]
    assert rec["component"]["serial"] == psu["SerialNumber"] and rec["component"]["slot"] == 2
    assert psu["Status"]["Health"] == "Critical" and psu["LineInputVoltage"] == 0
    assert power["Redundancy"][0]["Status"]["Health"] == "Critical"
    msgs = [e["Message"] for e in _entries(dell, SEL) if e["Severity"] == "Critical"]
    assert any("power supply 2" in m for m in msgs)
    dell.heal()
    power = dell.get("/redfish/v1/Chassis/System.Embedded.1/Power")
    assert all(p["Status"]["Health"] == "OK" for p in power["PowerSupplies"])
    assert _entries(dell, SEL) == []


def test_fan_failed_names_the_fan(dell: Bmc) -> None:
    rec = dell.fault("fan-failed", "Fan3B")
    fans = dell.get("/redfish/v1/Chassis/System.Embedded.1/Thermal")["Fans"]
    fan = next(f for f in fans if f["Name"] == "Fan3B")
    assert rec["component"] == {"type": "fan", "name": "Fan3B"}
    assert fan["Reading"] == 0 < fan["LowerThresholdCritical"]
    assert fan["Status"]["Health"] == "Critical"
    assert sum(f["Status"]["Health"] != "OK" for f in fans) == 1
    assert any("Fan3B" in e["Message"] for e in _entries(dell, SEL))


def test_sel_critical_entry(hpe: Bmc) -> None:
    rec = hpe.fault("sel-critical-entry")
    entries = _entries(hpe, "/redfish/v1/Systems/1/LogServices/IML/Entries")
    assert [e["Id"] for e in entries] == [rec["component"]["id"]]
    assert entries[0]["Severity"] == "Critical" and "DIMM 3" in entries[0]["Message"]
    assert entries[0]["@odata.type"].startswith("#LogEntry.")


def test_bios_drift_then_heal(dell: Bmc) -> None:
    rec = dell.fault("bios-drift", "SubNumaCluster=2Way")
    assert rec["component"] == {"type": "bios-attribute", "name": "SubNumaCluster",
                                "was": "Disabled", "now": "2Way"}
    assert dell.get(BIOS)["Attributes"]["SubNumaCluster"] == "2Way"
    assert dell.get(SETTINGS)["Attributes"] == {}  # behind the BMC's job queue
    dell.heal()
    assert dell.get(BIOS)["Attributes"]["SubNumaCluster"] == "Disabled"


def test_bmc_unreachable_refuses_connections_until_healed(dell: Bmc) -> None:
    rec = dell.fault("bmc-unreachable")
    assert rec["component"]["type"] == "bmc"
    deadline = time.monotonic() + 5
    while dell.service.ready.is_set() and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(urllib.error.URLError) as exc:
        dell.call("GET", "/redfish/v1")
    assert isinstance(exc.value.reason, ConnectionRefusedError)
    dell.heal()
    assert dell.service.ready.wait(5)
    assert dell.get("/redfish/v1", auth=None)["Vendor"] == "Dell"


def test_faults_are_pure_and_heal_restores_hardware() -> None:
    base = build(build_state("xe9680-h200", "lab-gpu01"))
    base["bios"]["current"].update(SysProfile="PerfOptimized",  # what provisioning set
                                   **rf.dependents("dell-idrac9", {"SysProfile": "PerfOptimized"}))
    for kind in FAULT_KINDS:
        before = json.dumps(base, sort_keys=True)
        faulted = apply_fault(base, kind)
        assert json.dumps(base, sort_keys=True) == before and faulted != base
        assert faulted["faults"][-1]["description"]
        healed = heal(faulted)
        assert healed.pop("next_id")["log"] >= base["next_id"]["log"]  # ids never reused
        assert healed == {k: v for k, v in base.items() if k != "next_id"}, kind
    with pytest.raises(FaultError, match="Fan9Z"):
        apply_fault(base, "fan-failed", "Fan9Z")
    with pytest.raises(FaultError, match="NoSuchKnob"):
        apply_fault(base, "bios-drift", "NoSuchKnob")
    with pytest.raises(FaultError, match="set by SysProfile"):
        apply_fault(base, "bios-drift", "ProcCStates")
    drifted = apply_fault(base, "bios-drift")["bios"]["current"]
    assert drifted["SysProfile"] != "PerfOptimized" and drifted["ProcCStates"] == "Enabled"


def test_lab_bmc_addresses_follow_the_nodes() -> None:
    from rackready_lab import config
    from rackready_lab.redfish import bmc

    spec = config.NodeSpec(config.node_name(2), 2, "xe9680-h200", "roce")
    assert spec.ip.endswith(".12") and bmc.address(spec) == "127.0.1.12"
