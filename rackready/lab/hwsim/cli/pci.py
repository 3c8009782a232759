"""The simulated PCI device list, shared by the sysroot renderer and lspci."""

from __future__ import annotations

from typing import Any

from .common import present

# PCIe switch upstream of each GPU/NIC pair (Broadcom PEX89xxx, as on HGX and DL380a risers).
BRIDGE = {"vendor": "1000", "device": "c030", "class": "060400",
          "name": "PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0)"}


def pci_devices(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Every simulated PCI function, sorted by bus id."""
    devs: list[dict[str, Any]] = []
    for g in present(state["gpus"]):
        p = g["pcie"]
        devs.append({"bdf": g["bdf"], "vendor": "10de", "device": g["device_id"].lower(),
                     "class": "030200", "numa": g["numa"], "kind": "gpu",
                     "name": f"3D controller: NVIDIA Corporation GH100 [{g['name'][7:]}] "
                             "(rev a1)",
                     "gen_cur": p["gen_cur"], "gen_max": p["gen_max"],
                     "width_cur": p["width_cur"], "width_max": p["width_max"],
                     "lost": g.get("lost", False), "aer": g.get("aer") or {}})
        bus = int(g["bdf"][5:7], 16) - 1
        devs.append({"bdf": f"0000:{bus:02x}:00.0", **BRIDGE, "numa": g["numa"],
                     "kind": "bridge", "gen_cur": 5, "gen_max": 5, "width_cur": 16,
                     "width_max": 16, "acs": state.get("pci", {}).get("acs_enabled", False)})
    for s in present(state["nvswitches"]):
        devs.append({"bdf": s["bdf"], "vendor": "10de", "device": s["device_id"].lower(),
                     "class": "068000", "numa": s["numa"], "kind": "nvswitch",
                     "name": "Bridge: NVIDIA Corporation GH100 [H100 NVSwitch] (rev a1)",
                     "gen_cur": 4, "gen_max": 4, "width_cur": 2, "width_max": 2})
    for n in present(state["nics"]):
        cls = "020700" if n["link_layer"] == "InfiniBand" else "020000"
        kind = "Infiniband controller" if cls == "020700" else "Ethernet controller"
        devs.append({"bdf": n["bdf"], "vendor": "15b3", "device": n["device_id"], "class": cls,
                     "numa": n["numa"], "kind": "nic",
                     "name": f"{kind}: Mellanox Technologies MT2910 Family [ConnectX-7]",
                     "gen_cur": 5, "gen_max": 5, "width_cur": 16, "width_max": 16,
                     "aer": n.get("aer") or {}})
    for d in present(state["nvme"]):
        p = d["pcie"]
        devs.append({"bdf": d["bdf"], "vendor": d["vendor_id"], "device": d["device_id"],
                     "class": "010802", "numa": d["numa"], "kind": "nvme",
                     "name": f"Non-Volatile memory controller: {d['model']}",
                     "gen_cur": p["gen_cur"], "gen_max": p["gen_max"],
                     "width_cur": p["width_cur"], "width_max": p["width_max"]})
    return sorted(devs, key=lambda d: d["bdf"])
