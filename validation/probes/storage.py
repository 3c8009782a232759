"""Parsers for storage: `nvme list -o json` and /proc/mdstat.

nvme list -o json shapes (from nvme-cli's nvme-print-json.c / nvme-print.c):
- 1.x and 2.0-2.10 without -v: flat "Devices": [{"DevicePath": "/dev/nvme0n1", ...}];
- 2.0-2.10 with -v, and 2.11+ always: "Devices": [{host, "Subsystems": [{"Controllers":
  [{..., "Namespaces": [...]}], "Namespaces": [...]}]}]. With native NVMe multipath
  (nvme_core.multipath=Y, the default of distribution kernels) the namespaces sit on
  the subsystem and the controllers' lists are empty.
Written from the documented formats (no NVMe on the captured machine)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from validation.probes.nvidia_smi import ParseError


@dataclass(frozen=True)
class NvmeDrive:
    device: str  # /dev/nvme0n1
    model: str
    serial: str
    firmware: str | None
    size_bytes: int | None


def parse_nvme_list(text: str) -> list[NvmeDrive]:
    try:
        data = json.loads(text) if text.strip() else {"Devices": []}
    except json.JSONDecodeError as exc:
        raise ParseError(f"nvme list -o json: not JSON ({exc.msg})") from None
    if not isinstance(data, dict) or "Devices" not in data:
        raise ParseError("nvme list -o json: no Devices key")
    out = []
    for d in data["Devices"]:
        if "DevicePath" in d:  # nvme-cli 1.x
            out.append(NvmeDrive(d["DevicePath"], str(d.get("ModelNumber", "")).strip(),
                                 str(d.get("SerialNumber", "")).strip(), d.get("Firmware"),
                                 d.get("PhysicalSize")))
            continue
        if "Subsystems" not in d:
            raise ParseError("nvme list -o json: a device with neither DevicePath nor "
                             "Subsystems (unknown nvme-cli format)")
        for sub in d.get("Subsystems") or ():  # nvme-cli 2.x detail list
            ctrls = sub.get("Controllers") or []
            for ctrl in ctrls:  # namespaces private to one controller
                for ns in ctrl.get("Namespaces") or ():
                    out.append(_drive(ns, ctrl))
            for ns in sub.get("Namespaces") or ():  # shared (multipath) namespaces
                out.append(_drive(ns, ctrls[0] if ctrls else {}))
    return out


def _drive(ns: dict, ctrl: dict) -> NvmeDrive:
    name = str(ns.get("NameSpace", ""))
    return NvmeDrive(name if name.startswith("/dev/") else "/dev/" + name,
                     str(ctrl.get("ModelNumber", "")).strip(),
                     str(ctrl.get("SerialNumber", "")).strip(), ctrl.get("Firmware"),
                     ns.get("PhysicalSize"))


@dataclass(frozen=True)
class MdArray:
    name: str  # md0
    active: bool
    level: str | None  # raid0
    members: tuple[str, ...]
    failed: tuple[str, ...]
    expected: int | None  # [n/m]: n
    working: int | None  # [n/m]: m

    @property
    def missing(self) -> int:
        """Members absent or failed; raid0 has no [n/m] so count (F) only."""
        gap = (self.expected - self.working) if self.expected and self.working is not None else 0
        return max(gap, len(self.failed))


def parse_mdstat(text: str) -> list[MdArray]:
    if "Personalities" not in text:
        raise ParseError("/proc/mdstat: no Personalities line")
    arrays = []
    lines = text.splitlines()
    for i, ln in enumerate(lines):
        m = re.match(r"^(md\w+)\s*:\s*(\S+)\s*(.*)$", ln)
        if not m:
            continue
        name, state, rest = m.groups()
        # "active (auto-read-only) raid1 ...", "active (read-only) raid0 ...": the
        # parenthesised state words come before the level; inactive arrays have none.
        words = [w for w in rest.split() if not (w.startswith("(") and w.endswith(")"))]
        level = words[0] if words and words[0].startswith(
            ("raid", "linear", "multipath", "faulty")) else None
        devs = [w for w in words if "[" in w]
        members = tuple(re.sub(r"\[.*$", "", w) for w in devs)
        failed = tuple(re.sub(r"\[.*$", "", w) for w in devs if w.endswith("(F)"))
        expected = working = None
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        c = re.search(r"\[(\d+)/(\d+)\]", nxt)
        if c:
            expected, working = int(c.group(1)), int(c.group(2))
        arrays.append(MdArray(name, state == "active", level, members, failed, expected, working))
    return arrays
