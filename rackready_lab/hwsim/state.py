"""Build the simulated hardware state of one lab node (controller side).

The state is plain JSON: nodes read it with the standard library. Everything
the real capture shows (driver, CUDA, per-GPU fields, NVLink speed, clocks) is
read from the capture at generation time and extended in code to 8 GPUs and
the platform's topology (topology.py). Identities (serials, UUIDs, GUIDs, MACs)
are derived from the node name so two nodes never share one and a rebuilt
node gets the same ones back.
"""

from __future__ import annotations

import copy
import hashlib
import random
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from .host_state import host_state
from .topology import (
    GPU_MODELS,
    GPUS_PER_NODE,
    GPUS_PER_SOCKET,
    NVLINK_GBPS,
    NVME_MODELS,
    PLATFORMS,
    nvlink_peers,
)

CAPTURE_DIR = Path(__file__).resolve().parent / "captures"
CAPTURE_NAME = "hgx-h200-2gpu"
FABRICS = ("roce", "ib")
STATE_SCHEMA = 1

# Settings the node changes at run time (provisioning, daemons). heal() keeps
# them: a healed fault must not undo what Ansible configured.
RUNTIME_KEYS = ("modules", "services", "nic_config", "raid", "kernel", "secure_boot")
# GPU settings the node changes (nvidia-smi -e / -mig); heal() keeps them too.
GPU_MODE_KEYS = ("ecc_mode", "ecc_mode_pending", "mig_mode", "mig_mode_pending")

INBOX_MODULES = ["nvme", "nvme_core", "mlx5_core", "mlx5_ib", "ib_core", "ib_uverbs",
                 "ib_umad", "rdma_cm", "ipmi_si", "ipmi_devintf"]
DRIVER_MODULES = ["nvidia", "nvidia_modeset", "nvidia_uvm", "nvidia_drm", "nvidia_peermem"]

CX7 = {"model": "MCX75310AAS-NEA", "psid": "MT_0000000838", "fw": "28.43.2026",
       "device_id": "1021", "ca_type": "MT4129",
       "description": "NVIDIA ConnectX-7 HHHL Adapter Card, 400GbE / NDR IB (default mode), "
                      "Single-port OSFP, PCIe 5.0 x16, Crypto Disabled, Secure Boot Enabled"}


# The distribution's kernel signing key: built into the kernel's trusted keyring,
# so modules it signed (the distribution's prebuilt driver packages) load under
# Secure Boot without any MOK enrollment.
DISTRIBUTION_KEY = {"sha1": "5b:3c:9e:1f:0a:72:d4:86:31:ee:b0:49:c7:18:2d:6a:93:f5:0e:44",
                    "subject": "CN=Debian Secure Boot Signer 2022 - linux (hwsim, SIMULATED)"}


def secure_boot_state(enabled: bool = False) -> dict[str, Any]:
    """UEFI Secure Boot as the firmware and shim hold it.

    enrolled_keys is the MOK list (MokListRT); pending_keys the enrollment
    requests `mokutil --import` queued (MokNew), confirmed at the next boot.
    """
    return {"efi": True, "enabled": bool(enabled), "builtin_keys": [dict(DISTRIBUTION_KEY)],
            "enrolled_keys": [], "pending_keys": []}


class PlatformError(ValueError):
    """Unknown platform or fabric: a person's mistake, reported in one line."""


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()


def _num(*parts: object) -> int:
    return int.from_bytes(_digest(*parts)[:8], "big")


def _uuid(*parts: object) -> str:
    h = _digest(*parts).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _guid(node: str, i: int) -> str:
    # Mellanox OUI a0:88:c2 in the top bytes, the rest from the node name.
    low = _digest(node, "guid", i)[:5].hex()
    return f"0xa088c20300{low[:6]}"


