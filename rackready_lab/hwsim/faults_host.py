"""Host-side fault kinds: NVSwitch SXid, Fabric Manager log errors, NVMe SMART, DIMMs, EDAC.

Same contract as faults.py: each function edits the state copy it is given and returns
the record (the component it hits, in the words a technician uses) for state["faults"].
"""

from __future__ import annotations

from typing import Any

from .fault_base import FaultError, FaultFn


def _err(msg: str) -> Exception:
    return FaultError(msg)

UC = 1 << 61  # MCi_STATUS: uncorrected
MCE_VALID_EN_ADDRV = (1 << 63) | (1 << 60) | (1 << 58)  # VAL, EN, ADDRV


def _switch(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    sws = [s for s in state["nvswitches"] if s.get("present", True)]
    if not sws:
        raise _err(f"sxid needs NVSwitch; {state['platform']} has none")
    if target is None:
        return sws[0]
    for s in sws:
        if target in (str(s["index"]), s["bdf"], s["uuid"]):
            return s
    raise _err(f"no NVSwitch {target!r} on {state['node']} (index, bus id or UUID)")


def _sxid(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    # target: "SWITCH" or "SWITCH:LINK"; a fatal LTSSM fault (SXid 20034) on a trunk link
    sw_t, _, link_t = (target or "").partition(":")
    sw = _switch(state, sw_t or None)
    link = int(link_t) if link_t.isdigit() else 30
    state["host"]["sxids"].append({"nvswitch": sw["index"], "bdf": sw["bdf"], "sxid": 20034,
                                   "fatal": True, "link": link,
                                   "text": f"Link {link} LTSSM Fault Up"})
    return {"component": {"type": "nvswitch", "index": sw["index"], "bus_id": sw["bdf"],
                          "uuid": sw["uuid"]},
            "description": f"NVSwitch {sw['index']} ({sw['bdf']}): fatal SXid 20034 on link "
                           f"{link}"}


def _fm_error(state: dict[str, Any], target: str | None, kind: str, default_switch: int,
              default_port: int, sxid: int, fatal: bool, count: int) -> dict[str, Any]:
    """NVSwitch errors Fabric Manager logs (cli/fm_log.py): at the node's next tool call.
    target: "SWITCH" or "SWITCH:PORT" (switch by index, bus id or UUID)."""
    if not state["nvswitches"]:
        raise _err(f"{kind} needs NVSwitch and Fabric Manager; {state['platform']} has none")
    sw_t, _, port_t = (target or "").partition(":")
    sw = _switch(state, sw_t or str(default_switch))
    port = int(port_t) if port_t.isdigit() else default_port
    pid = sw.get("physical_id", 8 + sw["index"])  # a state built before switches had one
    state["host"].setdefault("fm_errors", []).extend(
        {"nvswitch": sw["index"], "bdf": sw["bdf"], "physical_id": pid,
         "port": port, "sxid": sxid, "fatal": fatal, "at": None} for _ in range(count))
    what = "fatal NVSwitch error" if fatal else f"{count} non-fatal NVSwitch errors"
    return {"component": {"type": "nvswitch", "index": sw["index"], "bus_id": sw["bdf"],
                          "physical_id": pid, "port": port, "uuid": sw["uuid"]},
            "description": f"NVSwitch {sw['index']} ({sw['bdf']}, physical id "
                           f"{pid}) port {port}: {what} {sxid} in the Fabric "
                           "Manager log"}


def _fabric_manager_fatal(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    # SXid 20034 (LTSSM fault) as Fabric Manager reports it; switch 1, not the first
    return _fm_error(state, target, "fabric-manager-fatal", 1, 33, 20034, True, 1)


def _fabric_manager_nonfatal(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    # three non-fatal 12028 errors on one port: past the profile's limit of none
    return _fm_error(state, target, "fabric-manager-nonfatal", 2, 61, 12028, False, 3)


def _drive(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    drives = [d for d in state["nvme"] if d["role"] == "data" and d["present"]]
    drive = drives[0] if target is None else next(
        (d for d in drives if target in (d["name"], d["namespace"], d["serial"], d["bdf"])),
        None)
    if drive is None:
        raise _err(f"no NVMe data drive {target!r} on {state['node']}")
    return drive


def _nvme_component(d: dict[str, Any]) -> dict[str, Any]:
    return {"type": "nvme", "name": d["name"], "namespace": d["namespace"],
            "serial": d["serial"], "model": d["model"], "bus_id": d["bdf"]}


def _nvme_media_errors(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    d = _drive(state, target)
    s = d["smart"]
    s.update(media_errors=s["media_errors"] + 24,
             error_log_entries=s.get("error_log_entries", 0) + 24,
             critical_warning=s["critical_warning"] | 0x04)  # reliability degraded
    return {"component": _nvme_component(d),
            "description": f"NVMe {d['name']} serial {d['serial']}: 24 media errors, "
                           "reliability degraded"}


def _nvme_wear_out(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    d = _drive(state, target)
    # endurance spent: percentage used past 100 and the spare pool below its threshold
    d["smart"].update(percentage_used=104, avail_spare=6, spare_thresh=10,
                      critical_warning=d["smart"]["critical_warning"] | 0x01)
    return {"component": _nvme_component(d),
            "description": f"NVMe {d['name']} serial {d['serial']}: worn out (104 % used, "
                           "spare below threshold)"}


def _dimm(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    dimms = [d for d in state["host"]["dimms"] if d["present"]]
    if target is None:
        return dimms[2]  # the third slot: not the first, so an off-by-one shows
    for d in dimms:
        if target in (d["locator"], d["serial"]):
            return d
    raise _err(f"no DIMM {target!r} on {state['node']} (slot name or serial)")


def _dimm_component(d: dict[str, Any]) -> dict[str, Any]:
    return {"type": "dimm", "locator": d["locator"], "serial": d["serial"],
            "socket": d["socket"]}


def _dimm_missing(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    d = _dimm(state, target)
    d["present"] = False
    return {"component": _dimm_component(d),
            "description": f"DIMM {d['locator']} serial {d['serial']} not detected"}


def _edac_uncorrectable(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    d = _dimm(state, target)
    d["ue"] += 1
    d["ce"] += 3
    state["host"]["mce"].append({"cpu": d["socket"] * 56, "bank": 13 + d["mc"] % 4,
                                 "status": MCE_VALID_EN_ADDRV | UC | 0x009f,
                                 "addr": 0x4a3c21000})
    return {"component": _dimm_component(d),
            "description": f"DIMM {d['locator']} serial {d['serial']}: uncorrectable memory "
                           "error (EDAC UE, machine check)"}


def _ras_logged_errors(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    # uncorrected errors rasdaemon recorded in an earlier boot: the reboot reset the EDAC
    # counters and the kernel log, so only rasdaemon's database still holds them
    d = _dimm(state, target)
    state["host"].setdefault("ras_records", []).append(
        {"dimm": d["locator"], "kind": "Uncorrected", "count": 2, "time": "2026-11-28 17:04:51"})
    return {"component": _dimm_component(d),
            "description": f"DIMM {d['locator']} serial {d['serial']}: 2 uncorrected errors "
                           "rasdaemon recorded before the last reboot (EDAC counters read 0)"}


def _dimm_missing_text(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    # no kernel copy of the SMBIOS table (an old kernel, a locked-down sysfs): the DIMMs are
    # read from dmidecode's text, which shows the slot empty
    rec = _dimm_missing(state, target)
    state["host"]["smbios_table"] = False
    rec["description"] += " (SMBIOS table unreadable: seen by dmidecode -t memory)"
    return rec


HOST_FAULTS: dict[str, FaultFn] = {  # registered by faults.py
    "sxid": _sxid,
    "fabric-manager-fatal": _fabric_manager_fatal,
    "fabric-manager-nonfatal": _fabric_manager_nonfatal,
    "nvme-media-errors": _nvme_media_errors,
    "nvme-wear-out": _nvme_wear_out,
    "dimm-missing": _dimm_missing,
    "edac-uncorrectable": _edac_uncorrectable,
    "ras-logged-errors": _ras_logged_errors,
    "dimm-missing-text": _dimm_missing_text,
}
