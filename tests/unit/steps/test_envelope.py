"""The power and thermal envelope (rackready/redfish/envelope.py, rackready/steps/envelope.py):
chassis readings of both Redfish shapes, their summary and measurements judged by the real
judge against the real profiles, the sampler against a real HTTPS Redfish service, and the
report's figure."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from rackready.redfish import envelope as rf_env
from rackready.report.views.figures import envelope_figure
from rackready.steps import envelope, oob
from tests.unit.fake_redfish import FakeBMC, make_ca
from tests.unit.steps.test_oob import PASSWORD, node
from validation.judge import judge
from validation.model import CheckResult
from validation.profile import load_profile

R = "/redfish/v1"


class DictClient:
    """A Redfish service as a dict of resources (what rackready.redfish.client.get returns)."""

    bytes_read = 0

    def __init__(self, res: dict[str, dict[str, Any]]) -> None:
        self.res = res
        self.root = res[R]

    def _error(self, text: str) -> Exception:
        return RuntimeError(text)

    def get(self, uri: str) -> dict[str, Any]:
        return copy.deepcopy(self.res[uri])


def _ok(health: str = "OK") -> dict[str, str]:
    return {"Health": health, "State": "Enabled"}


def legacy(draw: float = 9800, fan_health: str = "OK", psu_count: int = 6,
           capacity: float = 2800) -> dict[str, dict[str, Any]]:
    """An iDRAC-like chassis: Power and Thermal, fans in RPM."""
    ch = f"{R}/Chassis/System.Embedded.1"
    return {
        R: {"Chassis": {"@odata.id": f"{R}/Chassis"}},
        f"{R}/Chassis": {"Members": [{"@odata.id": ch}]},
        ch: {"Power": {"@odata.id": f"{ch}/Power"}, "Thermal": {"@odata.id": f"{ch}/Thermal"}},
        f"{ch}/Power": {
            "PowerControl": [{"PowerConsumedWatts": draw}],
            "PowerSupplies": [{"Name": f"PS{i} Status", "SerialNumber": f"CN0{i}",
                               "PowerCapacityWatts": capacity, "PowerInputWatts": draw / psu_count,
                               "PowerOutputWatts": draw / psu_count * 0.94, "Status": _ok()}
                              for i in range(1, psu_count + 1)]},
        f"{ch}/Thermal": {
            "Temperatures": [
                {"Name": "System Board Inlet Temp", "PhysicalContext": "Intake",
                 "ReadingCelsius": 25, "Status": _ok()},
                {"Name": "System Board Exhaust Temp", "PhysicalContext": "Exhaust",
                 "ReadingCelsius": 58, "Status": _ok()},
                {"Name": "CPU1 Temp", "PhysicalContext": "CPU", "ReadingCelsius": 70,
                 "Status": _ok()}],
            "Fans": [{"Name": "Fan1A", "Reading": 12000, "ReadingUnits": "RPM",
                      "Status": _ok()},
                     {"Name": "Fan1B", "Reading": 0 if fan_health != "OK" else 11900,
                      "ReadingUnits": "RPM", "Status": _ok(fan_health)}]},
    }


def subsystem() -> dict[str, dict[str, Any]]:
    """A chassis with only the newer resources: PowerSubsystem with per-PSU Metrics,
    EnvironmentMetrics, ThermalSubsystem with ThermalMetrics, fans in percent."""
    ch = f"{R}/Chassis/1"
    ps, ts = f"{ch}/PowerSubsystem", f"{ch}/ThermalSubsystem"
    res: dict[str, dict[str, Any]] = {
        R: {"Chassis": {"@odata.id": f"{R}/Chassis"}},
        f"{R}/Chassis": {"Members": [{"@odata.id": ch}]},
        ch: {"PowerSubsystem": {"@odata.id": ps}, "ThermalSubsystem": {"@odata.id": ts},
             "EnvironmentMetrics": {"@odata.id": f"{ch}/EnvironmentMetrics"}},
        f"{ch}/EnvironmentMetrics": {"PowerWatts": {"Reading": 3400}},
        ps: {"PowerSupplies": {"@odata.id": f"{ps}/PowerSupplies"}},
        f"{ps}/PowerSupplies": {"Members": [{"@odata.id": f"{ps}/PowerSupplies/{i}"}
                                           for i in (1, 2, 3, 4)]},
        ts: {"Fans": {"@odata.id": f"{ts}/Fans"},
             "ThermalMetrics": {"@odata.id": f"{ts}/ThermalMetrics"}},
        f"{ts}/Fans": {"Members": [{"@odata.id": f"{ts}/Fans/{i}"} for i in (1, 2)]},
        f"{ts}/ThermalMetrics": {"TemperatureReadingsCelsius": [
            {"DeviceName": "01-Inlet Ambient", "PhysicalContext": "Intake", "Reading": 23},
            {"DeviceName": "40-Exhaust", "PhysicalContext": "Exhaust", "Reading": 47}]},
    }
    for i in (1, 2, 3, 4):
        res[f"{ps}/PowerSupplies/{i}"] = {
            "Name": f"Power Supply {i}", "SerialNumber": f"5WB0{i}", "PowerCapacityWatts": 2200,
            "Status": _ok(), "Metrics": {"@odata.id": f"{ps}/PowerSupplies/{i}/Metrics"}}
        res[f"{ps}/PowerSupplies/{i}/Metrics"] = {"InputPowerWatts": {"Reading": 850},
                                                 "OutputPowerWatts": {"Reading": 800}}
    for i in (1, 2):
        res[f"{ts}/Fans/{i}"] = {"Name": f"Fan {i}", "SpeedPercent": {"Reading": 61},
                                 "Status": _ok()}
    return res


def _sample(res: dict[str, dict[str, Any]], t: float = 0.0) -> dict[str, Any]:
    client = DictClient(res)
    return rf_env.read(client, rf_env.discover(client), t)  # type: ignore[arg-type]


def test_legacy_power_and_thermal_are_read():
    s = _sample(legacy())
    assert s["power_w"] == 9800 and (s["inlet_c"], s["exhaust_c"]) == (25, 58)
    assert len(s["psus"]) == 6 and {p["capacity_w"] for p in s["psus"]} == {2800}
    assert [(f["name"], f["units"]) for f in s["fans"]] == [("Fan1A", "RPM"), ("Fan1B", "RPM")]


def test_the_subsystem_shape_is_read_with_fans_in_percent():
    s = _sample(subsystem())
    assert s["power_w"] == 3400  # EnvironmentMetrics, the chassis's own total
    assert (s["inlet_c"], s["exhaust_c"]) == (23, 47)
    assert [p["output_w"] for p in s["psus"]] == [800] * 4
    assert {(f["reading"], f["units"]) for f in s["fans"]} == {(61, "Percent")}


def ilo4_thermal(fan_pct: float = 11) -> dict[str, dict[str, Any]]:
    """The legacy chassis with its Thermal in the older schemas iLO 4 and early iLO 5
    serve: fans named `FanName` with `CurrentReading` + `Units` "Percent" (HpServerFan, HPE
    iLO 4 RESTful API data model), temperatures with `CurrentReading` and `ReadingCelsius`
    both, and a DMTF Thermal 1.0 fan (`ReadingRPM`, before 1.1 added `Reading` /
    `ReadingUnits` and `Name`). Made from those documented schemas (DMTF Thermal.v1_0_0 /
    v1_1_0, HPE's iLO 4 Thermal), not captured."""
    res = legacy()
    ch = f"{R}/Chassis/System.Embedded.1"
    hp = {"Hp": {"@odata.type": "#HpServerFan.1.0.0.HpServerFan", "Location": "System"}}
    res[f"{ch}/Thermal"] = {
        "@odata.type": "#Thermal.1.1.0.Thermal",
        "Fans": [{"CurrentReading": fan_pct, "FanName": f"Fan {i}", "Oem": hp,
                  "Status": _ok(), "Units": "Percent"} for i in (1, 2)]
        + [{"FanName": "Fan 3", "MemberId": "2", "ReadingRPM": 9120, "Status": _ok()}],
        "Temperatures": [
            {"CurrentReading": 23, "Name": "01-Inlet Ambient", "Number": 1,
             "PhysicalContext": "Intake", "ReadingCelsius": 23, "Status": _ok(),
             "Units": "Celsius", "UpperThresholdCritical": 42, "UpperThresholdFatal": 46},
            {"CurrentReading": 44, "Name": "02-CPU 1", "Number": 2, "PhysicalContext": "CPU",
             "Status": _ok(), "Units": "Celsius", "UpperThresholdCritical": 70}]}
    return res


def test_older_ilo_thermal_fans_are_read_in_their_own_words():
    """Before: every fan of this Thermal read as none (no `Reading` / `ReadingUnits`)."""
    s = _sample(ilo4_thermal())
    assert [(f["name"], f["reading"], f["units"]) for f in s["fans"]] == [
        ("Fan 1", 11, "Percent"), ("Fan 2", 11, "Percent"), ("Fan 3", 9120, "RPM")]
    assert s["inlet_c"] == 23 and not s["refused"]
    # the physical range still holds: 140 percent is no reading, refused and named
    bad = _sample(ilo4_thermal(fan_pct=140))
    assert [f["reading"] for f in bad["fans"]][:2] == [None, None]
    assert ("fan Fan 1 speed", "140 % is outside 0..100 %") in bad["refused"]
    # the BMC's fan health is named by the fan's own name, never "None"
    from rackready.redfish import inventory
    out: dict[str, Any] = {"fans": [], "temperatures": [], "voltages": []}
    client = DictClient(ilo4_thermal())
    inventory._thermal(client, client.get(f"{R}/Chassis/System.Embedded.1"),  # type: ignore[arg-type]
                       out)
    assert [f["name"] for f in out["fans"]] == ["Fan 1", "Fan 2", "Fan 3"]


def _envelope(*samples: dict[str, Any]) -> dict[str, Any]:
    return {"period_s": 2.0, "count": len(samples), "samples": list(samples),
            "summary": rf_env.summarize(list(samples))}


def _verdicts(env: dict[str, Any] | None, profile: str = "xe9680-h200") -> dict[str, list]:
    check = CheckResult(check="bmc", status="ok", duration_s=0.1,
                        measurements=tuple(envelope.measurements(env)), needs=("bmc",))
    out: dict[str, list] = {}
    for v in judge([check], load_profile(profile)):
        if v.metric.startswith(("bmc.envelope", "bmc.power.", "bmc.inlet", "bmc.fan.health_u",
                                "bmc.psu.health_u")) and v.outcome != "not_applicable":
            out.setdefault(v.outcome, []).append(v)
    return out


def test_a_healthy_envelope_passes_every_verdict():
    idle, loaded = _sample(legacy(draw=4700), 0), _sample(legacy(draw=9800), 2)
    got = _verdicts(_envelope(idle, loaded))
    assert "fail" not in got
    passed = {v.metric for v in got["pass"]}
    assert {"bmc.envelope.samples", "bmc.power.one_lost_load_ratio", "bmc.inlet.peak_c",
            "bmc.fan.health_under_load", "bmc.psu.health_under_load"} <= passed
    ratio = next(v for v in got["pass"] if v.metric == "bmc.power.one_lost_load_ratio")
    assert ratio.value == round(9800 / 14000, 4)  # 6 x 2800 W, the largest lost
    assert ratio.labels["psus"] == "6 x 2800 W, one lost: 14000 W"


def test_a_fan_that_stalled_in_one_sample_fails_naming_it():
    got = _verdicts(_envelope(_sample(legacy(), 0), _sample(legacy(fan_health="Critical"), 2),
                              _sample(legacy(), 4)))
    (v,) = got["fail"]
    assert v.metric == "bmc.fan.health_under_load" and v.labels["fan"] == "Fan1B"
    assert v.value == "Critical"


def test_a_draw_the_psus_cannot_carry_with_one_lost_fails():
    # 4 x 2800 W carry 9.8 kW, but not with one lost (8.4 kW)
    got = _verdicts(_envelope(_sample(legacy(psu_count=4), 0), _sample(legacy(psu_count=4), 2)))
    (v,) = got["fail"]
    assert v.metric == "bmc.power.one_lost_load_ratio" and v.value > 1.0
    assert "one lost: 8400 W" in v.labels["psus"]


def test_a_bmc_not_read_while_the_suite_ran_fails_the_envelope():
    for env in (None, _envelope()):
        bad = {v.metric: v for v in _verdicts(env)["fail"]}
        assert bad["bmc.envelope.samples"].value == 0


def test_unreported_psu_capacity_is_a_reading_that_could_not_be_made():
    res = legacy()
    for p in res[f"{R}/Chassis/System.Embedded.1/Power"]["PowerSupplies"]:
        del p["PowerCapacityWatts"]
    got = _verdicts(_envelope(_sample(res, 0), _sample(res, 2)))
    (v,) = got["fail"]
    assert v.metric == "bmc.power.one_lost_load_ratio" and v.value is None
    assert "not reported" in v.labels["psus"]


def test_the_reduction_keeps_the_ends_the_peak_and_the_summary_every_sample():
    base = _sample(legacy(draw=5000))
    r = rf_env.Reduction(keep=50)
    for i in range(1000):
        r.add({**base, "t": float(i), "power_w": 9000.0 if i == 777 else 5000.0 + i % 7})
    pts = r.points()
    assert len(pts) <= 51 and pts[0]["t"] == 0 and pts[-1]["t"] >= 960
    assert [p["t"] for p in pts] == sorted(p["t"] for p in pts)
    # the one-sample peak survives the halving: the figure keeps its shape
    assert max(p["power_w"] for p in pts) == 9000.0 == r.summary()["peak_power_w"]
    assert r.summary()["samples"] == 1000


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_ca(tmp_path_factory.mktemp("ca"))


def test_the_sampler_reads_a_real_https_bmc_while_the_suite_runs(certs):
    bmc = FakeBMC(certs, "dell", password=PASSWORD)
    try:
        target = node("gpu01", bmc.address, str(certs[0]))
        sampler = envelope.Sampler(target, period_s=0.05).start()
        time.sleep(0.4)
        rec = sampler.stop()
    finally:
        bmc.close()
    assert rec["problem"] == "" and rec["count"] >= 3 and rec["failed_reads"] == 0
    assert all(p["inlet_c"] == 24 for p in rec["samples"]) and len(rec["summary"]["psus"]) == 6
    assert rec["summary"]["refused_count"] == 0
    # the record is what oob.collect turns into the check's measurements
    names = {m.name for m in envelope.measurements(rec)}
    assert {"bmc.envelope.samples", "bmc.inlet.peak_c", "bmc.psu.health_under_load",
            "bmc.fan.health_under_load"} <= names


def test_a_node_without_a_bmc_is_sampled_not_at_all_and_says_why():
    rec = envelope.Sampler(node("gpu01", None, None)).start().stop()
    assert rec["count"] == 0 and "rackready_bmc_address" in rec["problem"]


def test_collect_adds_the_envelope_to_the_bmc_check(certs, tmp_path):
    bmc = FakeBMC(certs, "dell", password=PASSWORD)
    try:
        env = _envelope(_sample(legacy(psu_count=4), 0))
        rec = oob.collect(node("gpu01", bmc.address, str(certs[0])), baseline_dir=tmp_path,
                          timeout=5, envelope=env)
    finally:
        bmc.close()
    names = [m["name"] for m in rec["check"]["measurements"]]
    assert "bmc.power.one_lost_load_ratio" in names and rec["envelope"] == env


def test_the_report_figure_plots_draw_against_capacity_and_air_against_the_limit():
    env = _envelope(_sample(legacy(draw=4700), 0), _sample(legacy(draw=9800), 2))
    doc = {"bmc": {"envelope": rf_env.series(env)},
           "thresholds": [{"metric": "bmc.inlet.peak_c", "op": "<=", "value": 35,
                           "labels": {}}]}
    fig = envelope_figure(doc)
    assert fig is not None
    power, air, fans = fig.panels
    assert power.lines[0].points == [(0.0, 4700.0), (2.0, 9800.0)]
    assert power.hlines[0].value == 14000
    assert [line.label for line in air.lines] == ["inlet", "exhaust"]
    assert air.hlines[0].value == 35
    assert fans.y_label == "RPM" and fans.lines[0].points[0] == (0.0, 11900.0)
    assert envelope_figure({"bmc": {}}) is None


# --- against the lab's own BMC (rackready_lab/redfish), its readings following u ---------

@pytest.mark.parametrize("vendor,kind,metric,named", [
    ("dell", "fan-fails-under-load", "bmc.fan.health_under_load", "fan"),
    ("hpe", "psu-fails-under-load", "bmc.psu.health_under_load", "psu"),
])
def test_a_part_failing_under_load_is_caught_by_the_sampling_alone(tmp_path, vendor, kind,
                                                                   metric, named):
    from rackready_lab.redfish import store
    from tests.unit.lab.test_bmc_integration import LabBmc

    lab_bmc = LabBmc(tmp_path / vendor, vendor)
    try:
        lab_bmc.fault(kind)
        target = lab_bmc.node_entry()
        sampler = envelope.Sampler(target, period_s=0.05).start()
        time.sleep(0.2)  # idle: the part is fine
        with store.locked(lab_bmc.state_path) as state:
            state["load"]["override"] = 1.0  # the burn-in
        time.sleep(0.3)
        with store.locked(lab_bmc.state_path) as state:
            state["load"]["override"] = 0.0  # the run is over
        time.sleep(0.2)
        rec = sampler.stop()
        after = oob.collect(target, baseline_dir=lab_bmc.baseline, timeout=5, envelope=rec)
    finally:
        lab_bmc.stop()
    powers = [s["power_w"] for s in rec["samples"]]
    assert max(powers) > 2 * min(powers)  # the draw followed the load
    verdicts = judge([CheckResult.from_dict(after["check"])],
                     load_profile(f"{lab_bmc.platform}-lab"))
    bad = [v for v in verdicts if v.outcome == "fail" and v.metric == metric]
    assert len(bad) == 1 and bad[0].value == "Critical", bad
    # idle again at the end: the BMC's own after-run reading of that part is healthy
    idle_metric = metric.replace("_under_load", "")
    assert not [v for v in verdicts if v.metric == idle_metric and v.outcome == "fail"
                and v.labels.get(named) == bad[0].labels.get(named)]


def test_a_bmc_answer_of_the_wrong_shape_is_refused_by_name_and_fails_the_node(certs, capfd):
    bmc = FakeBMC(certs, "dell", password=PASSWORD)
    try:
        bmc.res[f"{bmc.chassis}/Power"]["PowerControl"] = "not a list of objects"
        rec = envelope.Sampler(node("gpu01", bmc.address, str(certs[0])),
                               period_s=0.05).start().stop()
    finally:
        bmc.close()
    assert rec["count"] >= 1 and rec["problem"] == ""
    assert "Traceback" not in capfd.readouterr().err  # said, not a thread's traceback
    (v,) = [v for v in _verdicts(rec)["fail"] if v.metric == "bmc.envelope.refused_readings"]
    assert v.labels["sensor"].startswith("PowerControl: not a list of objects is not a list")
