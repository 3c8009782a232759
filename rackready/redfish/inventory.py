"""Identity, firmware, chassis health and logs, read by following Redfish links.

Returns plain data (no opinions): the controller turns it into measurements that
the same judge as every other check decides on (rackready.steps.oob).
"""

from __future__ import annotations

import re
from typing import Any

from rackready.redfish.client import Client, RedfishError, link, members

# Firmware components the profiles name (by what a technician calls them).
_CLASSES = [
    ("bios", r"\bBIOS\b|System ROM"),
    ("bmc", r"iDRAC|Integrated Dell Remote Access|\biLO\b|\bBMC\b"),
    ("cpld", r"CPLD|Programmable Logic"),
    ("hgx", r"HGX|NVSwitch|Baseboard"),
    ("gpu", r"\bGPU\b|VBIOS|H100|H200"),
    ("psu", r"Power Supply|\bPSU\b"),
    ("nic", r"ConnectX|Mellanox|\bNIC\b|Ethernet|Network|Broadcom|BCM57"),
    # \bDrive\b: not Dell's "OS Driver Pack"
    ("drive", r"NVMe|\bSSD\b|\bDrive\b|Disk|PM17|Kioxia|Samsung"),
]
LOG_ENTRY_CAP = 2000
GPU_CAP = 64  # GPUs read per system: more than any server holds
EXCERPT = 20


def firmware_class(name: str, ident: str = "") -> str:
    text = f"{name} {ident}"
    for cls, pattern in _CLASSES:
        if re.search(pattern, text, re.IGNORECASE):
            return cls
    return "other"


def _health(res: dict[str, Any]) -> str:
    st = res.get("Status") or {}
    if str(st.get("State") or "") in ("Absent",):
        return "Absent"
    return str(st.get("Health") or "unknown")


def _state(res: dict[str, Any]) -> str:
    return str((res.get("Status") or {}).get("State") or "")


def _safe_members(client: Client, uri: str | None) -> list[str]:
    if not uri:
        return []
    try:
        return members(client, uri)
    except RedfishError as exc:
        if exc.status == 404:
            return []
        raise


def firmware(client: Client) -> list[dict[str, str]]:
    svc = link(client.root, "UpdateService")
    if not svc:
        return []
    inv = link(client.get(svc), "FirmwareInventory")
    out = []
    for uri in _safe_members(client, inv):
        item = client.get(uri)
        name = str(item.get("Name") or item.get("Id") or uri.rsplit("/", 1)[-1])
        ident = str(item.get("Id") or "")
        if ident.startswith("Previous"):  # Dell keeps the rollback image too
            continue
        out.append({"name": name, "id": ident, "version": str(item.get("Version") or ""),
                    "class": firmware_class(name, ident)})
    return out


def _power(client: Client, chassis: dict[str, Any], out: dict[str, Any]) -> None:
    sub = link(chassis, "PowerSubsystem")
    if sub:
        body = client.get(sub)
        for uri in _safe_members(client, link(body, "PowerSupplies")):
            p = client.get(uri)
            out["psus"].append(_psu(p))
        for group in body.get("PowerSupplyRedundancy") or []:
            out["redundancy"].append(_health(group))
        if out["psus"] or out["redundancy"]:
            return
    legacy = link(chassis, "Power")
    if not legacy:
        return
    body = client.get(legacy)
    for p in body.get("PowerSupplies") or []:
        out["psus"].append(_psu(p))
    for group in body.get("Redundancy") or []:
        out["redundancy"].append(_health(group))
    for v in body.get("Voltages") or []:
        out["voltages"].append({
            "name": str(v.get("Name") or v.get("MemberId")), "reading": v.get("ReadingVolts"),
            "lower": v.get("LowerThresholdCritical"), "upper": v.get("UpperThresholdCritical"),
            "health": _health(v), "state": _state(v)})


def _psu(p: dict[str, Any]) -> dict[str, Any]:
    return {"name": str(p.get("Name") or p.get("MemberId") or p.get("Id")),
            "model": str(p.get("Model") or ""), "serial": str(p.get("SerialNumber") or ""),
            "firmware": str(p.get("FirmwareVersion") or ""), "health": _health(p),
            "state": _state(p)}


def _thermal(client: Client, chassis: dict[str, Any], out: dict[str, Any]) -> None:
    sub = link(chassis, "ThermalSubsystem")
    got = False
    if sub:
        body = client.get(sub)
        for uri in _safe_members(client, link(body, "Fans")):
            f = client.get(uri)
            out["fans"].append({"name": str(f.get("Name") or f.get("Id")), "health": _health(f),
                                "state": _state(f)})
            got = True
    sensors = link(chassis, "Sensors")
    if sensors:
        for uri in _safe_members(client, sensors):
            s = client.get(uri)
            kind = str(s.get("ReadingType") or "")
            th = s.get("Thresholds") or {}
            upper = (th.get("UpperCritical") or {}).get("Reading")
            lower = (th.get("LowerCritical") or {}).get("Reading")
            row = {"name": str(s.get("Name") or s.get("Id")), "reading": s.get("Reading"),
                   "upper": upper, "lower": lower, "health": _health(s), "state": _state(s)}
            if kind == "Temperature":
                out["temperatures"].append(row)
            elif kind == "Voltage":
                out["voltages"].append(row)
    legacy = link(chassis, "Thermal")
    if not legacy:
        return
    body = client.get(legacy)
    if not got:
        for f in body.get("Fans") or []:
            out["fans"].append({"name": str(f.get("Name") or f.get("FanName")  # iLO 4
                                            or f.get("MemberId")),
                                "health": _health(f), "state": _state(f)})
    if not out["temperatures"]:
        for t in body.get("Temperatures") or []:
            out["temperatures"].append({
                "name": str(t.get("Name") or t.get("MemberId")), "reading": t.get("ReadingCelsius"),
                "upper": t.get("UpperThresholdCritical"), "lower": t.get("LowerThresholdCritical"),
                "health": _health(t), "state": _state(t)})


