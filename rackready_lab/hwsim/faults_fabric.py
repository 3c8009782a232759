"""Fabric and PCIe faults: aer-storm, link-flap, slow-rail, transceiver-hot,
pcie-switch-uplink-degraded, and RoCE QoS drift: ecn-off, dscp-map-drift.

The QoS faults change a NIC's run-time settings (nic_config, which heal otherwise keeps as
the node's own): their records carry `undo` ({"path": [...], "value": before}), which
heal puts back (None: the key was absent, heal removes it).

aer-storm and link-flap must show as a CHANGE during a run, so besides the counts they
set at once, their records carry `ticks`: per stand-in tool call, the node side
(cli/common.advance_faults) adds these amounts to the named counters and re-renders the
sysroot. The tool calls are the simulated node's clock; a run reads the counters at its
start and its end with tool calls in between, so the rise is seen as on live hardware.
"""

from __future__ import annotations

from typing import Any

from .fault_base import FaultError, FaultFn, gpu_component, target_gpu

# per tick (one stand-in tool call): a correctable-error storm on a marginal link
AER_TICK = {"BadTLP": 20, "BadDLLP": 6, "RxErr": 4}
# per tick: the port went down and came back (a flap), with symbol errors around it
FLAP_TICK = {"link_downed": 1, "link_error_recovery": 1, "symbol_error": 9}
SLOW_FACTOR = 0.45  # the slow rail carries under half its line rate
HOT_C = 79  # above the profile's 70 C and the module's own 75 C warning


def _nic(state: dict[str, Any], target: str | None) -> tuple[int, dict[str, Any]]:
    """Target by name, netdev, bus id or GUID; the first compute NIC when none is given."""
    for i, n in enumerate(state["nics"]):
        if (target is None and n["role"] == "compute") or target in (
                n["name"], n["netdev"], n["bdf"], n["port_guid"]):
            return i, n
    raise FaultError(f"no NIC {target!r} on {state['node']} "
                             "(name, netdev, bus id, GUID)")


def _nic_component(n: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "nic", "name": n["name"], "netdev": n["netdev"], "bus_id": n["bdf"],
            "port_guid": n["port_guid"], **extra}