def read_capture(capture_dir: Path = CAPTURE_DIR) -> dict[str, Any]:
    """The facts build_state takes from the real capture."""
    root = ET.parse(capture_dir / "nvidia-smi-q-x.xml").getroot()
    gpu = root.find("gpu")
    if gpu is None:
        raise PlatformError(f"capture {capture_dir} has no <gpu> element")

    def text(path: str) -> str:
        return (gpu.findtext(path) or "").strip()

    nvlink = (capture_dir / "nvidia-smi-nvlink-s.txt").read_text()
    speeds = re.findall(r"Link \d+: ([\d.]+) GB/s", nvlink)
    version = (capture_dir / "proc-driver-nvidia.txt").read_text().splitlines()[0]
    return {
        "driver_version": root.findtext("driver_version", "").strip(),
        "cuda_version": root.findtext("cuda_version", "").strip(),
        "nvrm_line": version,
        "gcc_line": (capture_dir / "proc-driver-nvidia.txt").read_text().splitlines()[1],
        "temp_c": int(text("temperature/gpu_temp").split()[0]),
        "mem_temp_c": int(text("temperature/memory_temp").split()[0]),
        "power_draw_w": float(text("gpu_power_readings/average_power_draw").split()[0]),
        "idle_sm_mhz": int(text("clocks/sm_clock").split()[0]),
        "mem_mhz": int(text("clocks/mem_clock").split()[0]),
        "nvlink_gbps": float(speeds[0]) if speeds else NVLINK_GBPS,
        "links_per_gpu": len(speeds) // max(1, int(root.findtext("attached_gpus", "1"))),
    }


def _cpus(socket: int, per_socket: int) -> str:
    # Hyper-threaded numbering: socket 0 owns 0..n-1 and 2n..3n-1.
    a = socket * per_socket
    b = 2 * per_socket + a
    return f"{a}-{a + per_socket - 1},{b}-{b + per_socket - 1}"


def _bmc_firmware(platform: str, hgx: bool) -> str:
    # iDRAC9 7.x on 16G; iLO 6 1.6x on Gen11, iLO 7 1.1x on Gen12 (representative)
    if hgx:
        return "7.10.50.00"
    return "1.62" if "gen11" in platform else "1.10"


