"""Chassis power and thermal readings through Redfish, and what a series of them sums to.

Both shapes a BMC may serve are read: the legacy `Power`/`Thermal` resources (iDRAC9 and
iLO 5/6 serve them) and `PowerSubsystem`/`ThermalSubsystem`/`EnvironmentMetrics` (Redfish
2020.4 on, newer firmware). Fan speeds stay in the BMC's unit (iDRAC RPM, iLO percent).
Plain data, no opinions: rackready.steps.envelope samples with it during a run and turns
the summary into measurements; the report plots the series.

The BMC is untrusted: a reading that is not a finite number in its physical range
(RANGES) is refused, named, and counted (bmc.envelope.refused_readings fails a node on
it); a list longer than any chassis holds is read to MAX_LISTED and refused past it.
Samples are reduced as they arrive (Reduction): peaks, worst states and a series of at
most KEEP + 1 points, so a week of sampling takes the memory of a minute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rackready.redfish.client import Client, link, members
from rackready.sanitize import one_line

# Points kept for the report's plot: each stands for a run of samples (its peaks and its
# slowest fan), so a week-long soak at 2 s (300k samples) keeps its shape in KEEP.
KEEP = 300
_WORST = {"Critical": 3, "Warning": 2, "unknown": 1, "OK": 0}
ABSENT = {"Absent", "Disabled", "StandbyOffline", "UnavailableOffline"}

# The physical range of each reading (inclusive); outside it the BMC is not telling a
# reading, and the reading is refused.
RANGES: dict[str, tuple[float, float, str, str]] = {
    # kind: (lowest, highest, unit, provenance)
    "chassis_w": (0, 30_000, "W", "the largest air-cooled 8-GPU servers (XE9680: 6 x 2800 W "
                  "PSUs; HGX B200 systems about 14.3 kW) draw under 17 kW; below 0 is no draw"),
    "psu_w": (0, 10_000, "W", "server PSUs are rated up to about 3.2 kW (Dell 3200 W, HPE "
              "3000 W Titanium)"),
    "psu_capacity_w": (1, 10_000, "W", "as psu_w; a capacity of 0 carries nothing"),
    "temperature_c": (-40, 150, "C", "-40 C is the coldest rating of server parts in storage; "
                      "150 C is past every die's shutdown (GPUs about 95-105 C, CPUs' Tjmax "
                      "100-125 C)"),
    "fan_rpm": (0, 50_000, "RPM", "server fans (40-80 mm) turn at most about 30,000 RPM"),
    "fan_percent": (0, 100, "%", "a share of the fan's full speed"),
}
# Items in one list or collection the envelope reads (PSUs, fans, temperatures, sensors,
# chassis): an 8-GPU chassis lists 6-8 PSUs, 12-24 fan rotors and 60-120 temperature
# sensors; more than 256 is no chassis, and the rest is refused.
MAX_LISTED = 256
# Distinct refused readings named in the record (each with its count); the rest counted.
MAX_REFUSED_NAMED = 20


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _said(v: Any) -> str:
    return one_line(repr(v) if not isinstance(v, str) else v, 40)


def refuse(s: dict[str, Any], what: str, why: str) -> None:
    """A reading the BMC gave that is not one: named (what), with the BMC's words (why)."""
    s["refused"].append((one_line(what, 80), one_line(why, 120)))


def _value(s: dict[str, Any], v: Any, kind: str, what: str) -> float | None:
    """A reading in its physical range, or None: not reported (absent, null) or refused."""
    if v is None:
        return None
    x = _num(v)
    if x is None or not math.isfinite(x):
        refuse(s, what, f"{_said(v)} is not a number")
        return None
    lo, hi, unit, _ = RANGES[kind]
    if not lo <= x <= hi:
        refuse(s, what, f"{x:g} {unit} is outside {lo:g}..{hi:g} {unit}")
        return None
    return x


def _reading(s: dict[str, Any], v: Any, kind: str, what: str) -> float | None:
    """A number, or a Redfish SensorExcerpt ({"Reading": n})."""
    return _value(s, v.get("Reading") if isinstance(v, dict) else v, kind, what)


