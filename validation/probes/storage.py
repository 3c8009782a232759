"""Parsers for storage: `nvme list -o json` (nvme-cli 1.x flat and 2.x nested) and
/proc/mdstat. Written from the documented formats (no NVMe on the captured machine)."""

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
        for sub in d.get("Subsystems", ()):  # nvme-cli 2.x
            for ctrl in sub.get("Controllers", ()):
                for ns in ctrl.get("Namespaces", ()):
                    out.append(NvmeDrive(
                        "/dev/" + ns.get("NameSpace", ""),
                        str(ctrl.get("ModelNumber", "")).strip(),
                        str(ctrl.get("SerialNumber", "")).strip(), ctrl.get("Firmware"),
                        ns.get("PhysicalSize")))
    return out


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
        words = rest.split()
        level = words[0] if words and words[0].startswith(("raid", "linear")) else None
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
