"""The simulated PCI device list, shared by the sysroot renderer and lspci."""

from __future__ import annotations

from typing import Any

from .state_view import present

# The PCIe tree, after the HGX H100 8-GPU board that NCCL's topology dump shows
# (aliyun/SimAI issue 128, tests/fixtures/field/pcie/): each GPU and its compute NIC
# behind one Broadcom PEX890xx Gen5 switch [1000:c030], its upstream port on bus B-2, its
# downstream ports on bus B-1, the GPU on bus B and the NIC on bus B+1 (d7:00.0 switch,
# d9:00.0 GPU, da:00.0 NIC there); the switch hangs off a CPU root port (01.0) on its own
# root bus B-3, one PCIe stack per switch as on Sapphire Rapids. The DL380a-like
# platforms use the same per-GPU switch (hwsim's model, as nvidia-smi topo -m and the
# launch map read it; not checked against a DL380a capture). Devices outside the switches
# (NVMe drives, storage NICs, NVSwitches) sit on a root port of their socket's root bus
# (00 or 80).
BRIDGE = {"vendor": "1000", "device": "c030", "class": "060400",
          "name": "PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0)"}
# a CPU root port; the device ID is a placeholder (no capture of one here)
ROOT_PORT = {"vendor": "8086", "device": "0db0", "class": "060400",
             "name": "PCI bridge: Intel Corporation Device 0db0 (rev 04)"}
SOCKET_ROOT_BUS = {0: 0x00, 1: 0x80}
HEALTHY = {"gen_cur": 5, "gen_max": 5, "width_cur": 16, "width_max": 16}


def _bus(bdf: str) -> int:
    return int(bdf[5:7], 16)


def _bridge(bdf: str, port: str, chain: tuple[str, ...], numa: int, acs: bool,
            link: dict[str, int], ident: dict[str, str]) -> dict[str, Any]:
    return {"bdf": bdf, **ident, "numa": numa, "kind": "bridge", "port": port,
            "chain": chain, **HEALTHY, **link, "acs": acs}


def pci_devices(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Every simulated PCI function, sorted by bus id; `chain` is its path from the root
    bus down (root port first, the function last), as sysfs nests its directories."""
    devs: list[dict[str, Any]] = []
    acs = state.get("pci", {}).get("acs_enabled", False)
    nic_at = {_bus(n["bdf"]): n for n in present(state["nics"])}
    switched: dict[str, tuple[str, ...]] = {}  # NIC bus id -> its downstream port's chain
    for g in state["gpus"]:  # a GPU gone from the bus leaves its switch there
        p = g["pcie"]
        b = _bus(g["bdf"])
        rp, usp, dsp = f"0000:{b - 3:02x}:01.0", f"0000:{b - 2:02x}:00.0", \
            f"0000:{b - 1:02x}:00.0"
        # the switch uplink (root port <-> upstream port): faulted by pcie-switch-uplink-degraded
        up = {k: v for k, v in (p.get("switch_uplink") or {}).items() if k in HEALTHY}
        own = {k: p[k] for k in HEALTHY}
        devs += [_bridge(rp, "Root Port", (rp,), g["numa"], acs, up, ROOT_PORT),
                 _bridge(usp, "Upstream Port", (rp, usp), g["numa"], acs, up, BRIDGE),
                 _bridge(dsp, "Downstream Port", (rp, usp, dsp), g["numa"], acs, own, BRIDGE)]
        if g.get("present", True):
            devs.append({"bdf": g["bdf"], "vendor": "10de", "device": g["device_id"].lower(),
                         "class": "030200", "numa": g["numa"], "kind": "gpu",
                         "name": f"3D controller: NVIDIA Corporation GH100 "
                                 f"[{g['name'][7:]}] (rev a1)", **own,
                         "chain": (rp, usp, dsp, g["bdf"]),
                         "lost": g.get("lost", False), "aer": g.get("aer") or {}})
        nic = nic_at.get(b + 1)
        if nic is not None:  # the GPU's compute NIC, on the switch's second downstream port
            ndsp = f"0000:{b - 1:02x}:01.0"
            devs.append(_bridge(ndsp, "Downstream Port", (rp, usp, ndsp), g["numa"], acs, {},
                                BRIDGE))
            switched[nic["bdf"]] = (rp, usp, ndsp)
    ports = {0: 2, 1: 2}  # next free root port (device number) on each socket's root bus

    def under_root_port(bdf: str, numa: int) -> tuple[str, ...]:
        sock = 1 if numa else 0
        rp = f"0000:{SOCKET_ROOT_BUS[sock]:02x}:{ports[sock]:02x}.0"
        ports[sock] += 1
        devs.append(_bridge(rp, "Root Port", (rp,), numa, acs, {}, ROOT_PORT))
        return (rp, bdf)

    for s in present(state["nvswitches"]):
        devs.append({"bdf": s["bdf"], "vendor": "10de", "device": s["device_id"].lower(),
                     "class": "068000", "numa": s["numa"], "kind": "nvswitch",
                     "name": "Bridge: NVIDIA Corporation GH100 [H100 NVSwitch] (rev a1)",
                     "gen_cur": 4, "gen_max": 4, "width_cur": 2, "width_max": 2,
                     "chain": under_root_port(s["bdf"], s["numa"])})
    for n in present(state["nics"]):
        cls = "020700" if n["link_layer"] == "InfiniBand" else "020000"
        kind = "Infiniband controller" if cls == "020700" else "Ethernet controller"
        devs.append({"bdf": n["bdf"], "vendor": "15b3", "device": n["device_id"], "class": cls,
                     "numa": n["numa"], "kind": "nic",
                     "name": f"{kind}: Mellanox Technologies MT2910 Family [ConnectX-7]",
                     **HEALTHY, "aer": n.get("aer") or {},
                     "chain": ((*switched[n["bdf"]], n["bdf"]) if n["bdf"] in switched
                               else under_root_port(n["bdf"], n["numa"]))})
    for d in present(state["nvme"]):
        p = d["pcie"]
        devs.append({"bdf": d["bdf"], "vendor": d["vendor_id"], "device": d["device_id"],
                     "class": "010802", "numa": d["numa"], "kind": "nvme",
                     "name": f"Non-Volatile memory controller: {d['model']}",
                     "gen_cur": p["gen_cur"], "gen_max": p["gen_max"],
                     "width_cur": p["width_cur"], "width_max": p["width_max"],
                     "chain": under_root_port(d["bdf"], d["numa"])})
    return sorted(devs, key=lambda d: d["bdf"])


def sysfs_dir(dev: dict[str, Any]) -> str:
    """The function's directory under /sys: devices/pci<domain>:<root bus>/<chain...>."""
    top = dev["chain"][0]
    return f"sys/devices/pci{top[:7]}/" + "/".join(dev["chain"])