def _listed(s: dict[str, Any], items: Any, what: str) -> list[Any]:
    """A list the BMC gave, at most MAX_LISTED long (more is refused, named)."""
    if not isinstance(items, list):
        if items is not None:
            refuse(s, what, f"{_said(items)} is not a list")
        return []
    if len(items) > MAX_LISTED:
        refuse(s, what, f"{len(items)} listed, more than any chassis holds ({MAX_LISTED})")
    return items[:MAX_LISTED]


def _name(res: dict[str, Any], *keys: str, default: str = "") -> str:
    return one_line(str(next((res[k] for k in keys if res.get(k)), default)), 64)


def _status(res: dict[str, Any]) -> tuple[str, str]:
    st = res.get("Status")
    st = st if isinstance(st, dict) else {}
    return one_line(str(st.get("Health") or "unknown"), 20), one_line(str(st.get("State") or ""),
                                                                    30)


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
    for uri in members(client, link(client.root, "Chassis"), MAX_LISTED):
        c = client.get(uri)
        ch = _Chassis(link(c, "Power"), link(c, "Thermal"), link(c, "PowerSubsystem"),
                      link(c, "ThermalSubsystem"), link(c, "EnvironmentMetrics"))
        metrics = link(client.get(ch.thermal_subsystem), "ThermalMetrics") \
            if ch.thermal_subsystem and not ch.thermal else None
        if not ch.thermal and not metrics and link(c, "Sensors"):
            for suri in members(client, link(c, "Sensors"), MAX_LISTED):
                sensor = client.get(suri)
                if str(sensor.get("ReadingType") or "") == "Temperature" and _air(sensor):
                    ch.air_sensors.append((suri, _air(sensor)))
        out.append(ch)
    return out


