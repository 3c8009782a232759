"""XID events from kernel log lines (dmesg, journalctl -k, /var/log/kern.log).

The driver logs `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., text`.
Which XIDs mean hardware trouble follows NVIDIA's XID catalog."""

from __future__ import annotations

import re
from dataclasses import dataclass

# catalog: hardware/board faults (memory, bus, NVLink, GSP, power), not app bugs
HARDWARE_XIDS = frozenset(
    {48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 94, 95, 119, 120,
     121, 122, 123, 140, 143, 144, 145, 146, 147, 148, 149, 150, 151, 154}
)

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+),?\s*(.*)$")


@dataclass(frozen=True)
class XidEvent:
    bus: str  # 0000:3b:00 (domain:bus:device, no function), lower case
    xid: int
    text: str

    @property
    def hardware(self) -> bool:
        return self.xid in HARDWARE_XIDS


def parse_xids(text: str) -> list[XidEvent]:
    out = []
    for ln in text.splitlines():
        m = _XID.search(ln)
        if m:
            out.append(XidEvent(m.group(1).lower(), int(m.group(2)), m.group(3).strip()))
    return out


def xid_bus_key(bus_id: str) -> str:
    """A GPU bus id in any form -> the domain:bus:device key XID lines use."""
    b = bus_id.strip().lower()
    parts = b.split(":")
    if len(parts) == 3:  # 00000000:3b:00.0 or 0000:3b:00.0
        return f"{parts[0][-4:]}:{parts[1]}:{parts[2].split('.')[0]}"
    return b