def gpus(client: Client, systems: list[str]) -> list[dict[str, str]]:
    """The GPUs the BMC lists (Processors with ProcessorType GPU, under every system: an
    HGX baseboard can be a system of its own): slot, model, serial, UUID as it says them.
    A GPU without a serial is listed with serial "" (the controller counts what it has)."""
    out = []
    for system in systems:
        for uri in _safe_members(client, link(client.get(system), "Processors"))[:GPU_CAP]:
            p = client.get(uri)
            if str(p.get("ProcessorType") or "") != "GPU" or _state(p) == "Absent":
                continue
            where = ((p.get("Location") or {}).get("PartLocation") or {}).get("ServiceLabel")
            out.append({"slot": str(where or p.get("Id") or uri.rsplit("/", 1)[-1]),
                        "model": str(p.get("Model") or p.get("Name") or ""),
                        "serial": str(p.get("SerialNumber") or "").strip(),
                        "uuid": str(p.get("UUID") or "").strip()})
    return out[:GPU_CAP]


def log_entries(client: Client, log_service: str) -> list[dict[str, Any]]:
    svc = client.get(log_service)
    entries = link(svc, "Entries")
    out: list[dict[str, Any]] = []
    uri = entries
    while uri and len(out) < LOG_ENTRY_CAP:
        body = client.get(uri)
        for e in body.get("Members") or []:
            if not isinstance(e, dict):
                continue
            if set(e) == {"@odata.id"}:  # a BMC that lists links only: read the entry
                e = client.get(e["@odata.id"])
            out.append({"log": str(svc.get("Id") or log_service.rsplit("/", 1)[-1]),
                        "id": str(e.get("Id") or ""), "created": str(e.get("Created") or ""),
                        "severity": str(e.get("Severity") or ""),
                        "message": " ".join(str(e.get("Message") or "").split()),
                        "sensor": str(e.get("SensorType") or e.get("EntryType") or ""),
                        "message_id": str(e.get("MessageId") or "")})
        uri = body.get("Members@odata.nextLink")
    return out


def gather(client: Client) -> dict[str, Any]:
    """Everything the out-of-band step records, from /redfish/v1 down."""
    root = client.root
    out: dict[str, Any] = {"system": {}, "chassis": [], "managers": [], "firmware": [],
                           "psus": [], "redundancy": [], "fans": [], "temperatures": [],
                           "voltages": [], "logs": [], "log_services": [], "gpus": []}
    systems = _safe_members(client, link(root, "Systems"))
    if systems:
        s = client.get(systems[0])
        out["system"] = {
            "uri": systems[0], "manufacturer": str(s.get("Manufacturer") or ""),
            "model": str(s.get("Model") or ""), "serial": str(s.get("SerialNumber") or ""),
            "sku": str(s.get("SKU") or ""), "bios_version": str(s.get("BiosVersion") or ""),
            "power_state": str(s.get("PowerState") or ""),
            "power_on_hours": _power_on_hours(s)}
        out["log_services"] += _safe_members(client, link(s, "LogServices"))
    for uri in _safe_members(client, link(root, "Chassis")):
        c = client.get(uri)
        out["chassis"].append({"id": str(c.get("Id") or uri.rsplit("/", 1)[-1]),
                               "type": str(c.get("ChassisType") or ""),
                               "model": str(c.get("Model") or ""),
                               "serial": str(c.get("SerialNumber") or ""),
                               "part": str(c.get("PartNumber") or "")})
        _power(client, c, out)
        _thermal(client, c, out)
    for uri in _safe_members(client, link(root, "Managers")):
        m = client.get(uri)
        out["managers"].append({"id": str(m.get("Id") or ""), "model": str(m.get("Model") or ""),
                                "firmware": str(m.get("FirmwareVersion") or ""),
                                "datetime": str(m.get("DateTime") or "")})
        out["log_services"] += _safe_members(client, link(m, "LogServices"))
    out["firmware"] = firmware(client)
    out["gpus"] = gpus(client, systems)  # compared with the node's (rackready.decide.integrity)
    for svc in out["log_services"]:
        out["logs"] += log_entries(client, svc)
    return out


def _power_on_hours(s: dict[str, Any]) -> float | None:
    if isinstance(s.get("PowerOnHours"), (int, float)):
        return float(s["PowerOnHours"])
    for vendor in (s.get("Oem") or {}).values():  # Dell/HPE put it under Oem
        if isinstance(vendor, dict):
            for key in ("PowerOnHours", "SystemPowerOnHours"):
                if isinstance(vendor.get(key), (int, float)):
                    return float(vendor[key])
    return None