def _psu(p: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    health, state = _status(p)
    name = _name(p, "Name", "MemberId", "Id", default="PSU")
    out = p.get("PowerOutputWatts")
    return {"name": name, "serial": _name(p, "SerialNumber"), "health": health,
            "state": state,
            "capacity_w": _value(s, p.get("PowerCapacityWatts"), "psu_capacity_w",
                                 f"{name} capacity (PowerCapacityWatts)"),
            "output_w": _value(s, out if out is not None else p.get("LastPowerOutputWatts"),
                               "psu_w", f"{name} output"),
            "input_w": _value(s, p.get("PowerInputWatts"), "psu_w",
                              f"{name} input (PowerInputWatts)")}


def _add_draw(s: dict[str, Any], watts: float | None) -> None:
    if watts is not None:
        s["power_w"] = (s["power_w"] or 0.0) + watts


def _legacy_power(body: dict[str, Any], s: dict[str, Any]) -> None:
    for ctl in _listed(s, body.get("PowerControl"), "PowerControl"):
        if isinstance(ctl, dict):
            _add_draw(s, _value(s, ctl.get("PowerConsumedWatts"), "chassis_w",
                                "chassis draw (PowerConsumedWatts)"))
    s["psus"] += [_psu(p, s) for p in _listed(s, body.get("PowerSupplies"), "PowerSupplies")
                  if isinstance(p, dict)]


def _subsystem_power(client: Client, uri: str, s: dict[str, Any]) -> None:
    body = client.get(uri)
    uris = members(client, link(body, "PowerSupplies"), MAX_LISTED + 1)
    for puri in _listed(s, uris, "PowerSupplies"):
        p = client.get(puri)
        row = _psu(p, s)
        murl = link(p, "Metrics")
        if murl:
            m = client.get(murl)
            row["input_w"] = _reading(s, m.get("InputPowerWatts"), "psu_w",
                                      f"{row['name']} input (InputPowerWatts)")
            row["output_w"] = _reading(s, m.get("OutputPowerWatts"), "psu_w",
                                       f"{row['name']} output (OutputPowerWatts)")
        s["psus"].append(row)


def _temperature(s: dict[str, Any], context: str, value: Any, name: str) -> None:
    key = {"Intake": "inlet_c", "Exhaust": "exhaust_c"}.get(context)
    if not key:
        return
    c = _value(s, value, "temperature_c", f"{context.lower()} air ({name})")
    if c is not None:
        s[key] = c if s[key] is None else max(s[key], c)


def _fan(s: dict[str, Any], name: str, reading: Any, units: str, health: str,
         state: str) -> None:
    kind = "fan_percent" if units.lower() in ("percent", "%") else "fan_rpm"
    s["fans"].append({"name": name, "reading": _value(s, reading, kind, f"fan {name} speed"),
                      "units": one_line(units, 12), "health": health, "state": state})


def _legacy_thermal(body: dict[str, Any], s: dict[str, Any]) -> None:
    for t in _listed(s, body.get("Temperatures"), "Temperatures"):
        if isinstance(t, dict) and _status(t)[1] not in ABSENT:
            _temperature(s, _air(t), t.get("ReadingCelsius") if "ReadingCelsius" in t
                         else t.get("CurrentReading"), _name(t, "Name", "MemberId"))
    for f in _listed(s, body.get("Fans"), "Fans"):
        if isinstance(f, dict):
            _fan(s, _name(f, "Name", "FanName", "MemberId"), *_legacy_fan_speed(f), *_status(f))


def _legacy_fan_speed(f: dict[str, Any]) -> tuple[Any, str]:
    """A legacy Thermal fan's speed and unit, in each schema's words: Thermal 1.1+
    `Reading` + `ReadingUnits`; iLO 4 and early iLO 5 (HpServerFan) `CurrentReading` +
    `Units` ("Percent"); DMTF Thermal 1.0 `ReadingRPM`."""
    for value, unit in (("Reading", "ReadingUnits"), ("CurrentReading", "Units")):
        if f.get(value) is not None:
            return f[value], str(f.get(unit) or "")
    if f.get("ReadingRPM") is not None:
        return f["ReadingRPM"], "RPM"
    return None, str(f.get("ReadingUnits") or f.get("Units") or "")


def _subsystem_thermal(client: Client, uri: str, s: dict[str, Any]) -> None:
    body = client.get(uri)
    for furi in _listed(s, members(client, link(body, "Fans"), MAX_LISTED + 1), "Fans"):
        f = client.get(furi)
        speed = f.get("SpeedPercent") or {}
        rpm = speed.get("SpeedRPM") if isinstance(speed, dict) else None
        reading = rpm if rpm is not None else \
            speed.get("Reading") if isinstance(speed, dict) else speed
        _fan(s, _name(f, "Name", "Id"), reading, "RPM" if rpm is not None else "Percent",
             *_status(f))
    metrics_uri = link(body, "ThermalMetrics")
    if metrics_uri:
        temps = client.get(metrics_uri).get("TemperatureReadingsCelsius")
        for t in _listed(s, temps, "TemperatureReadingsCelsius"):
            if isinstance(t, dict):
                _temperature(s, _air({"PhysicalContext": t.get("PhysicalContext"),
                                      "Name": t.get("DeviceName")}),
                             t.get("Reading"), _name(t, "DeviceName"))


def read(client: Client, chassis: list[_Chassis], t: float) -> dict[str, Any]:
    """One sample of every chassis: legacy resources where served, else the subsystems.
    Readings refused (not a number, outside RANGES) are in its "refused" (what, why)."""
    s: dict[str, Any] = {"t": round(t, 2), "power_w": None, "inlet_c": None,
                         "exhaust_c": None, "psus": [], "fans": [], "refused": []}
    for c in chassis:
        if c.power:
            _legacy_power(client.get(c.power), s)
        elif c.power_subsystem:
            _subsystem_power(client, c.power_subsystem, s)
        if c.environment and not c.power:
            _add_draw(s, _reading(s, client.get(c.environment).get("PowerWatts"), "chassis_w",
                                  "chassis draw (EnvironmentMetrics PowerWatts)"))
        if c.thermal:
            _legacy_thermal(client.get(c.thermal), s)
        elif c.thermal_subsystem:
            _subsystem_thermal(client, c.thermal_subsystem, s)
        for suri, context in c.air_sensors:
            sensor = client.get(suri)
            _temperature(s, context, sensor.get("Reading"), _name(sensor, "Name", "Id"))
    told = any(what.startswith("chassis draw") for what, _ in s["refused"])
    if s["power_w"] is None and not told:  # no chassis total: what the PSUs put in (or out)
        inputs = [p["input_w"] if p["input_w"] is not None else p["output_w"]
                  for p in s["psus"] if p["state"] not in ABSENT]
        if inputs and all(v is not None for v in inputs):
            s["power_w"] = float(sum(v for v in inputs if v is not None))
    if s["power_w"] is not None and not RANGES["chassis_w"][0] <= s["power_w"] <= \
            RANGES["chassis_w"][1]:  # a sum of plausible parts can still be none
        refuse(s, "chassis draw (the sum)", f"{s['power_w']:g} W is outside the range")
        s["power_w"] = None
    return s


def _lowest_fan(s: dict[str, Any]) -> float | None:
    if "fan_lowest" in s:  # a point already reduced
        return _num(s["fan_lowest"])
    speeds = [f["reading"] for f in s.get("fans") or [] if _num(f.get("reading")) is not None
              and f.get("state") not in ABSENT]
    return min(speeds) if speeds else None


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two runs of samples as one point: the first time, the peaks, the slowest fan."""
    out = dict(a)
    for key, pick in (("power_w", max), ("inlet_c", max), ("exhaust_c", max),
                      ("fan_lowest", min)):
        vals = [v for v in (a.get(key), b.get(key)) if v is not None]
        out[key] = pick(vals) if vals else None
    return out


def _worse(a: str, b: str) -> str:
    return max(a, b, key=lambda h: _WORST.get(h, 1))


class Reduction:
    """Samples reduced as they arrive: what the measurements and the plot need, in memory
    flat in the length of the run (the parts and refused readings it names are bounded)."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = max(2, keep - keep % 2)
        self.count = 0
        self.powers: list[float] = []  # [lowest, highest]
        self.peak_inlet: float | None = None
        self.peak_exhaust: float | None = None
        self.psus: dict[str, dict[str, Any]] = {}
        self.fans: dict[str, dict[str, Any]] = {}
        self.fan_units = ""
        self.refused: dict[str, dict[str, Any]] = {}
        self.refused_count = 0
        self._points: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._in_open = 0
        self._stride = 1

    def _refuse(self, what: str, why: str, t: float) -> None:
        self.refused_count += 1
        row = self.refused.get(what)
        if row is not None:
            row["count"] += 1
        elif len(self.refused) < MAX_REFUSED_NAMED:
            self.refused[what] = {"reading": what, "said": why, "t": t, "count": 1}

    def _part(self, table: dict[str, dict[str, Any]], kind: str, name: str,
              row: dict[str, Any], t: float) -> dict[str, Any] | None:
        if name not in table and len(table) >= MAX_LISTED:
            self._refuse(f"{kind} over the run", f"more than {MAX_LISTED} names", t)
            return None
        return table.setdefault(name, row)

    def add(self, s: dict[str, Any]) -> None:
        t = float(s.get("t") or 0.0)
        self.count += 1
        for what, why in s.get("refused") or []:
            self._refuse(what, why, t)
        power = s.get("power_w")
        if power is not None:
            self.powers = [min(self.powers[0], power), max(self.powers[1], power)] \
                if self.powers else [power, power]
        for key in ("inlet_c", "exhaust_c"):
            v = s.get(key)
            peak = f"peak_{key[:-2]}"
            if v is not None:
                cur = getattr(self, peak)
                setattr(self, peak, v if cur is None else max(cur, v))
        for p in s.get("psus") or []:
            if p.get("state") in ABSENT:
                continue
            row = self._part(self.psus, "PSUs", p["name"],
                             {"serial": p.get("serial", ""), "health": "OK",
                              "capacity_w": None}, t)
            if row is not None:
                row["health"] = _worse(row["health"], p["health"])
                if p.get("capacity_w") is not None:
                    row["capacity_w"] = p["capacity_w"]
        for f in s.get("fans") or []:
            if f.get("state") in ABSENT:
                continue
            self.fan_units = self.fan_units or f.get("units", "")
            row = self._part(self.fans, "fans", f["name"],
                             {"health": "OK", "lowest": None, "units": f.get("units", "")}, t)
            if row is not None:
                row["health"] = _worse(row["health"], f["health"])
                if f.get("reading") is not None:
                    row["lowest"] = f["reading"] if row["lowest"] is None else \
                        min(row["lowest"], f["reading"])
        self._plot({"t": s.get("t"), "power_w": power, "inlet_c": s.get("inlet_c"),
                    "exhaust_c": s.get("exhaust_c"), "fan_lowest": _lowest_fan(s)})

    def _plot(self, point: dict[str, Any]) -> None:
        """Into the open point; a full one is kept; KEEP kept ones halve into KEEP / 2."""
        self._open = point if self._open is None else _merge(self._open, point)
        self._in_open += 1
        if self._in_open < self._stride:
            return
        self._points.append(self._open)
        self._open, self._in_open = None, 0
        if len(self._points) >= self.keep:
            pts = self._points
            self._points = [_merge(pts[i], pts[i + 1]) for i in range(0, len(pts), 2)]
            self._stride *= 2

    def points(self) -> list[dict[str, Any]]:
        """At most KEEP + 1 points, evenly spaced in samples, the first one first."""
        return self._points + ([self._open] if self._open is not None else [])

    def summary(self) -> dict[str, Any]:
        """Peaks, worst states and refused readings over every sample."""
        return {"samples": self.count,
                "peak_power_w": self.powers[1] if self.powers else None,
                "idle_power_w": self.powers[0] if self.powers else None,
                "peak_inlet_c": self.peak_inlet, "peak_exhaust_c": self.peak_exhaust,
                "psus": self.psus, "fans": self.fans, "refused_count": self.refused_count,
                "refused": list(self.refused.values())}


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Peaks, worst states and refused readings over every sample."""
    r = Reduction()
    for s in samples:
        r.add(s)
    return r.summary()


def one_lost_capacity(psus: dict[str, dict[str, Any]]) -> tuple[float | None, str]:
    """What the PSUs deliver with the largest of them lost, and how that was reckoned."""
    caps = [p["capacity_w"] for p in psus.values()]
    if not caps or any(c is None for c in caps):
        return None, "PSU capacity (PowerCapacityWatts) not reported or refused"
    known = [float(c) for c in caps if c is not None]
    if len(known) < 2:
        return None, f"{len(known)} PSU: no redundancy to lose one from"
    rating = (f"{len(known)} x {known[0]:.0f} W" if len(set(known)) == 1
              else " + ".join(f"{c:.0f}" for c in known) + " W")
    capacity = sum(known) - max(known)
    return capacity, f"{rating}, one lost: {capacity:.0f} W"


def series(envelope: dict[str, Any] | None) -> dict[str, Any]:
    """The envelope as the report plots it: one list per reading, the capacity line (a
    record of reduced points, or of whole samples as runs before the reduction kept)."""
    if not envelope or not envelope.get("samples"):
        return {}
    samples = envelope["samples"]
    units = envelope.get("fan_units") or next(
        (f.get("units", "") for s in samples for f in s.get("fans") or []), "")
    summ = envelope.get("summary") or summarize(samples)
    capacity, how = one_lost_capacity(summ["psus"])
    return {"t_s": [s["t"] for s in samples], "power_w": [s["power_w"] for s in samples],
            "inlet_c": [s["inlet_c"] for s in samples],
            "exhaust_c": [s["exhaust_c"] for s in samples],
            "fan_lowest": [_lowest_fan(s) for s in samples], "fan_units": units,
            "one_lost_capacity_w": capacity, "capacity_basis": how,
            "count": envelope.get("count", len(samples)),
            "period_s": envelope.get("period_s"), "problem": envelope.get("problem", "")}
