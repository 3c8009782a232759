"""setpci stand-in (pciutils): the ACS control register of the simulated PCIe bridges.

Only ECAP_ACS+0x6.w (ACS Control) is simulated, because that is the register
provisioning touches; it maps to state["pci"]["acs_enabled"], which lspci -vvv
shows as ACSCtl. The state keeps one flag for all bridges, so a write to any
bridge sets it for every bridge.
"""

from __future__ import annotations

import sys

from .common import ToolError, load_state, locked_state, run
from .pci import pci_devices

USAGE = ("Usage: setpci [<options>] (<device>+ <reg>[=<values>]*)*\n"
         "-s [[[<domain>]:][<bus>]:][<slot>][.[<func>]]\tSelect devices by bus address\n"
         "-d [<vendor>]:[<device>]\t\t\tSelect devices by ID")
ACS_CTL = "ECAP_ACS+0x6.w"
# SrcValid, ReqRedir, CmpltRedir, UpstreamFwd: what firmware enables on these switches.
ACS_ON = 0x001D


def _selected(state: dict, slot: str | None, vend: str | None) -> list[dict]:
    devs = []
    for d in pci_devices(state):
        if slot is not None and not (d["bdf"] == slot or d["bdf"].endswith(slot.lower())):
            continue
        if vend is not None:
            v, _, dev = vend.partition(":")
            if (v and v.lower() != d["vendor"]) or (dev and dev.lower() != d["device"]):
                continue
        devs.append(d)
    return devs


def main(argv: list[str]) -> int:
    slot = vend = None
    ops: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-s", "-d"):
            if i + 1 >= len(argv):
                raise ToolError(USAGE, 2)
            i += 1
            slot, vend = (argv[i], vend) if a == "-s" else (slot, argv[i])
        elif a.startswith("-"):
            raise ToolError(f"setpci: Invalid option -- '{a.lstrip('-')[:1]}'\n{USAGE}", 2)
        else:
            ops.append(a)
        i += 1
    if not ops:
        raise ToolError(USAGE, 2)
    for op in ops:
        reg, eq, value = op.partition("=")
        if reg.upper() != ACS_CTL.upper():
            raise ToolError(f"setpci: register {reg} is not simulated by hwsim", 1)
        if eq:
            try:
                on = int(value, 16) != 0
            except ValueError as exc:
                raise ToolError(f"setpci: Invalid value \"{value}\"", 1) from exc
            with locked_state() as state:
                if not _selected(state, slot, vend):
                    raise ToolError("setpci: Warning: No devices selected for \"" + op + "\".", 1)
                bridges = [d for d in _selected(state, slot, vend) if d["kind"] == "bridge"]
                if not bridges:
                    raise ToolError("setpci: Capability ACS not found", 1)
                state.setdefault("pci", {})["acs_enabled"] = on
            continue
        devs = _selected(load_state(), slot, vend)
        if not devs:
            raise ToolError("setpci: Warning: No devices selected for \"" + op + "\".", 1)
        for d in devs:
            if d["kind"] != "bridge":
                raise ToolError("setpci: Capability ACS not found", 1)
            print(f"{ACS_ON if d.get('acs') else 0:04x}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
