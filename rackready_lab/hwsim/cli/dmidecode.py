"""dmidecode stand-in: `dmidecode -t memory` / `-t 17` as dmidecode 3.4 prints the hwsim
SMBIOS table (dmidecode.c case 16/17). Without the kernel's table copy (the
smbios-table-unreadable state) dmidecode finds the entry point in /dev/mem instead.
"""

from __future__ import annotations

import sys
from typing import Any

from .common import ToolError, load_state, run


def _device(handle: int, d: dict[str, Any]) -> list[str]:
    fitted = d.get("present", True)
    out = [f"Handle 0x{handle:04X}, DMI type 17, 40 bytes", "Memory Device",
           "\tArray Handle: 0x1000", "\tError Information Handle: Not Provided",
           f"\tTotal Width: {80 if fitted else 'Unknown'}{' bits' if fitted else ''}",
           f"\tData Width: {64 if fitted else 'Unknown'}{' bits' if fitted else ''}",
           f"\tSize: {d['size_mib'] // 1024} GB" if fitted else "\tSize: No Module Installed",
           "\tForm Factor: DIMM", "\tSet: None", f"\tLocator: {d['locator']}",
           f"\tBank Locator: {d['bank']}", "\tType: DDR5",
           "\tType Detail: Synchronous Registered (Buffered)" if fitted
           else "\tType Detail: Synchronous"]
    if not fitted:  # 3.x: nothing after Type Detail for an empty slot
        return out
    return out + [f"\tSpeed: {d['speed']} MT/s", f"\tManufacturer: {d['manufacturer']}",
                  f"\tSerial Number: {d['serial']}", "\tAsset Tag: Not Specified",
                  f"\tPart Number: {d['part']}", "\tRank: 2",
                  f"\tConfigured Memory Speed: {d['configured']} MT/s",
                  "\tMinimum Voltage: 1.1 V", "\tMaximum Voltage: 1.1 V",
                  "\tConfigured Voltage: 1.1 V"]


def memory(state: dict[str, Any]) -> str:
    host = state.get("host") or {}
    dimms = host.get("dimms", [])
    head = (["# dmidecode 3.4", "Getting SMBIOS data from sysfs.", "SMBIOS 3.3.0 present."]
            if host.get("smbios_table", True) else
            ["# dmidecode 3.4", "Scanning /dev/mem for entry point.", "SMBIOS 3.3.0 present.",
             "Table at 0x6F6E5000."])
    lines = head + ["", "Handle 0x1000, DMI type 16, 23 bytes", "Physical Memory Array",
                    "\tLocation: System Board Or Motherboard", "\tUse: System Memory",
                    "\tError Correction Type: Multi-bit ECC", "\tMaximum Capacity: 8 TB",
                    "\tError Information Handle: Not Provided",
                    f"\tNumber Of Devices: {len(dimms)}", ""]
    for i, d in enumerate(dimms):
        lines += _device(0x1100 + i, d) + [""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv not in (["-t", "memory"], ["-t", "17"], ["--type", "memory"], ["--type", "17"]):
        raise ToolError("dmidecode (hwsim stand-in, SIMULATED): only -t memory / -t 17", 2)
    sys.stdout.write(memory(load_state()))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
