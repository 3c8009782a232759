"""Chassis power and thermal readings through Redfish, and what a series of them sums to.

Both shapes a BMC may serve are read: the legacy `Power`/`Thermal` resources (iDRAC9 and
iLO 5/6 serve them) and `PowerSubsystem`/`ThermalSubsystem`/`EnvironmentMetrics` (Redfish
2020.4 on, newer firmware). Fan speeds stay in the BMC's unit (iDRAC RPM, iLO percent).
Plain data, no opinions: rackready.steps.envelope samples with it during a run and turns
the summary into measurements; the report plots the series.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rackready.redfish.client import Client, link, members

# Samples kept for the report's plot: a week-long soak at 2 s is 300k; the judged peaks
# and worst states are taken over every sample before thinning.
KEEP = 300
_WORST = {"Critical": 3, "Warning": 2, "unknown": 1, "OK": 0}
ABSENT = {"Absent", "Disabled", "StandbyOffline", "UnavailableOffline"}


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _reading(v: Any) -> float | None:
    """A number, or a Redfish SensorExcerpt ({"Reading": n})."""
    return _num(v.get("Reading")) if isinstance(v, dict) else _num(v)


def _status(res: dict[str, Any]) -> tuple[str, str]:
    st = res.get("Status") or {}
    return str(st.get("Health") or "unknown"), str(st.get("State") or "")


@dataclass
class _Chassis:
    """Where one chassis keeps its readings (found once, read every sample)."""
    power: str | None = None
    thermal: str | None = None
    power_subsystem: str | None = None
    thermal_subsystem: str | None = None
    environment: str | None = None
    # intake/exhaust Sensor resources, where the subsystem has no ThermalMetrics
    air_sensors: list[tuple[str, str]] = field(default_factory=list)


def _air(sensor: dict[str, Any]) -> str:
    """Intake, Exhaust or "" for a Sensor, by its PhysicalContext, else its name."""
    context = str(sensor.get("PhysicalContext") or "")
    if context in ("Intake", "Exhaust"):
        return context
    name = str(sensor.get("Name") or "").lower()
    return "Intake" if "inlet" in name or "intake" in name else \
        "Exhaust" if "exhaust" in name else ""


def discover(client: Client) -> list[_Chassis]:
    """Each chassis's reading resources, found once (a sample then reads only those)."""
    out = []
    for uri in members(client, link(client.root, "Chassis")):
        c = client.get(uri)
        ch = _Chassis(link(c, "Power"), link(c, "Thermal"), link(c, "PowerSubsystem"),
                      link(c, "ThermalSubsystem"), link(c, "EnvironmentMetrics"))
        metrics = link(client.get(ch.thermal_subsystem), "ThermalMetrics") \
            if ch.thermal_subsystem and not ch.thermal else None
        if not ch.thermal and not metrics and link(c, "Sensors"):
            for suri in members(client, link(c, "Sensors")):
                sensor = client.get(suri)
                if str(sensor.get("ReadingType") or "") == "Temperature" and _air(sensor):
                    ch.air_sensors.append((suri, _air(sensor)))
        out.append(ch)
    return out


def _psu(p: dict[str, Any]) -> dict[str, Any]:
    health, state = _status(p)
    name = str(p.get("Name") or p.get("MemberId") or p.get("Id") or "PSU")
    return {"name": name, "serial": str(p.get("SerialNumber") or ""), "health": health,
            "state": state, "capacity_w": _num(p.get("PowerCapacityWatts")),
            "output_w": _num(p.get("PowerOutputWatts")) if p.get("PowerOutputWatts") is not None
            else _num(p.get("LastPowerOutputWatts")),
            "input_w": _num(p.get("PowerInputWatts"))}


def _legacy_power(body: dict[str, Any], s: dict[str, Any]) -> None:
    for ctl in body.get("PowerControl") or []:
        watts = _num(ctl.get("PowerConsumedWatts"))
        if watts is not None:
            s["power_w"] = (s["power_w"] or 0.0) + watts
    s["psus"] += [_psu(p) for p in body.get("PowerSupplies") or []]


def _subsystem_power(client: Client, uri: str, s: dict[str, Any]) -> None:
    body = client.get(uri)
    for puri in members(client, link(body, "PowerSupplies")):
        p = client.get(puri)
        row = _psu(p)
        murl = link(p, "Metrics")
        if murl:
            m = client.get(murl)
            row["input_w"] = _reading(m.get("InputPowerWatts"))
            row["output_w"] = _reading(m.get("OutputPowerWatts"))
        s["psus"].append(row)


def _temperature(s: dict[str, Any], context: str, value: float | None) -> None:
    key = {"Intake": "inlet_c", "Exhaust": "exhaust_c"}.get(context)
    if key and value is not None:
        s[key] = value if s[key] is None else max(s[key], value)


def _legacy_thermal(body: dict[str, Any], s: dict[str, Any]) -> None:
    for t in body.get("Temperatures") or []:
        if _status(t)[1] not in ABSENT:
            _temperature(s, _air(t), _num(t.get("ReadingCelsius")))
    for f in body.get("Fans") or []:
        health, state = _status(f)
        s["fans"].append({"name": str(f.get("Name") or f.get("FanName") or f.get("MemberId")),
                          "reading": _num(f.get("Reading")),
                          "units": str(f.get("ReadingUnits") or ""), "health": health,
                          "state": state})


