"""Fault injection: pure functions from a state to a faulted copy of it.

Each fault is recorded in state["faults"] with the component it hits (GPU
index, serial, UUID, bus id; NIC name and GUID; drive serial), so a test can
check that the validation names the same part. heal() brings the hardware
back from the pristine copy kept inside the state, keeping the run-time
settings the node changed since (modules, services, NIC configuration).
"""

from __future__ import annotations

import copy
from typing import Any

from .fault_base import FaultError, FaultFn
from .fault_base import gpu_component as _gpu_component
from .fault_base import target_gpu as _gpu
from .faults_dcgm import DCGM_FAULTS  # DCGM's own view: its discovery list and health watches
from .faults_fabric import FABRIC_FAULTS  # fabric and PCIe faults
from .faults_host import HOST_FAULTS  # host-side faults
from .faults_xid import XID_FAULTS  # one per class of the XID catalog
from .state import GPU_MODE_KEYS, RUNTIME_KEYS, pristine_copy

# Clocks event reason bits (NVML nvmlClocksEventReason*).
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40


def _gpu_missing(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    g = _gpu(state, target)
    g["present"] = False
    return {"component": _gpu_component(g),
            "description": f"GPU {g['index']} serial {g['serial']} absent from the PCI bus"}


def _nvlink_down(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    # target: "GPU" or "GPU:LINK"; link 0 of the GPU by default
    gpu_t, _, link_t = (target or "").partition(":")
    g = _gpu(state, gpu_t or None)
    if not g["nvlinks"]:
        raise FaultError(f"GPU {g['index']} has no NVLinks")
    link = int(link_t) if link_t.isdigit() else 0
    if link >= len(g["nvlinks"]):
        raise FaultError(f"GPU {g['index']} has no NVLink {link}")
    g["nvlinks"][link]["up"] = False
    g["nvlinks"][link]["recovery"] += 1
    comp = _gpu_component(g) | {"nvlink": link, "peer": g["nvlinks"][link]["peer"]}
    return {"component": comp,
            "description": f"GPU {g['index']} serial {g['serial']}: NVLink {link} down"}


def _pcie_downtrained(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    g = _gpu(state, target)
    g["pcie"].update(gen_cur=4, width_cur=8)
    return {"component": _gpu_component(g),
            "description": f"GPU {g['index']} serial {g['serial']}: PCIe link trained "
                           "at Gen4 x8 (capable Gen5 x16)"}


def _ecc_uncorrectable(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    g = _gpu(state, target)
    for kind in ("volatile", "aggregate"):
        g["ecc"][kind]["dram_uncorrectable"] += 1
    g["xids"].append({"xid": 48, "text": "An uncorrectable double bit error (DBE) has been "
                                         "detected on GPU in the framebuffer at partition 0, "
                                         "subpartition 0."})
    return {"component": _gpu_component(g),
            "description": f"GPU {g['index']} serial {g['serial']}: uncorrectable DRAM ECC "
                           "error (XID 48)"}


def _row_remap_pending(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    g = _gpu(state, target)
    g["remapped_rows"].update(uncorrectable=g["remapped_rows"]["uncorrectable"] + 1,
                              pending=True)
    return {"component": _gpu_component(g),
            "description": f"GPU {g['index']} serial {g['serial']}: row remapping pending "
                           "(needs a GPU reset)"}


def _xid_79(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    g = _gpu(state, target)
    g["lost"] = True
    g["xids"].append({"xid": 79, "text": "GPU has fallen off the bus."})
    return {"component": _gpu_component(g),
            "description": f"GPU {g['index']} serial {g['serial']}: XID 79, fallen off the bus"}


def _thermal_throttle(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    g = _gpu(state, target)
    g["clocks_event_reasons"] = HW_SLOWDOWN | HW_THERMAL | SW_THERMAL
    g.update(temp_c=92, mem_temp_c=97, sm_mhz=g["max_sm_mhz"] // 2)
    return {"component": _gpu_component(g),
            "description": f"GPU {g['index']} serial {g['serial']}: thermal slowdown at 92 C"}


def _fabric_manager_down(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    if not state["nvswitches"]:
        raise FaultError(f"fabric-manager-down needs NVSwitch; {state['platform']} has none")
    state["services"]["nvidia-fabricmanager"]["running"] = False
    for g in state["gpus"]:
        g["fabric"] = {"state": "In Progress", "status": "N/A"}
    return {"component": {"type": "service", "name": "nvidia-fabricmanager"},
            "description": "nvidia-fabricmanager not running; GPU fabric state In Progress"}


def _ib_port_down(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    nics = [n for n in state["nics"] if n["role"] == "compute"]
    nic = nics[0] if target is None else next(
        (n for n in state["nics"] if target in (n["name"], n["netdev"], n["bdf"],
                                                 n["port_guid"])), None)
    if nic is None:
        raise FaultError(f"no NIC {target!r} on {state['node']} (name, netdev, bus id, GUID)")
    nic.update(state="Down", phys_state="Polling", rate=10)
    nic["counters"]["link_downed"] += 1
    nic["counters"]["symbol_error"] += 37
    return {"component": {"type": "nic", "name": nic["name"], "netdev": nic["netdev"],
                          "bus_id": nic["bdf"], "port_guid": nic["port_guid"]},
            "description": f"{nic['name']} ({nic['netdev']}) port 1 down"}


def _nvme_missing(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    drives = [d for d in state["nvme"] if d["role"] == "data" and d["present"]]
    drive = drives[0] if target is None else next(
        (d for d in state["nvme"] if target in (d["name"], d["namespace"], d["serial"],
                                                 d["bdf"])), None)
    if drive is None:
        raise FaultError(f"no NVMe drive {target!r} on {state['node']}")
    drive["present"] = False
    if drive["namespace"] in state["raid"]["members"]:
        state["raid"]["degraded"] = True
    return {"component": {"type": "nvme", "name": drive["name"], "serial": drive["serial"],
                          "model": drive["model"], "bus_id": drive["bdf"]},
            "description": f"NVMe {drive['name']} serial {drive['serial']} absent"}


FAULTS: dict[str, FaultFn] = {
    "gpu-missing": _gpu_missing,
    "nvlink-down": _nvlink_down,
    "pcie-downtrained": _pcie_downtrained,
    "ecc-uncorrectable": _ecc_uncorrectable,
    "row-remap-pending": _row_remap_pending,
    "xid-79": _xid_79,
    "thermal-throttle": _thermal_throttle,
    "fabric-manager-down": _fabric_manager_down,
    "ib-port-down": _ib_port_down,
    "nvme-missing": _nvme_missing,
}
# registered in this order: FAULT_KINDS (and the error naming them) lists them so
FAULTS.update(HOST_FAULTS)
FAULTS.update(FABRIC_FAULTS)
FAULTS.update(XID_FAULTS)
FAULTS.update(DCGM_FAULTS)
FAULT_KINDS: tuple[str, ...] = tuple(FAULTS)


def apply_fault(state: dict[str, Any], kind: str, target: str | None = None) -> dict[str, Any]:
    """A copy of state with one fault applied; state itself is left alone."""
    if kind not in FAULTS:
        raise FaultError(f"unknown fault {kind!r}; valid: {', '.join(FAULT_KINDS)}")
    new = copy.deepcopy(state)
    if "pristine" not in new:
        new["pristine"] = pristine_copy(new)
    record = FAULTS[kind](new, target)
    new["faults"].append({"kind": kind, "target": target, **record})
    return new


def heal(state: dict[str, Any]) -> dict[str, Any]:
    """The pristine hardware back, with the node's run-time settings kept."""
    if "pristine" not in state:
        raise FaultError("state has no pristine copy to heal from")
    new = copy.deepcopy(state["pristine"])
    for key in RUNTIME_KEYS:
        if key in state:
            new[key] = copy.deepcopy(state[key])
    new.get("raid", {}).pop("degraded", None)
    # faults that changed run-time settings (RoCE QoS drift) put back what was there
    for fault in reversed(state.get("faults", [])):
        for u in fault.get("undo", []):
            *parents, leaf = u["path"]
            node: Any = new
            for key in parents:
                node = node[key]
            if u["value"] is None:  # the fault added the key: remove it again
                node.pop(leaf, None)
            else:
                node[leaf] = copy.deepcopy(u["value"])
    # ECC/MIG modes are settings the node made (nvidia-smi -e/-mig), not hardware faults.
    for g_new, g_old in zip(new["gpus"], state["gpus"], strict=False):
        g_new.update({k: g_old[k] for k in GPU_MODE_KEYS if k in g_old})
    kinds = {f["kind"] for f in state.get("faults", [])}
    fm = "nvidia-fabricmanager"
    if "fabric-manager-down" in kinds:
        # The fault stopped the service; on a node its unit retries and comes back.
        new["services"][fm] = copy.deepcopy(state["pristine"]["services"][fm])
    # GPU fields the services own follow the services, not the pristine copy.
    fm_up = new["services"][fm]["running"]
    pm = "Enabled" if new["services"]["nvidia-persistenced"]["running"] else "Disabled"
    for g in new["gpus"]:
        g["persistence_mode"] = pm
        if new["nvswitches"]:
            g["fabric"] = ({"state": "Completed", "status": "Success"} if fm_up
                           else {"state": "In Progress", "status": "N/A"})
    new["faults"] = []
    new["pristine"] = copy.deepcopy(state["pristine"])
    return new
