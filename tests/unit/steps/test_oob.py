"""The out-of-band step (rackready/steps/oob.py) against a fake BMC, judged by the real judge."""

from __future__ import annotations

import json
import socket

import pytest

from rackready.decide.judge import judge_run
from rackready.run.rundir import Plan, PlannedNode, RunDir
from rackready.site.bmc import BmcAccess, Secret
from rackready.site.inventory import Node
from rackready.steps import envelope, oob
from tests.unit.fake_redfish import FakeBMC, make_ca
from validation.judge import judge
from validation.model import CheckResult
from validation.profile import load_profile

PASSWORD = "oob-Pa55-word-42"  # noqa: S105  a test password


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_ca(tmp_path_factory.mktemp("ca"))


PLATFORM = {"dell": "xe9680-h200", "hpe": "dl380a-gen11-h100nvl"}


def _provisioned(bmc: FakeBMC) -> FakeBMC:
    """A BMC whose BIOS the bios role has brought to its profile (and rebooted)."""
    want, _ = oob.bios_profile(node("x", None, None, platform=PLATFORM[bmc.vendor]))
    bmc.bios_attrs().update(want)
    return bmc


@pytest.fixture
def dell(certs):
    bmc = _provisioned(FakeBMC(certs, "dell", password=PASSWORD))
    yield bmc
    bmc.close()


@pytest.fixture
def hpe(certs):
    bmc = _provisioned(FakeBMC(certs, "hpe", password=PASSWORD))
    yield bmc
    bmc.close()


def node(name: str, address: str | None, ca: str | None, password: str = PASSWORD,
         platform: str = "xe9680-h200") -> Node:
    access = None if address is None else BmcAccess(address, "root", Secret(password), ca)
    return Node(name=name, address="192.0.2.1", profile=platform, platform=platform,
                fabric="ib", user="u", port=22, key_file=None, known_hosts=None, sysroot="/",
                lab=False, bmc=lambda: access)


@pytest.fixture
def baseline(tmp_path):
    """The bios role's record: provisioned at 2026-11-30 12:00 on the BMC's clock."""
    folder = tmp_path / "bmc-baseline"
    folder.mkdir()
    for n in ("gpu01", "gpu05"):
        (folder / f"{n}.json").write_text(json.dumps({"node": n,
                                                      "bmc_time": "2026-11-30T12:00:00+00:00"}))
    return folder


def collect(bmc: FakeBMC, certs, baseline, name: str = "gpu01", **kw) -> dict:
    return oob.collect(node(name, bmc.address, str(certs[0]), platform=PLATFORM[bmc.vendor],
                            **kw), baseline_dir=baseline, timeout=5)


# measured while a node's suite runs (rackready.steps.envelope); a read alone has none
ENVELOPE = set(envelope.METRICS)


def failing(rec: dict, profile: str = "xe9680-h200") -> list:
    """The read's failing verdicts; the envelope's, not measured by a read alone, aside."""
    verdicts = judge([CheckResult.from_dict(rec["check"])], load_profile(profile))
    return [v for v in verdicts if v.outcome == "fail"
            and not (v.metric in ENVELOPE and "not measured" in v.message)]


def test_healthy_dell_passes_and_records_identity(dell, certs, baseline):
    rec = collect(dell, certs, baseline)
    assert rec["check"]["status"] == "ok" and rec["problem"] == ""
    assert failing(rec) == []
    ident = rec["identity"]
    assert ident["model"] == "PowerEdge XE9680" and ident["serial"] == "CN7792S"
    assert ident["service_tag"] == "7XYZ123" and ident["power_on_hours"] == 12
    classes = {f["component"]: f["version"] for f in ident["firmware"]}
    assert classes["bios"] == "2.3.5" and classes["bmc"] == "7.10.30.00"
    assert classes["cpld"] == "1.2.6" and classes["hgx"] == "1.5.0"
    assert classes["gpu"].startswith("96.00") and classes["nic"] == "28.39.1002"
    assert "2.1.0" not in [f["version"] for f in ident["firmware"]]  # Dell's rollback image
    assert len(ident["psus"]) == 6 and ident["psus"][0]["serial"] == "CNLOD001"
    # the excerpt holds what happened since provisioning, not the factory entries
    assert [e["id"] for e in rec["log_excerpt"]] == []


