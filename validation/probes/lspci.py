"""Parser for `lspci -vvv`: link status and ACS control per device.

Written from pciutils' documented output (lspci did not run on the captured VM)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from validation.probes.system import pcie_gen


@dataclass(frozen=True)
class LspciDevice:
    address: str  # as printed: 3b:00.0 or 0000:3b:00.0
    description: str
    gen: int | None
    width: int | None
    downgraded: bool
    acs_ctl: dict[str, bool] = field(default_factory=dict)  # SrcValid/ReqRedir/... -> on


def parse_lspci_vvv(text: str) -> list[LspciDevice]:
    out = []
    for block in re.split(r"\n(?=[0-9a-fA-F]{2,4}:[0-9a-fA-F]{2}[:.])", text.strip()):
        head = block.splitlines()[0] if block.strip() else ""
        m = re.match(r"^([0-9a-fA-F:.]+)\s+(.*)$", head)
        if not m:
            continue
        sta = re.search(r"LnkSta:\s*Speed ([\d.]+GT/s)[^,]*, Width x(\d+)([^\n]*)", block)
        acs = re.search(r"ACSCtl:\s*(.*)", block)
        ctl = {k: v == "+" for k, v in re.findall(r"(\w+)([+-])", acs.group(1))} if acs else {}
        out.append(LspciDevice(
            address=m.group(1).lower(), description=m.group(2),
            gen=pcie_gen(sta.group(1)) if sta else None,
            width=int(sta.group(2)) if sta else None,
            downgraded=bool(sta and "downgraded" in sta.group(0)),
            acs_ctl=ctl,
        ))
    return out
