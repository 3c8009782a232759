"""Render the simulated sysroot (/var/lib/hwsim/root) from the state.

Standard library only: the controller calls it through hwsim.sysroot, and
node-side tools call it after they change the state (modprobe, services).
Formats follow the capture (proc-driver-nvidia.txt, sysfs-pci.txt) and, for
files the capture lacks (mdstat, modules, kern.log), the kernel's documented
layout.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from . import fm_log
from .host_render import keep, kern_lines, render_host, tracking, write_bytes
from .host_render import write_file as _write
from .pci import pci_devices, sysfs_dir
from .state_view import SPEED_OF_GEN, present, read_capture

# name -> (size, users); sizes as a 6.1 kernel reports them, to look plausible.
MODULE_SIZES = {
    "nvidia": (14381056, "nvidia_uvm,nvidia_peermem,nvidia_modeset,"),
    "nvidia_modeset": (1519616, "nvidia_drm,"), "nvidia_uvm": (1847296, ""),
    "nvidia_drm": (118784, ""), "nvidia_peermem": (16384, ""),
    "mlx5_core": (2306048, "mlx5_ib,"), "mlx5_ib": (475136, ""),
    "ib_core": (458752, "rdma_cm,ib_umad,ib_uverbs,mlx5_ib,nvidia_peermem,"),
    "ib_uverbs": (176128, "mlx5_ib,rdma_ucm,"), "ib_umad": (40960, ""),
    "rdma_cm": (139264, "rdma_ucm,"), "rdma_ucm": (36864, ""),
    "nvme": (57344, ""), "nvme_core": (204800, "nvme,"), "ipmi_si": (86016, ""),
    "ipmi_devintf": (20480, ""),
}
OUT_OF_TREE = ("nvidia",)  # taint (OE) of the DKMS-built driver modules


def _information(state: dict[str, Any], g: dict[str, Any]) -> str:
    """One GPU's /proc/driver/nvidia/gpus/<bdf>/information, from the capture's first block."""
    text = read_capture("proc-driver-nvidia.txt")
    block = text.split("== ")[1].split("\n", 1)[1]
    values = {"Model": g["name"], "GPU UUID": g["uuid"], "Video BIOS": g["vbios"].lower(),
              "Bus Location": g["bdf"], "Device Minor": str(g["minor"]),
              "GPU Firmware": state["driver"]["version"]}
    out = []
    for line in block.rstrip("\n").split("\n"):
        m = re.match(r"^([^:]+):(\s+)(.*)$", line)
        if m and m.group(1) in values:
            line = f"{m.group(1)}:{m.group(2)}{values[m.group(1)]}"
        out.append(line)
    return "\n".join(out) + "\n"


def _modules(state: dict[str, Any]) -> str:
    loaded = state.get("modules", [])
    lines = []
    for name in reversed(loaded):  # newest first, as the kernel lists them
        size, users = MODULE_SIZES.get(name, (32768, ""))
        users = ",".join(u for u in users.split(",") if u in loaded)
        count = len(users.split(",")) if users else 0
        taint = " (OE)" if name.startswith(OUT_OF_TREE) else ""
        lines.append(f"{name} {size} {count} {users + ',' if users else '-'} Live "
                     f"0x0000000000000000{taint}")
    return "\n".join(lines) + ("\n" if lines else "")


def _mdstat(state: dict[str, Any]) -> str:
    raid = state.get("raid") or {}
    if not raid.get("assembled"):
        return "Personalities : \nunused devices: <none>\n"
    drives = {d["namespace"]: d for d in state["nvme"]}
    members = [(i, m) for i, m in enumerate(raid["members"]) if drives[m]["present"]]
    if len(members) < len(raid["members"]):
        # RAID0 cannot run without a member: md shows it inactive, members as spares.
        parts = " ".join(f"{m}[{i}](S)" for i, m in reversed(members))
        return (f"Personalities : [raid0] \n{raid['device']} : inactive {parts}\n"
                f"      {sum(drives[m]['bytes'] for _, m in members) // 1024} blocks "
                "super 1.2\n       \nunused devices: <none>\n")
    parts = " ".join(f"{m}[{i}]" for i, m in reversed(members))
    blocks = sum(drives[m]["bytes"] for _, m in members) // 1024
    return (f"Personalities : [raid0] \n{raid['device']} : active raid0 {parts}\n"
            f"      {blocks} blocks super 1.2 {raid['chunk_kb']}k chunks\n      \n"
            "unused devices: <none>\n")


NO_PID = "'<unknown>'"  # what the driver logs where no process is to blame


def _kern_log(state: dict[str, Any]) -> str:
    lines = []
    t = 812.0
    for g in state["gpus"]:
        for x in g.get("xids", []):
            t += 37.25
            lines.append(f"Nov 30 01:{int(t) // 60 % 60:02d}:{int(t) % 60:02d} {state['node']} "
                         f"kernel: [{t:12.6f}] NVRM: Xid (PCI:{g['bdf'][:-2]}): {x['xid']}, "
                         f"pid={x.get('pid', NO_PID)}, name={x.get('name', '<unknown>')}, "
                         f"{x['text']}")
    lines += kern_lines(state, state["node"])  # MCE and SXid lines
    return "\n".join(lines) + ("\n" if lines else "")


def _mounts(state: dict[str, Any]) -> str:
    """/proc/mounts: the root filesystem, and the md array on its mount point while md runs it."""
    lines = ["/dev/mapper/vg0-root / ext4 rw,relatime,errors=remount-ro 0 0"]
    raid = state.get("raid") or {}
    drives = {d["namespace"]: d for d in state.get("nvme", [])}
    # RAID0 with a member gone is inactive (see _mdstat): nothing is mounted from it
    running = raid.get("assembled") and all(drives[m]["present"] for m in raid["members"])
    if running and raid.get("mount"):
        lines.append(f"/dev/{raid['device']} {raid['mount']} xfs "
                     "rw,relatime,attr2,inode64,logbufs=8,logbsize=32k,noquota 0 0")
    return "\n".join(lines) + "\n"


def _infiniband(state: dict[str, Any], root: Path) -> None:
    """/sys/class/infiniband/<ca>, as the kernel's RDMA sysfs lays it out: `device` links to
    the PCI function (whose net/ holds the netdev) and ports/1/counters the error counters."""
    if "mlx5_ib" not in state.get("modules", []):
        return
    dirs = {d["bdf"]: root / sysfs_dir(d) for d in pci_devices(state)}
    for nic in present(state.get("nics", [])):
        base = root / "sys/class/infiniband" / nic["name"]
        pci = dirs[nic["bdf"]]
        if nic.get("netdev"):
            (pci / "net" / nic["netdev"]).mkdir(parents=True, exist_ok=True)
            keep(pci / "net" / nic["netdev"])
        _symlink(base / "device", Path("../../../bus/pci/devices") / nic["bdf"])
        for name, value in nic.get("counters", {}).items():
            _write(base / "ports/1/counters" / name, f"{value}\n")


def _symlink(link: Path, target: Path) -> None:
    """A symlink, kept where it already points there; whatever else holds its name goes
    (a tree rendered before sysfs links existed had a directory there)."""
    keep(link)
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return  # re-rendered over an earlier tree: the link is already right
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.exists():
        shutil.rmtree(link)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


# mlx5's per-priority ECN switches (MLNX_OFED/DOCA sysfs): both ends of DCQCN, one file
# per priority holding 0 or 1, under the netdev: ecn/roce_np/enable/<p>, ecn/roce_rp/enable/<p>
ECN_POINTS = {"roce_np": "ecn", "roce_rp": "ecn_rp"}  # sysfs directory -> qos key


def _ecn_nics(state: dict[str, Any]) -> list[dict[str, Any]]:
    if "mlx5_core" not in state.get("modules", []):
        return []
    return [n for n in present(state.get("nics", []))
            if n.get("link_layer") == "Ethernet" and n.get("netdev")
            and n["name"] in state.get("nic_config", {})]


def _ecn_values(qos: dict[str, Any], key: str) -> list[int]:
    # ecn_rp follows ecn until something sets the reaction point on its own
    return list(qos.get(key) or qos.get("ecn") or [0] * 8)


def _ecn(state: dict[str, Any], root: Path, seen: dict[Path, str] | None) -> None:
    """seen: what harvest_writes read from these files when the state was loaded. A value
    the state still holds as read is left alone: the node may have written the file since
    (its writers take no lock), and the kernel would keep that write."""
    for nic in _ecn_nics(state):
        qos = state["nic_config"][nic["name"]]["qos"]
        for point, key in ECN_POINTS.items():
            for prio, on in enumerate(_ecn_values(qos, key)):
                f = root / "sys/class/net" / nic["netdev"] / "ecn" / point / "enable" / str(prio)
                text = f"{int(bool(on))}\n"
                if seen is not None and seen.get(f) == text and f.is_file():
                    keep(f)
                else:
                    _write(f, text)


def _settled_enable(f: Path, tries: int = 50) -> str | None:
    """An enable file's 0 or 1; None when it is absent. A shell's `echo 1 > f` truncates
    the file and then writes it, so a read between the two finds it empty: read again
    (the window is microseconds). Taking "empty" as "unknown" would let the render put
    the state's old value over the write that was landing."""
    text = ""
    for _ in range(tries):
        try:
            text = f.read_text().strip()
        except OSError:
            return None
        if text in ("0", "1"):
            return text
        time.sleep(0.002)
    return text


