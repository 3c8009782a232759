"""The PCIe path of a device from sysfs: every link between it and its root port.

Layout (kernel Documentation/ABI/testing/sysfs-bus-pci, drivers/pci/pci-sysfs.c):
/sys/bus/pci/devices/<bdf> is a relative symlink to the device's directory under
/sys/devices, whose path names every bridge above it, e.g.
../../../devices/pci0000:16/0000:16:01.0/0000:17:00.0/0000:18:00.0/0000:19:00.0
(root port, switch upstream port, switch downstream port, GPU).

A link joins a downstream-facing port (root port, switch downstream port) to the
upstream-facing port below it (switch upstream port, endpoint); a switch's upstream port
and its downstream ports share the switch's internal bus, with no link between them. The
device at the bottom is an endpoint, so paired from the bottom the chain reads
(parent, device), then every second pair above: (root port, upstream port) of each switch.

Each end of a link shows `current_link_speed`, `current_link_width`, `max_link_speed`,
`max_link_width` (only a PCI Express function has them). Speeds: "2.5 GT/s PCIe" ..
"32.0 GT/s PCIe" (drivers/pci/probe.c pci_bus_speed_strings, kernels since 5.x), "2.5 GT/s"
.. "32.0 GT/s" (earlier 5.x: the same numbers without " PCIe"; NCCL's topology dump of an
HGX H100 quotes that form), "5 GT/s" / "8 GT/s" (4.x); "Unknown" (or "Unknown speed" on
4.x) where the register holds no speed the kernel knows. A physical port always reports
a width from 1 to 32 and a speed it supports (PCIe Base spec, Link Capabilities: width 0
is reserved); a hypervisor's emulated bridge may report width 0 or an Unknown speed:
such an end is `reported=False`, never read as a slow link.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from validation.probes.nvidia_smi import ParseError

BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_SPEED = re.compile(r"^(\d+(?:\.\d+)?) GT/s(?: PCIe)?$")
_UNKNOWN = ("Unknown", "Unknown speed")


def parse_speed(text: str) -> float | None:
    """A link speed attribute -> GT/s; None for the kernel's "Unknown" (no speed known)."""
    s = text.strip()
    if s in _UNKNOWN:
        return None
    m = _SPEED.match(s)
    if not m:
        raise ParseError(f"unparsed PCIe link speed: {s[:40]!r}")
    return float(m.group(1))


def parse_width(text: str) -> int | None:
    """A link width attribute -> lanes; None for 0 (no link reported)."""
    s = text.strip()
    if not s.isdigit():
        raise ParseError(f"unparsed PCIe link width: {s[:40]!r}")
    return int(s) or None


@dataclass(frozen=True)
class LinkEnd:
    """One function's view of its link; None where it reports no value."""
    address: str
    cur_gts: float | None
    cur_width: int | None
    max_gts: float | None
    max_width: int | None

    @property
    def reported(self) -> bool:
        return None not in (self.cur_gts, self.cur_width, self.max_gts, self.max_width)


@dataclass(frozen=True)
class Hop:
    """The link between a downstream-facing port (up) and the function below it (down)."""
    up: LinkEnd
    down: LinkEnd

    @property
    def reported(self) -> bool:
        return self.up.reported and self.down.reported

    @property
    def expected(self) -> tuple[float, int] | None:
        """What the link must train to: the lower maximum of its two ends, for speed and
        for width (a link trains to the highest both support)."""
        if not self.reported:
            return None
        return (min(self.up.max_gts or 0.0, self.down.max_gts or 0.0),
                min(self.up.max_width or 0, self.down.max_width or 0))

    @property
    def current(self) -> tuple[float, int] | None:
        """What it runs at: both ends read the same link; where they differ the lower."""
        if not self.reported:
            return None
        return (min(self.up.cur_gts or 0.0, self.down.cur_gts or 0.0),
                min(self.up.cur_width or 0, self.down.cur_width or 0))


@dataclass(frozen=True)
class DevicePath:
    """A device's chain of functions from the top (root bus) down, and its links."""
    chain: tuple[str, ...]
    hops: tuple[Hop, ...]


def chain_of(sysroot: Path, bdf: str) -> list[tuple[str, Path]] | None:
    """(bus address, its directory) from the root bus down to bdf, from its sysfs symlink;
    None where /sys/bus/pci/devices/<bdf> is no symlink (no sysfs PCI tree to walk)."""
    link = sysroot / "sys/bus/pci/devices" / bdf
    if not link.is_symlink():
        return None
    target = os.readlink(link)
    # within the sysroot: an absolute target is re-rooted there, a relative one (as the
    # kernel writes them) is taken from the link's directory; never resolved on the host
    where = Path(os.path.normpath(
        (sysroot / target.lstrip("/")) if target.startswith("/") else link.parent / target))
    out: list[tuple[str, Path]] = []
    for d in (where, *where.parents):  # the run of bus addresses that ends in the device
        if not BDF.match(d.name):
            break
        out.append((d.name, d))
    out.reverse()
    return out if out and out[-1][0] == bdf else None


def _read(d: Path, name: str) -> str | None:
    try:
        return (d / name).read_text()
    except OSError:
        return None


def read_end(device_dir: Path, address: str) -> LinkEnd:
    vals = {n: _read(device_dir, n) for n in ("current_link_speed", "current_link_width",
                                                "max_link_speed", "max_link_width")}
    speed = {k: parse_speed(v) if v is not None else None for k, v in vals.items()
             if k.endswith("speed")}
    width = {k: parse_width(v) if v is not None else None for k, v in vals.items()
             if k.endswith("width")}
    return LinkEnd(address, speed["current_link_speed"], width["current_link_width"],
                   speed["max_link_speed"], width["max_link_width"])


def read_path(sysroot: Path, bdf: str) -> DevicePath | None:
    """Every link above bdf, bottom first; None where sysfs has no path for it. A chain of
    one (a device on a root bus with no port above it: no link to read) has no hops."""
    chain = chain_of(sysroot, bdf)
    if chain is None:
        return None
    hops = []
    for i in range(len(chain) - 1, 0, -2):  # (parent, device), then each switch's uplink
        (up, up_dir), (down, down_dir) = chain[i - 1], chain[i]
        hops.append(Hop(read_end(up_dir, up), read_end(down_dir, down)))
    return DevicePath(tuple(a for a, _ in chain), tuple(hops))