def _subsystem_thermal(client: Client, uri: str, s: dict[str, Any]) -> None:
    body = client.get(uri)
    for furi in members(client, link(body, "Fans")):
        f = client.get(furi)
        health, state = _status(f)
        speed = f.get("SpeedPercent") or {}
        rpm = _num(speed.get("SpeedRPM")) if isinstance(speed, dict) else None
        s["fans"].append({"name": str(f.get("Name") or f.get("Id")),
                          "reading": rpm if rpm is not None else _reading(speed),
                          "units": "RPM" if rpm is not None else "Percent", "health": health,
                          "state": state})
    metrics_uri = link(body, "ThermalMetrics")
    if metrics_uri:
        for t in client.get(metrics_uri).get("TemperatureReadingsCelsius") or []:
            _temperature(s, _air({"PhysicalContext": t.get("PhysicalContext"),
                                  "Name": t.get("DeviceName")}), _reading(t))


def read(client: Client, chassis: list[_Chassis], t: float) -> dict[str, Any]:
    """One sample of every chassis: legacy resources where served, else the subsystems."""
    s: dict[str, Any] = {"t": round(t, 2), "power_w": None, "inlet_c": None,
                         "exhaust_c": None, "psus": [], "fans": []}
    for c in chassis:
        if c.power:
            _legacy_power(client.get(c.power), s)
        elif c.power_subsystem:
            _subsystem_power(client, c.power_subsystem, s)
        if c.environment and not c.power:
            watts = _reading(client.get(c.environment).get("PowerWatts"))
            if watts is not None:
                s["power_w"] = (s["power_w"] or 0.0) + watts
        if c.thermal:
            _legacy_thermal(client.get(c.thermal), s)
        elif c.thermal_subsystem:
            _subsystem_thermal(client, c.thermal_subsystem, s)
        for suri, context in c.air_sensors:
            _temperature(s, context, _num(client.get(suri).get("Reading")))
    if s["power_w"] is None:  # no chassis total: what the PSUs put in (or out)
        inputs = [p["input_w"] if p["input_w"] is not None else p["output_w"]
                  for p in s["psus"] if p["state"] not in ABSENT]
        if inputs and all(v is not None for v in inputs):
            s["power_w"] = float(sum(v for v in inputs if v is not None))
    return s


def thin(samples: list[dict[str, Any]], keep: int = KEEP) -> list[dict[str, Any]]:
    """At most `keep` samples for the plot, evenly spaced, the first and the last kept."""
    if len(samples) <= keep:
        return list(samples)
    step = (len(samples) - 1) / (keep - 1)
    return [samples[round(i * step)] for i in range(keep)]


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Peaks and worst states over every sample (what the measurements are made of)."""
    powers = [s["power_w"] for s in samples if s.get("power_w") is not None]
    inlets = [s["inlet_c"] for s in samples if s.get("inlet_c") is not None]
    exhausts = [s["exhaust_c"] for s in samples if s.get("exhaust_c") is not None]
    psus: dict[str, dict[str, Any]] = {}
    fans: dict[str, dict[str, Any]] = {}
    for s in samples:
        for p in s.get("psus") or []:
            if p.get("state") in ABSENT:
                continue
            row = psus.setdefault(p["name"], {"serial": p.get("serial", ""), "health": "OK",
                                              "capacity_w": None})
            row["health"] = max(row["health"], p["health"], key=lambda h: _WORST.get(h, 1))
            if p.get("capacity_w") is not None:
                row["capacity_w"] = p["capacity_w"]
        for f in s.get("fans") or []:
            if f.get("state") in ABSENT:
                continue
            row = fans.setdefault(f["name"], {"health": "OK", "lowest": None,
                                              "units": f.get("units", "")})
            row["health"] = max(row["health"], f["health"], key=lambda h: _WORST.get(h, 1))
            if f.get("reading") is not None:
                row["lowest"] = f["reading"] if row["lowest"] is None else \
                    min(row["lowest"], f["reading"])
    return {"samples": len(samples), "peak_power_w": max(powers) if powers else None,
            "idle_power_w": min(powers) if powers else None,
            "peak_inlet_c": max(inlets) if inlets else None,
            "peak_exhaust_c": max(exhausts) if exhausts else None, "psus": psus, "fans": fans}


def one_lost_capacity(psus: dict[str, dict[str, Any]]) -> tuple[float | None, str]:
    """What the PSUs deliver with the largest of them lost, and how that was reckoned."""
    caps = [p["capacity_w"] for p in psus.values()]
    if not caps or any(c is None for c in caps):
        return None, "PSU capacity (PowerCapacityWatts) not reported"
    known = [float(c) for c in caps if c is not None]
    if len(known) < 2:
        return None, f"{len(known)} PSU: no redundancy to lose one from"
    rating = (f"{len(known)} x {known[0]:.0f} W" if len(set(known)) == 1
              else " + ".join(f"{c:.0f}" for c in known) + " W")
    capacity = sum(known) - max(known)
    return capacity, f"{rating}, one lost: {capacity:.0f} W"


def series(envelope: dict[str, Any] | None) -> dict[str, Any]:
    """The envelope as the report plots it: one list per reading, the capacity line."""
    if not envelope or not envelope.get("samples"):
        return {}
    samples = envelope["samples"]
    fans = [[f["reading"] for f in s.get("fans") or [] if f.get("reading") is not None]
            for s in samples]
    units = next((f.get("units", "") for s in samples for f in s.get("fans") or []), "")
    summ = envelope.get("summary") or summarize(samples)
    capacity, how = one_lost_capacity(summ["psus"])
    return {"t_s": [s["t"] for s in samples], "power_w": [s["power_w"] for s in samples],
            "inlet_c": [s["inlet_c"] for s in samples],
            "exhaust_c": [s["exhaust_c"] for s in samples],
            "fan_lowest": [min(f) if f else None for f in fans], "fan_units": units,
            "one_lost_capacity_w": capacity, "capacity_basis": how,
            "count": envelope.get("count", len(samples)),
            "period_s": envelope.get("period_s"), "problem": envelope.get("problem", "")}