def harvest_writes(state: dict[str, Any], root: Path) -> dict[Path, str]:
    """What was written into the writable sysfs files since the last render (the role's
    `echo 1 > .../ecn/roce_np/enable/3`) taken into the state, as the kernel keeps it;
    called before a re-render, which would otherwise put the old value back. Returns
    what it read, by file, for that render (render_sysroot's `seen`)."""
    seen: dict[Path, str] = {}
    for nic in _ecn_nics(state):
        qos = state["nic_config"][nic["name"]]["qos"]
        for point, key in ECN_POINTS.items():
            values = _ecn_values(qos, key)
            for prio in range(len(values)):
                f = Path(root) / "sys/class/net" / nic["netdev"] / "ecn" / point / "enable" / \
                    str(prio)
                text = _settled_enable(f)
                if text in ("0", "1"):
                    values[prio] = int(text)
                    seen[f] = f"{text}\n"
            qos[key] = values
    return seen


def _numa(state: dict[str, Any], root: Path) -> None:
    """/sys/devices/system/node/node<N>/cpulist (what numactl -H reads) and the
    thread_siblings_list of each node's first CPU (the launch map reads how many threads a
    core has there). Siblings follow the state's numbering (state._cpus): the first thread
    of every core of a socket, then the second, so CPU k's sibling is k + its core count.
    Only the first CPU's file is written: a re-render writes the sysroot again on every
    simulated tool call, and nothing reads the others."""
    for node in state.get("cpu", {}).get("numa", []):
        _write(root / f"sys/devices/system/node/node{node['node']}/cpulist", node["cpus"] + "\n")
        runs = [part.split("-") for part in node["cpus"].split(",")]
        first = runs[0][0]
        sibling = f"{first},{runs[1][0]}" if len(runs) == 2 else first
        _write(root / f"sys/devices/system/cpu/cpu{first}/topology/thread_siblings_list",
               sibling + "\n")