def test_healthy_hpe_with_newer_subsystems_passes(hpe, certs, baseline):
    rec = collect(hpe, certs, baseline, name="gpu05")
    assert failing(rec, "dl380a-gen11-h100nvl") == []
    names = {m["name"] for m in rec["check"]["measurements"]}
    assert {"bmc.psu.redundancy", "bmc.fan.health", "bmc.temperature.margin",
            "bmc.voltage.in_range", "bmc.firmware.version"} <= names
    assert rec["identity"]["firmware"][0] == {"component": "bios", "name": "System ROM",
                                              "version": "U58 v1.50"}


def test_firmware_below_minimum_fails_naming_component(dell, certs, baseline):
    item = next(v for k, v in dell.res.items() if k.endswith("Installed-159-2.3.5"))
    item["Version"] = "1.9.2"
    (v,) = failing(collect(dell, certs, baseline))
    assert v.metric == "bmc.firmware.version" and "bios firmware (BIOS)" in v.message
    assert "1.9.2" in v.message and "ver>= 2.0.0" in v.message


def test_firmware_minimum_without_the_component_fails(dell, certs, baseline):
    fw = dell.res["/redfish/v1/UpdateService/FirmwareInventory"]
    fw["Members"] = [m for m in fw["Members"] if "25227" not in m["@odata.id"]]  # no iDRAC
    (v,) = failing(collect(dell, certs, baseline))
    assert "expected for bmc firmware but not measured" in v.message


def test_psu_lost_and_redundancy_lost_fail_naming_the_psu(dell, certs, baseline):
    power = dell.res[f"{dell.chassis}/Power"]
    power["PowerSupplies"][1]["Status"] = {"State": "Enabled", "Health": "Critical"}
    power["Redundancy"][0]["Status"] = {"State": "Enabled", "Health": "Critical"}
    found = {(v.metric, v.labels.get("psu", "")) for v in failing(collect(dell, certs, baseline))}
    assert found == {("bmc.psu.health", "PS2 Status serial CNLOD002"), ("bmc.psu.redundancy", "")}


def test_fan_failed_fails_naming_the_fan(hpe, certs, baseline):
    hpe.res[f"{hpe.chassis}/ThermalSubsystem/Fans/3"]["Status"] = {"State": "Enabled",
                                                                  "Health": "Critical"}
    (v,) = failing(collect(hpe, certs, baseline, name="gpu05"), "dl380a-gen11-h100nvl")
    assert v.metric == "bmc.fan.health" and "fan Fan 3" in v.message


def test_temperature_over_the_bmc_threshold_fails(dell, certs, baseline):
    t = dell.res[f"{dell.chassis}/Thermal"]["Temperatures"][0]
    t["ReadingCelsius"] = 49  # critical at 47: the BMC's own threshold
    (v,) = failing(collect(dell, certs, baseline))
    assert v.metric == "bmc.temperature.margin" and v.value == -2
    assert "sensor System Board Inlet Temp" in v.message


def test_voltage_out_of_range_fails(hpe, certs, baseline):
    s = hpe.res[f"{hpe.chassis}/Sensors/P12V"]
    s.update(Reading=10.2, Status={"State": "Enabled", "Health": "Critical"})
    found = {v.metric for v in failing(collect(hpe, certs, baseline, name="gpu05"),
                                       "dl380a-gen11-h100nvl")}
    assert found == {"bmc.voltage.in_range", "bmc.sensor.health"}


def test_new_critical_log_entry_fails_naming_it(dell, certs, baseline):
    dell.add_log("Warning", "Fan 2 RPM is less than the lower warning threshold.",
                 "2026-11-30T13:00:00+00:00", "Fan")
    dell.add_log("Critical", "Power supply 2 lost its AC input.", "2026-11-30T14:00:00+00:00")
    rec = collect(dell, certs, baseline)
    (v,) = failing(rec)
    assert v.metric == "bmc.log.critical_new" and v.value == 1
    assert "Power supply 2 lost its AC input" in v.message and "BMC log Sel" in v.message
    assert [e["message"] for e in rec["log_excerpt"]][-1] == "Power supply 2 lost its AC input."
    assert len(rec["log_excerpt"]) == 2


