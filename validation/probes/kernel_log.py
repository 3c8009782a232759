"""XID events from kernel log lines (dmesg, journalctl -k, /var/log/kern.log).

The driver logs `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., text`. What an XID
means and what to do about it is NVIDIA's XID catalog's (validation/xid_catalog.py), not
the parser's."""

from __future__ import annotations

import re
from dataclasses import dataclass

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+),?\s*(.*)$")
# the process the driver blames, where it says (r470+: pid='<unknown>' when none)
_PROC = re.compile(r"^pid=([^,]*), name=([^,]*)")


@dataclass(frozen=True)
class XidEvent:
    bus: str  # 0000:3b:00 (domain:bus:device, no function), lower case
    xid: int
    text: str

    @property
    def process(self) -> str:
        """pid and name as logged ('' where the line names none)."""
        m = _PROC.match(self.text)
        return f"{m.group(1)} {m.group(2)}" if m else ""


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


def distinct_events(events: list[XidEvent]) -> list[XidEvent]:
    """One fault per run of consecutive lines with the same GPU, XID and process: the
    driver logs one XID 13 as several lines (SM warp, SM global, ESR), one event."""
    out: list[XidEvent] = []
    for e in events:
        if not (out and e.process and (out[-1].bus, out[-1].xid, out[-1].process)
                == (e.bus, e.xid, e.process)):
            out.append(e)
    return out