# aer_dev_* of a 6.1 kernel (drivers/pci/pcie/aer.c: aer_correctable_error_string,
# aer_uncorrectable_error_string, then the TOTAL_ERR_* line of aer_stats_dev_attr)
AER_NAMES = {
    "correctable": ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr",
                    "CorrIntErr", "HeaderOF"),
    "nonfatal": ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt",
                 "RxOF", "MalfTLP", "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP",
                 "AtomicOpBlocked", "TLPBlockedErr", "PoisonTLPBlocked"),
}
AER_NAMES["fatal"] = AER_NAMES["nonfatal"]
AER_TOTAL = {"correctable": "TOTAL_ERR_COR", "nonfatal": "TOTAL_ERR_NONFATAL",
             "fatal": "TOTAL_ERR_FATAL"}


def aer_files(aer: dict[str, dict[str, int]]) -> dict[str, str]:
    """{aer_dev_<severity>: text} from the state's counts by error name."""
    out = {}
    for sev, names in AER_NAMES.items():
        counts = aer.get(sev) or {}
        lines = [f"{n} {int(counts.get(n, 0))}" for n in names]
        lines.append(f"{AER_TOTAL[sev]} {sum(int(v) for v in counts.values())}")
        out[f"aer_dev_{sev}"] = "\n".join(lines) + "\n"
    return out


