"""Parsers for files under /proc and /sys: PCI devices, kernel command line, modules,
the NVIDIA driver version, mounts, and NUMA layout (numactl -H, lscpu)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from validation.probes.nvidia_smi import ParseError

# PCIe transfer rate -> generation
_GT_TO_GEN = {"2.5": 1, "5.0": 2, "5": 2, "8.0": 3, "8": 3, "16.0": 4, "16": 4, "32.0": 5,
              "32": 5, "64.0": 6, "64": 6}


def pcie_gen(speed: str | None) -> int | None:
    """'32.0 GT/s PCIe' (sysfs) or '32GT/s' (lspci) -> 5."""
    if not speed:
        return None
    m = re.match(r"\s*([\d.]+)\s*GT/s", speed)
    return _GT_TO_GEN.get(m.group(1)) if m else None


@dataclass(frozen=True)
class PciDevice:
    address: str  # 0000:00:06.0
    vendor: str  # 0x10de
    pci_class: str  # 0x030200
    gen: int | None
    width: int | None
    max_gen: int | None
    max_width: int | None
    numa_node: int | None  # None where the platform does not say (-1)

    @property
    def is_nvidia_gpu(self) -> bool:
        return self.vendor == "0x10de" and self.pci_class[:6] in ("0x0302", "0x0300")

    @property
    def is_mellanox_nic(self) -> bool:
        # 0x0200 Ethernet, 0x0207 InfiniBand
        return self.vendor == "0x15b3" and self.pci_class[:6] in ("0x0200", "0x0207")


def _maybe_int(v: str | None) -> int | None:
    if v is None or not v.strip():
        return None
    try:
        n = int(v.strip(), 0)
    except ValueError:
        return None
    return None if n < 0 else n


def _device(addr: str, f: dict[str, str | None]) -> PciDevice:
    return PciDevice(
        address=addr, vendor=(f.get("vendor") or "").strip(),
        pci_class=(f.get("class") or "").strip(),
        gen=pcie_gen(f.get("current_link_speed")), width=_maybe_int(f.get("current_link_width")),
        max_gen=pcie_gen(f.get("max_link_speed")), max_width=_maybe_int(f.get("max_link_width")),
        numa_node=_maybe_int(f.get("numa_node")),
    )


def parse_pci_summary(text: str) -> list[PciDevice]:
    """Parse the capture's one-line-per-device sysfs summary (the capture sysfs-pci.txt)."""
    out = []
    for ln in text.splitlines():
        if not ln.strip():
            continue
        addr, _, rest = ln.partition(" ")
        f = dict(re.findall(r"(\w+)=((?:(?! \w+=).)*)", rest))
        out.append(_device(addr, {
            "vendor": f.get("vendor"), "class": f.get("class"),
            "current_link_speed": f.get("speed"), "current_link_width": f.get("width"),
            "max_link_speed": f.get("maxspeed"), "max_link_width": f.get("maxwidth"),
            "numa_node": f.get("numa"),
        }))
    return out


def read_pci_devices(devices_dir: Path) -> list[PciDevice]:
    """Read /sys/bus/pci/devices/* (under a sysroot); files a device lacks read as None."""
    out = []
    for d in sorted(devices_dir.iterdir()) if devices_dir.is_dir() else ():
        fields: dict[str, str | None] = {}
        for name in ("vendor", "class", "current_link_speed", "current_link_width",
                     "max_link_speed", "max_link_width", "numa_node"):
            try:
                fields[name] = (d / name).read_text().strip()
            except OSError:
                fields[name] = None
        out.append(_device(d.name, fields))
    return out


def parse_cmdline(text: str) -> list[str]:
    return text.split()


def parse_modules(text: str) -> set[str]:
    """/proc/modules -> loaded module names."""
    return {ln.split()[0] for ln in text.splitlines() if ln.strip()}


def parse_driver_version(text: str) -> str:
    """/proc/driver/nvidia/version -> '580.159.04'."""
    m = re.search(r"NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)\s", text)
    if not m:
        raise ParseError("/proc/driver/nvidia/version: no NVRM version line")
    return m.group(1)


def parse_mounts(text: str) -> dict[str, tuple[str, str]]:
    """/proc/mounts -> {mountpoint: (device, fstype)}."""
    out = {}
    for ln in text.splitlines():
        parts = ln.split()
        if len(parts) >= 3:
            out[parts[1].replace("\\040", " ")] = (parts[0], parts[2])
    return out


def parse_numactl(text: str) -> dict[int, list[int]]:
    """`numactl --hardware` -> {node: [cpus]}."""
    out: dict[int, list[int]] = {}
    for m in re.finditer(r"^node (\d+) cpus:(.*)$", text, re.M):
        out[int(m.group(1))] = [int(c) for c in m.group(2).split()]
    if not out:
        raise ParseError("numactl -H: no 'node N cpus:' line")
    return out


def parse_lscpu(text: str) -> dict[str, str]:
    """`lscpu` -> {field: value}."""
    out = {}
    for ln in text.splitlines():
        k, sep, v = ln.partition(":")
        if sep:
            out[k.strip()] = v.strip()
    if "Architecture" not in out:
        raise ParseError("lscpu: no Architecture line")
    return out
