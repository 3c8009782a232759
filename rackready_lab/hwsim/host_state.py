"""The host side of a simulated node's hardware: DIMMs (SMBIOS/EDAC), machine checks, SXids.

Layouts follow the chassis: 32 DDR5 RDIMM slots, 16 per CPU (Dell XE9680 "A1".."A16" /
"B1".."B16"; HPE DL380a "PROC 1 DIMM 1".."PROC 2 DIMM 16"), every slot fitted with
64 GB, running at the platform's 2-DIMMs-per-channel speed; four memory controllers per
socket with four DIMMs each, as the i10nm EDAC driver lists them.
"""

from __future__ import annotations

import hashlib
from typing import Any

# platform -> (locator format, bank format, rated MT/s, configured MT/s, part, maker)
DIMM_LAYOUT: dict[str, tuple[str, str, int, int, str, str]] = {
    "xe9680-h200": ("{sock}{slot}", "CPU{cpu}", 4800, 4400, "HMCG94AGBRA181N", "Hynix"),
    "xe9680-h100": ("{sock}{slot}", "CPU{cpu}", 4800, 4400, "HMCG94AGBRA181N", "Hynix"),
    "dl380a-gen11-h100nvl": ("PROC {cpu} DIMM {slot}", "PROC {cpu}", 4800, 4400,
                             "M321R8GA0BB0-CQKZJ", "Samsung"),
    "dl380a-gen12-h200nvl": ("PROC {cpu} DIMM {slot}", "PROC {cpu}", 6400, 5200,
                             "M321R8GA0PB2-CCPWC", "Samsung"),
}
SLOTS_PER_SOCKET = 16
DIMM_MIB = 65536


def host_state(platform: str, node: str) -> dict[str, Any]:
    loc, bank, rated, configured, part, maker = DIMM_LAYOUT[platform]
    dimms = []
    for sock in range(2):
        for j in range(SLOTS_PER_SOCKET):
            fmt = {"sock": "AB"[sock], "cpu": sock + 1, "slot": j + 1}
            serial = hashlib.sha256(f"{node}/dimm/{sock}/{j}".encode()).hexdigest()[:8].upper()
            dimms.append({"locator": loc.format(**fmt), "bank": bank.format(**fmt),
                          "socket": sock, "mc": sock * 4 + j // 4, "mc_slot": j % 4,
                          "present": True, "size_mib": DIMM_MIB, "speed": rated,
                          "configured": configured, "part": part, "manufacturer": maker,
                          "serial": serial, "ce": 0, "ue": 0})
    # mce: machine-check records {cpu, bank, status}; sxids: {nvswitch, bdf, sxid, fatal, text};
    # fm_errors: NVSwitch errors Fabric Manager logs {nvswitch, bdf, physical_id, port, sxid,
    # fatal, at} (at: epoch seconds; None until the node's next tool call logs it)
    return {"dimms": dimms, "mce": [], "sxids": [], "fm_errors": []}
