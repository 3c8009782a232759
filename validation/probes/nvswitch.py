"""NVSwitch SXid events from kernel log lines (dmesg, journalctl -k, /var/log/kern.log).

The nvswitch driver logs "Switch Xids" like XIDs (NVIDIA's Xid guide, section "What is
an SXid message"; catalog in the Fabric Manager user guide):

    nvidia-nvswitch3: SXid (PCI:0000:c5:00.0): 20034, Fatal, Link 24 LTSSM Fault Up
    nvidia-nvswitch4: SXid (PCI:0000:c6:00.0): 19084, Non-fatal, Link 29 AN1 Heartbeat ...
    nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 10002, Severity 5 Engine instance 00 ...
    nvidia-nvswitch2: SXid (PCI:0000:c4:00.0): 10002, Data {0x00000000, ...}

An event is its first line ("Fatal", "Non-fatal", or "Correctable", which the driver
records as non-fatal); the driver then records it (error_nvswitch.c
nvswitch_record_error -> _nvswitch_dump_error_entry): "Severity S Engine instance I
Sub-engine instance J" (S: 0 non-fatal, 1 fatal; I: the link or unit of the head line) and
one or two "Data {...}" lines, which repeat the SXid number and bus address and are not
counted again; a supplementary record of the same event (intr_nvswitch.h
NVSWITCH_REPORT_*_DATA) prints them again without a head. A detail line is read apart
from the head line, by its switch (bus address), SXid and instance, so the lines of
switches logging at once may interleave. A "Severity" line whose head was never logged
(a ring buffer that starts mid-event, an excerpt) is an event of its own with its
severity; "Data" lines and SOE "HALT data[n]" lines alone never make an event unless no
line of their switch and SXid came before. A line with none of these words (an older
driver's wording, thermal and SOE messages) is counted with severity unknown.
Source: NVIDIA/open-gpu-kernel-modules src/common/nvswitch (common_nvswitch.h
NVSWITCH_PRINT_SXID, intr_nvswitch.h, error_nvswitch.h, ctrl_dev_nvswitch.h
NVSWITCH_ERROR_SEVERITY_*), 595.45.04.
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


_SEVERITY_LINE = re.compile(r"Severity (\d+) Engine instance (\d+)", re.I)
_HEAD_INSTANCE = re.compile(r"\bLink (\d+)|\binstance=(\d+)", re.I)
_HEAD_WORDS: dict[str, Severity] = {"fatal": "fatal", "non-fatal": "non-fatal",
                                    "correctable": "non-fatal"}
_RECORD_SEVERITY: dict[str, Severity] = {"0": "non-fatal", "1": "fatal"}


def parse_sxids(text: str) -> list[SxidEvent]:
    out = []
    # (bus, sxid, instance) of every event read; instance None: the head named none
    events: set[tuple[str, int, int | None]] = set()
    # (bus, sxid) of every SXid line read
    lines: set[tuple[str, int]] = set()
    for ln in text.splitlines():
        m = _SXID.search(ln)
        if not m:
            continue
        inst, bus, sxid = int(m.group(1)), m.group(2).lower(), int(m.group(3))
        rest = m.group(4).strip()
        head = rest.split(",", 1)[0].strip().lower()
        seen = (bus, sxid) in lines
        lines.add((bus, sxid))
        if head.startswith("severity"):
            d = _SEVERITY_LINE.match(rest)
            where = int(d.group(2)) if d else None
            if (bus, sxid, where) in events or (bus, sxid, None) in events or (
                    d is None and seen):
                continue  # the record of an event read (or its supplementary record)
            events.add((bus, sxid, where))  # its head was not logged: the event itself
            sev_d = _RECORD_SEVERITY.get(d.group(1), "unknown") if d else "unknown"
            out.append(SxidEvent(inst, bus, sxid, sev_d, rest))
            continue
        if head.startswith(("data", "soe halt data")):
            if not seen:  # nothing of this event before it: the event, severity unknown
                events.add((bus, sxid, None))
                out.append(SxidEvent(inst, bus, sxid, "unknown", rest))
            continue
        sev: Severity = _HEAD_WORDS.get(head, "unknown")
        body = rest.split(",", 1)[1].strip() if sev != "unknown" and "," in rest else rest
        w = _HEAD_INSTANCE.search(body)
        events.add((bus, sxid, int(w.group(1) or w.group(2)) if w else None))
        out.append(SxidEvent(inst, bus, sxid, sev, body))
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
