"""NVSwitch SXid events from kernel log lines (dmesg, journalctl -k, /var/log/kern.log).

The nvswitch driver logs "Switch Xids" like XIDs (NVIDIA's Xid guide, section "What is
an SXid message"; catalog in the Fabric Manager user guide):

    nvidia-nvswitch3: SXid (PCI:0000:c5:00.0): 20034, Fatal, Link 24 LTSSM Fault Up
    nvidia-nvswitch4: SXid (PCI:0000:c6:00.0): 19084, Non-fatal, Link 29 AN1 Heartbeat ...
    nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 10002, Severity 5 Engine instance 00 ...
    nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 10002, Data {0x00000000, ...}

An event is its first line ("Fatal" or "Non-fatal"); the "Severity N ..." and "Data {...}"
lines that follow repeat it with details and are not counted again. A line with neither
word nor a detail marker (an older driver's wording) is counted with severity unknown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Severity = Literal["fatal", "non-fatal", "unknown"]

_SXID = re.compile(
    r"nvidia-nvswitch(\d+): SXid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+),\s*(.*)$")


@dataclass(frozen=True)
class SxidEvent:
    instance: int  # N of nvidia-nvswitchN (the driver's device instance)
    bus: str  # 0000:c5:00.0, lower case
    sxid: int
    severity: Severity
    text: str


def parse_sxids(text: str) -> list[SxidEvent]:
    out = []
    for ln in text.splitlines():
        m = _SXID.search(ln)
        if not m:
            continue
        rest = m.group(4).strip()
        head = rest.split(",", 1)[0].strip().lower()
        if head.startswith(("severity", "data")):
            continue  # detail line of the event above
        sev: Severity = ("fatal" if head == "fatal" else "non-fatal" if head == "non-fatal"
                         else "unknown")
        body = rest.split(",", 1)[1].strip() if sev != "unknown" and "," in rest else rest
        out.append(SxidEvent(int(m.group(1)), m.group(2).lower(), int(m.group(3)), sev, body))
    return out


def parse_nvswitch_information(text: str) -> dict[str, str]:
    """/proc/driver/nvidia-nvswitch/devices/<bdf>/information: `Key: value` lines."""
    out = {}
    for ln in text.splitlines():
        key, sep, value = ln.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def bus_key(bus: str) -> str:
    """0000:c5:00.0 / 00000000:C5:00.0 / c5:00.0 -> 0000:c5:00.0 (the form SXid lines use)."""
    b = bus.strip().lower()
    parts = b.split(":")
    if len(parts) == 2:
        return f"0000:{b}"
    return f"{parts[0][-4:]}:{parts[1]}:{parts[2]}" if len(parts) == 3 else b
