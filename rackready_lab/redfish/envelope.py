"""The chassis under load: Power and Thermal readings as a function of the node's load.

Pure: (state, u) -> resource, u in [0, 1] the node's load fraction (load.py measures it
from the node's CPU activity; tests set it). The envelope (idle and full draw, each
sensor's idle and full reading) is computed once from the node's hwsim state at build
(model()) and kept in state["envelope"]; rendering is deterministic for a given u.

- draw (DC, what the PSUs put out) = idle + (full - idle) * u; the healthy PSUs share it
  (whole watts, summing exactly to the draw); a PSU's input is its output / efficiency;
  PowerControl's PowerConsumedWatts is the chassis input.
- inlet rises barely (room air), exhaust strongly, CPU and GPU sensors from idle toward
  their loaded value, fans from idle toward their loaded speed; all below the BMC's own
  critical thresholds on a healthy node.
- faults that act under load (fan-fails-under-load, psu-fails-under-load) trip at
  u >= TRIP_U: the part reads failed while the load lasts; observe() writes the fault's
  one log entry the first time.
"""

from __future__ import annotations

import copy
from typing import Any

from .base import add_log, collection, paths_of, ref, vendor_data

TRIP_U = 0.5
FAN_UNDER_LOAD = "fan-fails-under-load"
PSU_UNDER_LOAD = "psu-fails-under-load"
# the BMC answers NaN for the chassis draw (a broken sensor or firmware bug): a reading
# JSON cannot hold, which the controller must refuse by name, never end its run on
NAN_READING = "bmc-nan-reading"
UNDER_LOAD = (FAN_UNDER_LOAD, PSU_UNDER_LOAD)
_HEALTH_ORDER = {"OK": 0, "Warning": 1, "Critical": 2}


def clamp(u: float) -> float:
    return min(1.0, max(0.0, float(u)))


def _lerp(idle: float, full: float, u: float) -> float:
    return idle + (full - idle) * u


def model(hw: dict[str, Any], v: dict[str, Any], resources: dict[str, Any],
          chassis: str) -> dict[str, Any]:
    """Idle and full figures of one node: draw from its GPUs (hwsim's idle power draw and
    power limit), CPUs and the rest of the chassis (vendor data); sensors by MemberId."""
    env = v["envelope"]
    gpus = hw["gpus"]
    sockets = hw["cpu"]["sockets"]
    idle = (sum(g["power_draw_w"] for g in gpus) + sockets * env["cpu_w"]["idle"]
            + env["other_w"]["idle"])
    full = (sum(g["power_limit_w"] for g in gpus) + sockets * env["cpu_w"]["full"]
            + env["other_w"]["full"])
    fan = v["fans"]
    fans = {f["MemberId"]: [f["Reading"], fan["full"] - fan["step"] * i]
            for i, f in enumerate(resources[f"{chassis}/Thermal"]["Fans"])}
    temps = {}
    named = {t["name"]: t for t in v["temperatures"]}
    gpu_full = v["gpu_temperature"]["full"]
    for t in resources[f"{chassis}/Thermal"]["Temperatures"]:
        if t["Name"] in named:
            full_c = named[t["Name"]]["full"]
        else:  # a GPU: a degree or two apart, as eight boards in one air stream are
            full_c = gpu_full + int(t["MemberId"]) % 3
        temps[t["MemberId"]] = [t["ReadingCelsius"], full_c]
    return {"idle_w": round(idle), "full_w": round(full), "efficiency": env["efficiency"],
            "fans": fans, "temperatures": temps}


def draw_w(state: dict[str, Any], u: float) -> int:
    """The chassis' DC draw at load u (what the PSUs deliver together)."""
    env = state["envelope"]
    return round(_lerp(env["idle_w"], env["full_w"], clamp(u)))


def _tripped(state: dict[str, Any], kind: str, u: float) -> list[dict[str, Any]]:
    return [f for f in state.get("faults", []) if f["kind"] == kind and clamp(u) >= TRIP_U]


