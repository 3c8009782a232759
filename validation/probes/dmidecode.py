"""`dmidecode -t memory` text: the type 17 "Memory Device" blocks, as host_memory.Dimm records.

Read where the SMBIOS table itself cannot be (no /sys/firmware/dmi/tables, no permission):
the same structures decoded by dmidecode (dmidecode.c dmi_decode case 17), so the records
equal parse_smbios_memory's of that table. Wording by version:
- `Handle 0x1100, DMI type 17, 84 bytes` then `Memory Device`, fields tab-indented;
- Size: `No Module Installed` (empty slot), `Unknown`, `<n> kB|MB|GB|TB` (2.x-3.2 print
  `16384 MB`, the extended size `32 GB`; 3.3+ the largest exact unit: `16 GB`);
- Speed / configured speed: `<n> MHz` before 3.1, `<n> MT/s` after (the same number: SMBIOS
  stores MT/s), `Unknown`; `Configured Clock Speed` before 3.2, `Configured Memory Speed` after;
- 3.x prints nothing after Type Detail for an empty slot (2.x prints Unknown / the BIOS's
  placeholder strings); `Not Specified` is an absent string, as the table parser reads it.
"""

from __future__ import annotations

import re

from validation.probes.host_memory import Dimm, clean_string
from validation.probes.nvidia_smi import ParseError

_HANDLE = re.compile(r"^Handle 0x[0-9A-Fa-f]+, DMI type (\d+), (\d+) bytes$")
_SIZE = re.compile(r"^(\d+) (bytes|kB|MB|GB|TB)$")
_UNIT_MIB = {"MB": 1, "GB": 1024, "TB": 1024 * 1024}
_SPEED = re.compile(r"^(\d+) (MT/s|MHz)$")
# dmidecode's statements that there is no table at all (not a parse failure: no SMBIOS)
NO_SMBIOS = re.compile(r"No SMBIOS nor DMI entry point found")


def _size_mib(v: str) -> int | None:
    if v == "No Module Installed":
        return 0
    if v in ("Unknown", ""):
        return None
    m = _SIZE.match(v)
    if not m:
        raise ParseError(f"unparsed dmidecode memory size {v!r}")
    n, unit = int(m.group(1)), m.group(2)
    if unit in ("bytes", "kB"):  # a fitted sub-MiB module is not an empty slot
        return max(1, n // (1024 * 1024 if unit == "bytes" else 1024)) if n else 0
    return n * _UNIT_MIB[unit]


def _speed(v: str | None) -> int | None:
    if v is None or v == "Unknown":
        return None
    m = _SPEED.match(v)
    if not m:
        raise ParseError(f"unparsed dmidecode memory speed {v!r}")
    return int(m.group(1)) or None


def parse_dmidecode_memory(text: str) -> list[Dimm]:
    """Every Memory Device block, in output order. ParseError where the text is not
    dmidecode's (no `SMBIOS ... present` / handle lines) or a block's values are unknown
    shapes; [] only where dmidecode decoded a table that has no memory device."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    dmidecode = False
    for raw in text.splitlines():
        ln = raw.rstrip()
        if h := _HANDLE.match(ln.strip()):
            dmidecode = True
            current = {"_len": h.group(2)} if h.group(1) == "17" else None
            if current is not None:
                blocks.append(current)
            continue
        if re.match(r"^(# dmidecode |SMBIOS \d+\.\d+(\.\d+)? present)", ln):
            dmidecode = True
        if current is None or not ln.startswith("\t") or ln.startswith("\t\t"):
            continue
        key, sep, value = ln.strip().partition(":")
        if sep:
            current.setdefault(key.strip(), value.strip())
    if not dmidecode:
        raise ParseError(f"unparsed dmidecode output: {text.strip()[:120]!r}")
    out = []
    for b in blocks:
        if "Size" not in b or "Locator" not in b:
            raise ParseError(f"dmidecode Memory Device without Size/Locator "
                             f"({b['_len']} bytes: SMBIOS 2.1+ needs 21)")
        out.append(Dimm(
            locator=clean_string(b["Locator"]), bank=clean_string(b.get("Bank Locator", "")),
            size_mib=_size_mib(b["Size"]), speed_mts=_speed(b.get("Speed")),
            configured_mts=_speed(b.get("Configured Memory Speed",
                                        b.get("Configured Clock Speed"))),
            manufacturer=clean_string(b.get("Manufacturer", "")),
            serial=clean_string(b.get("Serial Number", "")),
            part=clean_string(b.get("Part Number", ""))))
    return out