# The UEFI global variable a kernel exposes as efivarfs: 4 attribute bytes
# (NV+BS+RT = 0x06) then the value (1 = Secure Boot on), what mokutil reads.
SECURE_BOOT_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def _efi(state: dict[str, Any], root: Path) -> None:
    sb = state.get("secure_boot") or {"efi": True, "enabled": False}
    if not sb.get("efi", True):
        return  # legacy BIOS boot: no /sys/firmware/efi at all
    write_bytes(root / SECURE_BOOT_VAR,
                b"\x06\x00\x00\x00" + (b"\x01" if sb.get("enabled") else b"\x00"))


def render_sysroot(state: dict[str, Any], root: Path, prune: bool = True,
                   seen: dict[Path, str] | None = None) -> None:
    """(Re)write every simulated file under root, in place: only the files whose text
    changed are rewritten, and then (prune) what this state no longer has is removed.
    prune=False: a state that only added to what it had (a fault's ticks raising its
    counters) skips that sweep. seen: harvest_writes' reading, when the state was loaded
    from this tree (see _ecn)."""
    root = Path(root)
    with tracking() as rendered:
        _render(state, root, seen)
    if prune:
        for managed in ("proc", "sys"):
            _remove_stale(root / managed, rendered)


def _remove_stale(top: Path, rendered: set[Path]) -> None:
    """Remove, under top, what the last render did not write, deepest first; a directory
    goes once empty."""
    for dirpath, dirnames, filenames in os.walk(top, topdown=False):
        here = Path(dirpath)
        for name in filenames + dirnames:
            p = here / name
            if p in rendered:
                continue
            if p.is_symlink() or not p.is_dir():
                p.unlink(missing_ok=True)
            else:
                with contextlib.suppress(OSError):  # only when empty: a kept file keeps it
                    p.rmdir()


def _render(state: dict[str, Any], root: Path, seen: dict[Path, str] | None) -> None:
    _write(root / "proc/cmdline", state["kernel"]["cmdline"] + "\n")
    _write(root / "proc/modules", _modules(state))
    _write(root / "proc/mdstat", _mdstat(state))
    _write(root / "proc/mounts", _mounts(state))
    if "nvidia" in state.get("modules", []):
        d = state["driver"]
        _write(root / "proc/driver/nvidia/version", f"{d['nvrm_line']}\n{d['gcc_line']}\n")
        for g in present(state["gpus"]):
            _write(root / f"proc/driver/nvidia/gpus/{g['bdf']}/information",
                   _information(state, g))
        for n, s in enumerate(present(state["nvswitches"])):
            # Layout of the nvswitch driver's proc files; the capture (a VM) had none.
            _write(root / f"proc/driver/nvidia-nvswitch/devices/{s['bdf']}/information",
                   f"Model: \t\t NVIDIA NVSwitch\nDevice Minor: \t {n}\nBus Location: \t "
                   f"{s['bdf']}\nUUID: \t\t {s['uuid']}\nFirmware: \t {s['fw']}\n")
    for dev in pci_devices(state):
        # the function's directory nests under its bridges, as the kernel lays sysfs out;
        # /sys/bus/pci/devices/<bdf> links to it (pcie.path walks that link's target)
        base = root / sysfs_dir(dev)
        _symlink(root / "sys/bus/pci/devices" / dev["bdf"],
                 Path("../../..") / sysfs_dir(dev).removeprefix("sys/"))
        files = {"vendor": f"0x{dev['vendor']}", "device": f"0x{dev['device']}",
                 "class": f"0x{dev['class']}", "numa_node": str(dev["numa"]),
                 "current_link_speed": SPEED_OF_GEN[dev["gen_cur"]],
                 "current_link_width": str(dev["width_cur"]),
                 "max_link_speed": SPEED_OF_GEN[dev["gen_max"]],
                 "max_link_width": str(dev["width_max"])}
        for name, value in files.items():
            _write(base / name, value + "\n")
        if "aer" in dev:  # GPUs and NICs carry PCIe AER counters
            for fname, text in aer_files(dev["aer"]).items():
                _write(base / fname, text)
    _infiniband(state, root)
    _ecn(state, root, seen)
    _numa(state, root)
    _efi(state, root)
    render_host(state, root)  # SMBIOS table, EDAC
    _write(root / "var/log/kern.log", _kern_log(state))
    if fm_log.logged(state):
        _write(root / fm_log.PATH, fm_log.render(state))