def build_state(platform: str, node: str, fabric: str = "roce", seed: int | None = None,
                *, provisioned: bool = True, secure_boot: bool = False,
                capture_dir: Path = CAPTURE_DIR) -> dict[str, Any]:
    """The hardware state of one simulated node.

    provisioned=True gives the node as the capture shows it (driver loaded,
    persistence and fabric manager running, /raid assembled); False gives a
    fresh OS (inbox modules only, services stopped), what `lab.up` boots.
    secure_boot=True boots with UEFI Secure Boot on (no MOK keys enrolled).
    """
    if platform not in PLATFORMS:
        raise PlatformError(f"unknown platform {platform!r}; valid: {', '.join(PLATFORMS)}")
    if fabric not in FABRICS:
        raise PlatformError(f"unknown fabric {fabric!r}; valid: {', '.join(FABRICS)}")
    spec = PLATFORMS[platform]
    cap = read_capture(capture_dir)
    rng = random.Random(seed if seed is not None else _num(node, "seed"))
    model = GPU_MODELS[spec["gpu"]]
    hgx = spec["nvswitches"] > 0

    gpus = []
    for i, bus in enumerate(spec["gpu_buses"][:GPUS_PER_NODE]):
        links = nvlink_peers(spec, i, model["nvlinks"])
        gpus.append({
            "index": i, "present": True, "lost": False,
            "name": model["name"], "model": spec["gpu"],
            "serial": str(1653000000000 + _num(node, "gpu-serial", i) % 999999999),
            "uuid": "GPU-" + _uuid(node, "gpu", i),
            "pdi": "0x" + _digest(node, "pdi", i)[:8].hex(),
            "bdf": f"0000:{bus:02x}:00.0", "numa": i // GPUS_PER_SOCKET,
            "minor": i, "module_id": i + 1 if hgx else 1, "board_id": f"0x{bus << 8:x}",
            "vbios": model["vbios"], "device_id": model["device_id"],
            "subsys_id": model["subsys_id"], "board_part": model["board_part"],
            "gpu_part": model["gpu_part"], "inforom": model["inforom"],
            "memory_mib": model["memory_mib"], "power_limit_w": model["power_limit_w"],
            "power_min_w": model["power_min_w"], "max_sm_mhz": model["max_sm_mhz"],
            "persistence_mode": "Enabled" if provisioned else "Disabled",
            "pcie": {"gen_max": 5, "gen_cur": 5, "width_max": 16, "width_cur": 16,
                     "replays": 0},
            "temp_c": cap["temp_c"] + rng.randint(-2, 3),
            "mem_temp_c": cap["mem_temp_c"] + rng.randint(-2, 3),
            "power_draw_w": round(cap["power_draw_w"] * model["power_limit_w"] / 700
                                  + rng.uniform(-3, 3), 2),
            "sm_mhz": cap["idle_sm_mhz"], "mem_mhz": cap["mem_mhz"],
            # bit 0 = GPU idle, as the capture shows at rest
            "clocks_event_reasons": 0x1,
            # ECC on and MIG off, as H100/H200 leave the factory; pending = next boot
            "ecc_mode": "Enabled", "ecc_mode_pending": "Enabled",
            "mig_mode": "Disabled", "mig_mode_pending": "Disabled",
            "ecc": {kind: {"sram_correctable": 0, "sram_uncorrectable_parity": 0,
                           "sram_uncorrectable_secded": 0, "dram_correctable": 0,
                           "dram_uncorrectable": 0} for kind in ("volatile", "aggregate")},
            "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False,
                              "failure": False},
            "xids": [],
            "nvlinks": [{"link": n, "up": True, "gbps": cap["nvlink_gbps"], "peer": p,
                         "replay": 0, "recovery": 0, "crc": 0} for n, p in enumerate(links)],
            "fabric": ({"state": "Completed" if provisioned else "Not Started",
                        "status": "Success" if provisioned else "N/A"}
                       if hgx else {"state": "N/A", "status": "N/A"}),
            "aer": aer_zero(),  # PCIe AER counters (sysfs aer_dev_*)
        })

    # physical_id: the baseboard's number for a switch, which Fabric Manager logs; not the
    # driver's minor (index), so a check that mixed the two up would show it
    nvswitches = [{"index": s, "bdf": f"0000:{0xE4 + s:02x}:00.0", "numa": 1,
                   "device_id": "22A3", "uuid": "SWX-" + _uuid(node, "nvswitch", s),
                   "fw": "96.10.6D.00.01", "present": True, "physical_id": 8 + s}
                  for s in range(spec["nvswitches"])]

    link_layer = "InfiniBand" if fabric == "ib" else "Ethernet"
    nics = []
    # XE9680: one ConnectX-7 per GPU; DL380a: one per GPU pair (two per socket).
    step = len(gpus) // spec["compute_nics"]
    for i, gpu in enumerate(gpus[::step]):
        bus = int(gpu["bdf"][5:7], 16) + 1  # same PCIe switch as its GPU
        nics.append(_nic(node, i, f"0000:{bus:02x}:00.0", gpu["numa"], "compute", gpu["index"],
                         link_layer))
    for k in range(spec["storage_nics"]):
        nics.append(_nic(node, len(nics), f"0000:{0x2A + 0x80 * k:02x}:00.0", k,
                         "storage", None, "Ethernet"))

    data_model = NVME_MODELS[spec["data_nvme"]]
    nvme = [_nvme(node, 0, "0000:05:00.0", 0, "os", NVME_MODELS[spec["os_nvme"]])]
    for d in range(8):
        bus = (0x21 if d < 4 else 0xA1) + d % 4
        nvme.append(_nvme(node, d + 1, f"0000:{bus:02x}:00.0", d // 4, "data", data_model))

    kernel = "6.1.0-41-amd64"
    state: dict[str, Any] = {
        "schema": STATE_SCHEMA,
        "simulated": True,
        "provenance": {
            "capture": CAPTURE_NAME,
            "capture_files": sorted(p.name for p in capture_dir.iterdir() if p.is_file()),
            "note": "2x H200 SXM captured on a real HGX H200 host, extended in code "
                    f"(rackready_lab.hwsim) to 8 GPUs as {platform}",
        },
        "platform": platform, "node": node, "fabric": fabric,
        "chassis": {"vendor": spec["vendor"], "product": spec["product"],
                    "serial": _chassis_serial(node, spec["vendor"]),
                    "bmc": {"address": None, "firmware": _bmc_firmware(platform, hgx)}},
        "cpu": {"model": spec["cpu_model"], "sockets": 2,
                "numa": [{"node": s, "cpus": _cpus(s, spec["cpus_per_socket"])}
                         for s in range(2)]},
        "driver": {"version": cap["driver_version"], "cuda": cap["cuda_version"],
                   "nvrm_line": cap["nvrm_line"], "gcc_line": cap["gcc_line"]},
        "kernel": {"release": kernel,
                   "cmdline": f"BOOT_IMAGE=/vmlinuz-{kernel} root=/dev/mapper/vg0-root ro "
                              "quiet" + (" iommu=pt" if provisioned else "")},
        "secure_boot": secure_boot_state(secure_boot),
        "modules": INBOX_MODULES + (DRIVER_MODULES if provisioned else []),
        "services": {"nvidia-persistenced": {"running": provisioned},
                     "nvidia-fabricmanager": {"running": provisioned and hgx},
                     "nvidia-dcgm": {"running": provisioned}},
        "gpus": gpus, "nvswitches": nvswitches, "nics": nics, "nvme": nvme,
        "nic_config": {n["name"]: _nic_config(n, provisioned) for n in nics},
        "raid": {"device": "md0", "level": "raid0", "chunk_kb": 512, "mount": "/raid",
                 "members": [d["namespace"] for d in nvme if d["role"] == "data"],
                 "assembled": provisioned},
        "faults": [],
        "host": host_state(platform, node),  # DIMMs, MCE, SXids
    }
    state["pristine"] = pristine_copy(state)
    return state


def pristine_copy(state: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy({k: v for k, v in state.items() if k != "pristine"})


def _chassis_serial(node: str, vendor: str) -> str:
    alphabet = "0123456789BCDFGHJKLMNPQRSTVWXYZ"
    n = _num(node, "chassis")
    chars = []
    for _ in range(7 if vendor.startswith("Dell") else 10):
        n, r = divmod(n, len(alphabet))
        chars.append(alphabet[r])
    # Dell service tags are 7 characters, HPE serial numbers 10.
    return "".join(chars)


def _nic(node: str, i: int, bdf: str, numa: int, role: str, gpu: int | None,
         link_layer: str) -> dict[str, Any]:
    guid = _guid(node, i)
    mac = "a0:88:c2:" + ":".join(f"{b:02x}" for b in _digest(node, "mac", i)[:3])
    bus = bdf[5:7]
    ib = link_layer == "InfiniBand"
    return {
        "name": f"mlx5_{i}", "bdf": bdf, "numa": numa, "role": role, "gpu": gpu,
        "netdev": f"ibp{int(bus, 16)}s0" if ib else f"ens{int(bus, 16)}np0",
        "present": True, **CX7, "node_guid": guid, "port_guid": guid, "mac": mac,
        "link_layer": link_layer, "state": "Active", "phys_state": "LinkUp", "rate": 400,
        "lid": (i + 1 + _num(node, "lid") % 1000) if ib else 0, "sm_lid": 1 if ib else 0,
        "counters": {"symbol_error": 0, "link_error_recovery": 0, "link_downed": 0,
                     "port_rcv_errors": 0, "port_xmit_discards": 0,
                     "port_rcv_remote_physical_errors": 0, "local_link_integrity_errors": 0,
                     "excessive_buffer_overrun_errors": 0},
        # PCIe AER counters and the port's transceiver (mlxlink -m -c)
        "aer": aer_zero(), "module": transceiver(node, i),
    }


def default_dscp2prio() -> list[int]:
    """mlx5's DSCP -> priority table after reset: DSCP d on priority d >> 3."""
    return [d >> 3 for d in range(64)]


def _nic_config(nic: dict[str, Any], provisioned: bool) -> dict[str, Any]:
    link = "IB(1)" if nic["link_layer"] == "InfiniBand" else "ETH(2)"
    roce = nic["link_layer"] == "Ethernet" and nic["role"] == "compute" and provisioned
    return {
        "mlxconfig": {"current": {"LINK_TYPE_P1": link, "SRIOV_EN": "False(0)",
                                  "NUM_OF_VFS": "0", "ADVANCED_PCI_SETTINGS": "False(0)",
                                  "ATS_ENABLED": "False(0)", "PCI_WR_ORDERING": "per_mkey(0)"},
                      "pending": {}},
        # Runtime QoS (mlnx_qos): lost at reboot, as in the kernel.
        "qos": {"trust": "dscp" if roce else "pcp",
                "pfc": [1 if (roce and p == 3) else 0 for p in range(8)],
                "ecn": [1 if (roce and p == 3) else 0 for p in range(8)],
                # DSCP -> priority (mlnx_qos --dscp2prio): the kernel's default DSCP >> 3,
                # which puts the role's DSCP 26 on its priority 3
                "dscp2prio": default_dscp2prio(),
                "mtu": 9000 if provisioned and nic["link_layer"] == "Ethernet" else
                (4096 if nic["link_layer"] == "InfiniBand" else 1500)},
    }


def _nvme(node: str, i: int, bdf: str, numa: int, role: str, model: dict[str, Any]) -> dict:
    serial = model["serial_prefix"] + f"{_num(node, 'nvme', i) % 10**6:06d}"
    return {"name": f"nvme{i}", "namespace": f"nvme{i}n1", "bdf": bdf, "numa": numa,
            "role": role, "present": True, "model": model["model"], "serial": serial,
            "fw": model["fw"], "bytes": model["bytes"], "vendor_id": model["vendor"],
            "device_id": model["device"], "pcie": {"gen_max": 5 if role == "data" else 4,
                                                   "gen_cur": 5 if role == "data" else 4,
                                                   "width_max": 4 if role == "data" else 2,
                                                   "width_cur": 4 if role == "data" else 2},
            "smart": {"critical_warning": 0, "media_errors": 0, "percentage_used": 0,
                      "temperature_c": 38}}


# --- PCIe AER counters and transceivers ---------------------------------------------
# 400G single-port OSFP multimode module of the ConnectX-7 HCA (NVIDIA's cable list)
TRANSCEIVER = {"identifier": "OSFP", "cable_type": "Optical Module",
               "compliance": "400GBASE-SR4", "vendor": "NVIDIA", "part": "MMA4Z00-NS400"}


def aer_zero() -> dict[str, dict[str, int]]:
    """AER counts per severity, by error name; names absent are zero (the renderer lists all)."""
    return {"correctable": {}, "nonfatal": {}, "fatal": {}}


def transceiver(node: str, i: int) -> dict[str, Any]:
    d = _digest(node, "transceiver", i)
    return {**TRANSCEIVER, "serial": f"MT{2400 + d[0] % 30}FT{_num(node, 'xcvr', i) % 10**5:05d}",
            "temp_c": 44 + d[1] % 8,
            "rx_dbm": [round(-1.5 + (b % 20) / 10, 2) for b in d[2:6]],
            "tx_dbm": [round(-0.5 + (b % 10) / 10, 2) for b in d[6:10]],
            "effective_errors": 0, "raw_ber": f"{1 + d[10] % 9}E-{10 + d[11] % 3}"}