def _share(total: int, n: int) -> list[int]:
    base, extra = divmod(total, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def power(state: dict[str, Any], res: dict[str, Any], u: float) -> dict[str, Any]:
    """The chassis Power resource at load u."""
    out = copy.deepcopy(res)
    if "envelope" not in state:
        return out
    v = vendor_data(state["vendor"])
    env = state["envelope"]
    eff = env["efficiency"]
    failing = {f["component"]["slot"] for f in _tripped(state, PSU_UNDER_LOAD, u)}
    psus = out["PowerSupplies"]
    for psu in psus:
        if int(psu["MemberId"]) + 1 in failing:
            psu["Status"] = {"Health": "Critical", "State": "Enabled"}
    carrying = [p for p in psus if p["Status"]["Health"] == "OK"
                and p.get("LineInputVoltage", 1) != 0]
    shares = dict(zip((p["MemberId"] for p in carrying),
                      _share(draw_w(state, u), len(carrying)) if carrying else [], strict=True))
    reports_input = v["power_supplies"]["reports_input"]
    consumed = 0
    for psu in psus:
        output = shares.get(psu["MemberId"], 0)
        inp = round(output / eff)
        consumed += inp
        if reports_input:  # iDRAC: input, output and efficiency per PSU
            psu.update(PowerOutputWatts=output, PowerInputWatts=inp,
                       EfficiencyPercent=round(eff * 100, 1) if output else None)
        else:  # iLO: the output only
            psu["LastPowerOutputWatts"] = output
        hpe = psu.get("Oem", {}).get("Hpe")
        if hpe is not None:
            hpe["PowerSupplyStatus"] = {"State": "Ok" if psu["MemberId"] in shares
                                        else "Failed"}
    if failing:
        lost = v["power_supplies"]["redundancy_lost_health"]
        for red in out["Redundancy"]:
            if _HEALTH_ORDER[red["Status"]["Health"]] < _HEALTH_ORDER[lost]:
                red["Status"] = {"Health": lost, "State": "Enabled"}
    nan = any(f["kind"] == NAN_READING for f in state.get("faults", []))
    for ctl in out["PowerControl"]:
        ctl["PowerConsumedWatts"] = float("nan") if nan else consumed
    return out


def thermal(state: dict[str, Any], res: dict[str, Any], u: float) -> dict[str, Any]:
    """The chassis Thermal resource at load u."""
    out = copy.deepcopy(res)
    if "envelope" not in state:
        return out
    u = clamp(u)
    env = state["envelope"]
    stalled = {f["component"]["name"] for f in _tripped(state, FAN_UNDER_LOAD, u)}
    for fan in out["Fans"]:
        if fan["Status"]["Health"] != "OK":
            continue  # a failed fan (fan-failed) keeps its reading
        if fan["Name"] in stalled:
            fan.update(Reading=0, Status={"Health": "Critical", "State": "Enabled"})
            continue
        idle, full = env["fans"][fan["MemberId"]]
        fan["Reading"] = round(_lerp(idle, full, u))
    for t in out["Temperatures"]:
        idle, full = env["temperatures"][t["MemberId"]]
        t["ReadingCelsius"] = round(_lerp(idle, full, u))
    return out


def observe(state: dict[str, Any], u: float) -> list[dict[str, Any]]:
    """The under-load faults that trip at u and have not logged yet write their one log
    entry (the BMC's SEL / IML, the vendor's message); returns the new entries."""
    v = vendor_data(state["vendor"])
    log = v["log_services"][0]["id"]
    new = []
    for f in state.get("faults", []):
        if f["kind"] not in UNDER_LOAD or f.get("tripped") or clamp(u) < TRIP_U:
            continue
        comp = f["component"]
        if f["kind"] == FAN_UNDER_LOAD:
            msg = v["sel"]["fan"]
            entry = add_log(state, log, "Critical", msg["message_id"],
                            msg["text"].format(fan=comp["name"]), SensorType="Fan")
        else:
            msg = v["sel"]["psu_failed"]
            entry = add_log(state, log, "Critical", msg["message_id"],
                            msg["text"].format(n=comp["slot"], serial=comp["serial"]),
                            SensorType="Power Supply")
        f["tripped"] = True
        f.setdefault("log_entries", []).append([log, entry["Id"]])
        new.append(entry)
    return new


def thermal_subsystem(state: dict[str, Any], path: str, u: float) -> dict[str, Any] | None:
    """iLO's ThermalSubsystem (Fans collection, each Fan, ThermalMetrics) at load u: the
    same fans and temperatures as the legacy Thermal, in the newer schema; None when path
    is not one of them or the vendor does not serve it (data: thermal_subsystem)."""
    chassis = paths_of(state).chassis
    base = f"{chassis}/ThermalSubsystem"
    if not vendor_data(state["vendor"]).get("thermal_subsystem") or \
            not (path == base or path.startswith(base + "/")):
        return None
    legacy = thermal(state, state["resources"][f"{chassis}/Thermal"], u)
    fans = {str(int(f["MemberId"]) + 1): f for f in legacy["Fans"]}
    if path == base:
        return {"@odata.id": base, "@odata.type": "#ThermalSubsystem.v1_3_2.ThermalSubsystem",
                "Id": "ThermalSubsystem", "Name": "Thermal Subsystem",
                "Fans": ref(f"{base}/Fans"), "ThermalMetrics": ref(f"{base}/ThermalMetrics"),
                "Status": {"Health": _worst(f["Status"]["Health"] for f in legacy["Fans"]),
                           "State": "Enabled"}}
    if path == f"{base}/Fans":
        return collection(path, "FanCollection", "Fan Collection",
                          [f"{path}/{n}" for n in fans])
    if path == f"{base}/ThermalMetrics":
        temps = legacy["Temperatures"]
        inlet = next((t for t in temps if t["PhysicalContext"] == "Intake"), None)
        return {"@odata.id": path, "@odata.type": "#ThermalMetrics.v1_3_1.ThermalMetrics",
                "Id": "ThermalMetrics", "Name": "Chassis Thermal Metrics",
                "TemperatureReadingsCelsius": [
                    {"DeviceName": t["Name"], "PhysicalContext": t["PhysicalContext"],
                     "Reading": t["ReadingCelsius"]} for t in temps],
                "TemperatureReadingsCelsius@odata.count": len(temps),
                **({"TemperatureSummaryCelsius": {"Ambient": {
                    "Reading": inlet["ReadingCelsius"]}}} if inlet else {})}
    n = path.rsplit("/", 1)[1]
    if path == f"{base}/Fans/{n}" and n in fans:
        f = fans[n]
        return {"@odata.id": path, "@odata.type": "#Fan.v1_5_1.Fan", "Id": n,
                "Name": f["Name"], "PhysicalContext": f["PhysicalContext"], "HotPluggable": True,
                "SpeedPercent": {"Reading": f["Reading"]}, "Status": dict(f["Status"])}
    return None


def _worst(healths: Any) -> str:
    return max(healths, key=lambda h: _HEALTH_ORDER.get(h, 0), default="OK")
