"""Faults a lab BMC can show: pure functions from a BMC state to a faulted copy.

Like hwsim's faults, each record names the part it hits (PSU slot and serial,
fan name, log entry, BIOS attribute, BMC address) so a test can check that the
controller's verdict names the same part. heal() brings the hardware back and
keeps what the node's operators changed since (BIOS settings, jobs, logs that
were not the fault's).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from .base import add_log, paths_of, vendor_data
from .envelope import FAN_UNDER_LOAD, NAN_READING, PSU_UNDER_LOAD, TRIP_U
from .resources import dependents

FaultFn = Callable[[dict[str, Any], str | None], dict[str, Any]]

# The attribute bios-drift changes when no target is given. iDRAC: the system profile (a
# person in F2 setup or a BIOS reset back to the factory DAPC profile; its C-states, C1E
# and ASPM follow it, since they are locked under any profile but Custom). iLO: the core
# C-state floor, free under the Custom workload profile the role sets.
DRIFT_DEFAULT = {"Dell": "SysProfile", "HPE": "MinProcIdlePower"}


class FaultError(ValueError):
    """Unknown fault kind or target; the message is one line."""


def _vendor(state: dict[str, Any]) -> dict[str, Any]:
    return vendor_data(state["vendor"])


def _event_log(state: dict[str, Any]) -> str:
    """The log a hardware event lands in: iDRAC's SEL, iLO's IML."""
    return _vendor(state)["log_services"][0]["id"]


def _power(state: dict[str, Any]) -> dict[str, Any]:
    return state["resources"][f"{paths_of(state).chassis}/Power"]


def _psu(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    psus = _power(state)["PowerSupplies"]
    if target is None:
        return psus[-1]
    psu = next((x for x in psus if target in (str(int(x["MemberId"]) + 1),
                                               x["SerialNumber"], x["Name"])), None)
    if psu is None:
        raise FaultError(f"no power supply {target!r} on {state['node']} "
                         f"(slot 1-{len(psus)}, serial or name)")
    return psu


def _fan(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    fans = state["resources"][f"{paths_of(state).chassis}/Thermal"]["Fans"]
    fan = fans[0] if target is None else next(
        (f for f in fans if target in (f["Name"], f["MemberId"])), None)
    if fan is None:
        names = ", ".join(f["Name"] for f in fans)
        raise FaultError(f"no fan {target!r} on {state['node']} (fans: {names})")
    return fan


def _psu_redundancy_lost(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    power = _power(state)
    psu = _psu(state, target)
    slot = int(psu["MemberId"]) + 1
    psu.update(LineInputVoltage=0, Status={"Health": "Critical", "State": "Enabled"})
    for red in power["Redundancy"]:
        red["Status"] = {"Health": "Critical", "State": "Enabled"}
    sel = _vendor(state)["sel"]
    log = _event_log(state)
    entries = [add_log(state, log, "Critical", sel["psu_lost"]["message_id"],
                       sel["psu_lost"]["text"].format(n=slot, serial=psu["SerialNumber"]),
                       SensorType="Power Supply"),
               add_log(state, log, "Critical", sel["psu_redundancy"]["message_id"],
                       sel["psu_redundancy"]["text"], SensorType="Power Supply")]
    return {"component": {"type": "psu", "slot": slot, "name": psu["Name"],
                          "serial": psu["SerialNumber"], "model": psu["Model"]},
            "description": f"power supply {slot} serial {psu['SerialNumber']}: input lost, "
                           "PSU redundancy lost",
            "log_entries": [(log, e["Id"]) for e in entries]}


def _fan_failed(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    fan = _fan(state, target)
    fan.update(Reading=0, Status={"Health": "Critical", "State": "Enabled"})
    sel = _vendor(state)["sel"]["fan"]
    log = _event_log(state)
    entry = add_log(state, log, "Critical", sel["message_id"], sel["text"].format(
        fan=fan["Name"]), SensorType="Fan")
    return {"component": {"type": "fan", "name": fan["Name"]},
            "description": f"fan {fan['Name']}: 0 RPM, below its lower critical threshold "
                           f"({fan['LowerThresholdCritical']} RPM)",
            "log_entries": [(log, entry["Id"])]}


# Under load: the part reads healthy at idle and fails while the node's load is at or
# above envelope.TRIP_U (rendered from the record, envelope.py); its one log entry is
# written the first time it trips (envelope.observe) and listed in the record's
# log_entries, so heal() removes it.

def _fan_fails_under_load(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    # default: a fan in the middle of the wall (the first one is fan-failed's default)
    fans = state["resources"][f"{paths_of(state).chassis}/Thermal"]["Fans"]
    fan = _fan(state, target or fans[len(fans) // 2]["Name"])
    unit = fan["ReadingUnits"]
    return {"component": {"type": "fan", "name": fan["Name"]},
            "description": f"fan {fan['Name']}: stalls under load (u >= {TRIP_U}): 0 {unit}, "
                           f"below its lower critical threshold "
                           f"({fan['LowerThresholdCritical']} {unit})",
            "tripped": False, "log_entries": []}


def _psu_fails_under_load(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    psu = _psu(state, target)
    slot = int(psu["MemberId"]) + 1
    return {"component": {"type": "psu", "slot": slot, "name": psu["Name"],
                          "serial": psu["SerialNumber"], "model": psu["Model"]},
            "description": f"power supply {slot} serial {psu['SerialNumber']}: fails under "
                           f"load (u >= {TRIP_U}): output 0, the others carry the draw",
            "tripped": False, "log_entries": []}


def _sel_critical_entry(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    sel = _vendor(state)["sel"]["critical"]
    component = target or sel["component"]
    log = _event_log(state)
    entry = add_log(state, log, "Critical", sel["message_id"],
                    sel["text"].format(component=component), SensorType="Memory")
    return {"component": {"type": "log-entry", "log": log, "id": entry["Id"],
                          "message_id": entry["MessageId"], "message": entry["Message"],
                          "part": component},
            "description": f"{log} entry {entry['Id']} ({entry['MessageId']}, Critical): "
                           f"{entry['Message']}",
            "log_entries": [(log, entry["Id"])]}


def _bios_drift(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    v = _vendor(state)
    name, _, value = (target or DRIFT_DEFAULT[v["vendor"]]).partition("=")
    entry = next((a for a in v["bios"]["attributes"] if a["name"] == name), None)
    if entry is None or entry.get("read_only") or "values" not in entry:
        raise FaultError(f"no settable BIOS attribute {name!r} on {state['node']}")
    current = state["bios"]["current"]
    dep = v["bios"].get("dependents")
    if dep and name in dependents(state["vendor"], current):
        raise FaultError(f"BIOS attribute {name} is set by {dep['controller']} "
                         f"({current[dep['controller']]}) on {state['node']}: drift "
                         f"{dep['controller']} instead")
    was = current[name]
    if not value:  # another allowed value than the current one
        value = next((x for x in entry["values"] if x != was), was)
    if value not in entry["values"] or value == was:
        raise FaultError(f"BIOS attribute {name} cannot drift to {value!r} "
                         f"(now {was!r}; values: {', '.join(entry['values'])})")
    current[name] = value
    current.update(dependents(state["vendor"], current))  # the profile's own settings follow
    return {"component": {"type": "bios-attribute", "name": name, "was": was, "now": value},
            "description": f"BIOS attribute {name} changed from {was} to {value} outside "
                           "provisioning"}


def _bmc_gpu_serial_mismatch(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    # the BMC lists another board than the one the node's tools see (a stale FRU record
    # after a board swap, or a node that lies about its GPUs): the node keeps hwsim's serial
    procs = [r for r in state["resources"].values() if r.get("ProcessorType") == "GPU"]
    slots = [r["Location"]["PartLocation"]["ServiceLabel"] for r in procs]
    gpu = procs[0] if target is None else next(
        (r for r, slot in zip(procs, slots, strict=True)
         if target in (slot, slot.split()[-1], r["SerialNumber"])), None)
    if gpu is None:
        raise FaultError(f"no GPU {target!r} on {state['node']} (GPU 1-{len(procs)} or serial)")
    was = gpu["SerialNumber"]
    now = was[:-4] + str((int(was[-4:]) + 1) % 10000).zfill(4) if was[-4:].isdigit() \
        else was + "X"
    gpu["SerialNumber"] = now
    slot = gpu["Location"]["PartLocation"]["ServiceLabel"]
    return {"component": {"type": "gpu", "slot": slot, "serial": was, "bmc_serial": now},
            "description": f"{slot}: the BMC lists serial {now}, the node's GPU is {was}"}


def _bmc_nan_reading(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    # rendered by envelope.power while the fault is listed: the draw reads NaN
    return {"component": {"type": "bmc-reading", "name": "PowerConsumedWatts"},
            "description": "the BMC answers NaN for the chassis draw (PowerConsumedWatts)"}


def _bmc_unreachable(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    state["unreachable"] = True
    address = state.get("address")
    return {"component": {"type": "bmc", "name": _vendor(state)["manager_name"],
                          "address": address},
            "description": f"BMC at {address or 'its address'} not answering"}


FAULTS: dict[str, FaultFn] = {
    "psu-redundancy-lost": _psu_redundancy_lost,
    "fan-failed": _fan_failed,
    FAN_UNDER_LOAD: _fan_fails_under_load,
    PSU_UNDER_LOAD: _psu_fails_under_load,
    "sel-critical-entry": _sel_critical_entry,
    "bios-drift": _bios_drift,
    "bmc-gpu-serial-mismatch": _bmc_gpu_serial_mismatch,
    "bmc-unreachable": _bmc_unreachable,
    NAN_READING: _bmc_nan_reading,
}
FAULT_KINDS: tuple[str, ...] = tuple(FAULTS)


def apply_fault(state: dict[str, Any], kind: str, target: str | None = None) -> dict[str, Any]:
    """A copy of state with one fault applied; state itself is left alone."""
    if kind not in FAULTS:
        raise FaultError(f"unknown BMC fault {kind!r}; valid: {', '.join(FAULT_KINDS)}")
    new = copy.deepcopy(state)
    record = FAULTS[kind](new, target)
    new["faults"].append({"kind": kind, "target": target, **record})
    return new


# Properties of the system the node's operators set: kept across heal.
RUNTIME_SYSTEM_KEYS = ("PowerState", "Boot", "AssetTag")


def heal(state: dict[str, Any]) -> dict[str, Any]:
    """The pristine hardware back; BIOS settings, jobs and other log entries kept."""
    new = copy.deepcopy(state)
    system_path = paths_of(state).system
    system = state["resources"][system_path]
    new["resources"] = copy.deepcopy(state["pristine"]["resources"])
    for key in RUNTIME_SYSTEM_KEYS:
        if key in system:
            new["resources"][system_path][key] = copy.deepcopy(system[key])
    new["unreachable"] = False
    added = {tuple(x) for f in state["faults"] for x in f.get("log_entries", [])}
    for log, entries in new["logs"].items():
        new["logs"][log] = [e for e in entries if (log, e["Id"]) not in added]
    for f in state["faults"]:
        comp = f["component"]
        # undo a drift the role has not corrected yet
        if f["kind"] == "bios-drift" and new["bios"]["current"].get(comp["name"]) == comp["now"]:
            new["bios"]["current"][comp["name"]] = comp["was"]
            new["bios"]["current"].update(dependents(state["vendor"], new["bios"]["current"]))
    new["faults"] = []
    return new