def _aer_storm(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    # target: a GPU (index, serial, UUID, bus id) or a NIC (name, netdev, bus id); GPU 0
    nic = next((n for n in state["nics"] if target in (n["name"], n["netdev"], n["bdf"])),
               None) if target else None
    if nic is not None:
        i, dev = state["nics"].index(nic), nic
        where, comp, what = "nics", _nic_component(nic), f"{nic['name']} ({nic['bdf']})"
    else:
        dev = target_gpu(state, target)
        i, where = state["gpus"].index(dev), "gpus"
        comp = gpu_component(dev)
        what = f"GPU {dev['index']} serial {dev['serial']}"
    cor = dev.setdefault("aer", {}).setdefault("correctable", {})
    for name, n in AER_TICK.items():
        cor[name] = cor.get(name, 0) + n
    return {"component": comp, "ticks": [{"path": [where, i, "aer", "correctable", name],
                                          "add": n} for name, n in AER_TICK.items()],
            "description": f"{what}: PCIe AER correctable-error storm (BadTLP/BadDLLP/RxErr "
                           "rising)"}


def _link_flap(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    i, nic = _nic(state, target)
    for name, n in FLAP_TICK.items():
        nic["counters"][name] = nic["counters"].get(name, 0) + n
    return {"component": _nic_component(nic, port=1),
            "ticks": [{"path": ["nics", i, "counters", name], "add": n}
                      for name, n in FLAP_TICK.items()],
            "description": f"{nic['name']} ({nic['netdev']}) port 1 flapping (link_downed "
                           "rising while the port reads Active)"}


def _slow_rail(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    _, nic = _nic(state, target)
    nic["bw_factor"] = SLOW_FACTOR
    return {"component": _nic_component(nic, port=1),
            "description": f"{nic['name']} ({nic['netdev']}): GPUDirect rail at "
                           f"{SLOW_FACTOR:.0%} of its line rate"}


def _transceiver_hot(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    _, nic = _nic(state, target)
    mod = nic.get("module")
    if not mod:
        raise FaultError(f"{nic['name']} has no transceiver in the state")
    mod["temp_c"] = HOT_C
    return {"component": _nic_component(nic, port=1, cable_part=mod["part"],
                                        cable_serial=mod["serial"]),
            "description": f"{nic['name']} port 1 transceiver {mod['part']} serial "
                           f"{mod['serial']} at {HOT_C} C"}


# the uplink of a GPU's PCIe switch (root port <-> switch upstream port) trained down: a
# lane group lost and the rate fallen back a generation (both ends read it: one link)
UPLINK_DEGRADED = {"gen_cur": 4, "width_cur": 8}


def _pcie_switch_uplink_degraded(state: dict[str, Any], target: str | None
                                 ) -> dict[str, Any]:
    # target: a GPU (index, serial, UUID, bus id); GPU 0. Its switch carries its NIC too.
    from .cli.pci import pci_devices

    g = target_gpu(state, target)
    g["pcie"]["switch_uplink"] = dict(UPLINK_DEGRADED)
    chain = next(d["chain"] for d in pci_devices(state) if d["bdf"] == g["bdf"])
    nic = next((d for d in pci_devices(state) if d["kind"] == "nic"
                and d["chain"][:2] == chain[:2]), None)
    name = next((n["name"] for n in state["nics"] if nic and n["bdf"] == nic["bdf"]), None)
    hop = f"{chain[0]} -> {chain[1]}"
    return {"component": {**gpu_component(g), "hop": hop, "nic": name,
                          "nic_bus_id": nic["bdf"] if nic else None},
            "description": f"GPU {g['index']} serial {g['serial']}: its PCIe switch's uplink "
                           f"{hop} trained at Gen{UPLINK_DEGRADED['gen_cur']} "
                           f"x{UPLINK_DEGRADED['width_cur']} (capable Gen5 x16)"
                           + (f", slowing NIC {name} behind it too" if name else "")}


ROCE_DSCP = 26  # rdma_network_roce_dscp's default: the DSCP the lab's role maps
DRIFT_PRIO = 0  # where dscp-map-drift sends it: the best-effort priority, no PFC


def _roce_nic(state: dict[str, Any], target: str | None) -> tuple[dict[str, Any], int]:
    """A RoCE compute NIC (the first one unless named) and its lossless priority (PFC on)."""
    if target is None:
        nic = next((n for n in state["nics"] if n["role"] == "compute"
                    and n["link_layer"] == "Ethernet"), None)
        if nic is None:
            raise FaultError(f"{state['node']} has no RoCE compute NIC")
    else:
        _, nic = _nic(state, target)
    qos = state["nic_config"][nic["name"]]["qos"]
    prio = next((p for p, on in enumerate(qos.get("pfc", [])) if on), 3)
    return nic, prio


def _ecn_off(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    nic, prio = _roce_nic(state, target)
    qos = state["nic_config"][nic["name"]]["qos"]
    # the reaction point follows the notification point until set on its own
    befores = {key: list(qos.get(key) or qos.get("ecn") or [0] * 8) for key in ("ecn", "ecn_rp")}
    # undo value None: the key was not there (heal removes it again)
    undo = [{"path": ["nic_config", nic["name"], "qos", key],
             "value": list(qos[key]) if key in qos else None} for key in befores]
    for key, before in befores.items():
        qos[key] = [0 if p == prio else v for p, v in enumerate(before)]
    return {"component": _nic_component(nic, priority=prio), "undo": undo,
            "description": f"{nic['name']} ({nic['netdev']}): ECN off on priority {prio} "
                           "(roce_np and roce_rp)"}


def _dscp_map_drift(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    nic, prio = _roce_nic(state, target)
    qos = state["nic_config"][nic["name"]]["qos"]
    before = list(qos.get("dscp2prio") or [d >> 3 for d in range(64)])
    qos["dscp2prio"] = [DRIFT_PRIO if d == ROCE_DSCP else p for d, p in enumerate(before)]
    return {"component": _nic_component(nic, priority=prio, dscp=ROCE_DSCP),
            "undo": [{"path": ["nic_config", nic["name"], "qos", "dscp2prio"],
                      "value": before}],
            "description": f"{nic['name']} ({nic['netdev']}): DSCP {ROCE_DSCP} mapped to "
                           f"priority {DRIFT_PRIO} instead of the lossless {prio}"}


FABRIC_FAULTS: dict[str, FaultFn] = {
    "aer-storm": _aer_storm,
    "link-flap": _link_flap,
    "slow-rail": _slow_rail,
    "transceiver-hot": _transceiver_hot,
    "pcie-switch-uplink-degraded": _pcie_switch_uplink_degraded,
    "ecn-off": _ecn_off,
    "dscp-map-drift": _dscp_map_drift,
}