def test_without_a_provisioning_record_every_critical_entry_counts(dell, certs, tmp_path):
    rec = collect(dell, certs, tmp_path)  # no record: the factory entry counts too
    (v,) = failing(rec)
    assert "fail-safe voltage" in v.message and "every entry counts" in rec["since_source"]


def test_wrong_password_is_one_line_without_it(certs, baseline):
    bmc = FakeBMC(certs, "dell", password="another")
    try:
        rec = collect(bmc, certs, baseline)
    finally:
        bmc.close()
    assert rec["check"]["status"] == "error"
    assert rec["problem"] == f"BMC {bmc.address} of gpu01: authentication failed"
    assert PASSWORD not in json.dumps(rec)


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_bmc_fails_that_node_alone(dell, certs, baseline, tmp_path):
    """Two planned nodes: gpu02's BMC is down; gpu01's verdicts are untouched by it."""
    plan = Plan(run_id="r", inventory="t", level="quick", only=None,
                nodes=[PlannedNode("gpu01", "xe9680-h200", {"node": "gpu01"}),
                       PlannedNode("gpu02", "xe9680-h200", {"node": "gpu02"})])
    run = RunDir.create(None, str(tmp_path / "run"), plan)
    run.write_bmc("gpu01", collect(dell, certs, baseline))
    down = oob.collect(node("gpu02", f"127.0.0.1:{_dead_port()}", str(certs[0])),
                       baseline_dir=baseline, timeout=2)
    assert down["problem"].startswith("BMC 127.0.0.1:") and "of gpu02: unreachable" in \
        down["problem"]
    run.write_bmc("gpu02", down)
    js = judge_run(run, write=False)
    bad = [v for v in js["gpu02"]["verdicts"] if v["check"] == "bmc" and v["outcome"] == "fail"]
    assert len(bad) == 1 and "unreachable" in bad[0]["message"]
    assert not [v for v in js["gpu01"]["verdicts"] if v["check"] == "bmc"
                and v["outcome"] == "fail" and v["metric"] not in ENVELOPE]
    assert js["gpu01"]["bmc"]["identity"]["serial"] == "CN7792S"


def test_no_bmc_address_is_not_run_and_the_profile_decides(tmp_path):
    rec = oob.collect(node("gpu07", None, None))
    assert rec["check"]["status"] == "skipped" and rec["problem"] == oob.NO_ADDRESS
    check = CheckResult.from_dict(rec["check"])
    real = [v for v in judge([check], load_profile("xe9680-h200")) if v.check == "bmc"]
    assert real[0].outcome == "fail" and "no BMC address" in real[0].message
    # the lab's nodes have BMCs too: a lab node without one fails the same way
    lab = [v for v in judge([check], load_profile("xe9680-h200-lab")) if v.check == "bmc"]
    assert lab[0].outcome == "fail"


def test_a_planned_node_without_a_record_is_judged_not_run(tmp_path):
    plan = Plan(run_id="r", inventory="t", level="quick", only=None,
                nodes=[PlannedNode("gpu01", "xe9680-h200", {"node": "gpu01"})])
    run = RunDir.create(None, str(tmp_path / "run"), plan)
    run.prepare_node("gpu01")
    j = judge_run(run, write=False)["gpu01"]
    v = next(v for v in j["verdicts"] if v["check"] == "bmc")
    assert v["outcome"] == "fail" and "did not run" in v["message"]


def test_version_order():
    from validation.judge import compare, version_key

    assert version_key("U58 v1.50") == (1, 50) and version_key("2.3.5") == (2, 3, 5)
    assert compare("ver>=", "2.10.0", "2.9.9") and not compare("ver>=", "2.9.9", "2.10.0")
    assert not compare("ver>=", "", "1.0") and compare("ver>=", "7.10.30.00", "7.00.00.00")
