"""rasdaemon stand-in: `ras-mc-ctl --errors` as rasdaemon 0.8.x prints it (util/ras-mc-ctl.in).

Memory controller events are the DIMMs' EDAC errors of this boot (rasdaemon records each
EDAC report the sysfs counters count) and `host.ras_records`, events recorded in earlier
boots that the counters no longer show; MCE events are the machine checks of this boot.
"""

from __future__ import annotations

import sys
from typing import Any

from .common import ToolError, load_state, run

UC = 1 << 61
_SECTIONS_BEFORE_MCE = ("PCIe AER", "ARM processor", "Extlog", "devlink", "disk",
                        "Memory failure")


def _mc_rows(host: dict[str, Any]) -> list[str]:
    events = list(host.get("ras_records", []))
    for d in host.get("dimms", []):
        if d.get("present", True):
            events += [{"dimm": d["locator"], "kind": k, "count": n, "time": "2026-11-30 01:25:00"}
                       for k, n in (("Uncorrected", d["ue"]), ("Corrected", d["ce"])) if n]
    by_loc = {d["locator"]: d for d in host.get("dimms", [])}
    rows = []
    for i, e in enumerate(events, 1):
        d = by_loc[e["dimm"]]
        rows.append(f"{i} {e['time']} +0000 {e['count']} {e['kind']} error(s): memory read "
                    f"error at {e['dimm']} location: {d['mc']}:{d['mc_slot'] // 2}:"
                    f"{d['mc_slot'] % 2}:-1, addr 19914502144, grain 6, syndrome 0  "
                    f"err_code:0x0010:0x009f socket:{d['socket']} imc:{d['mc'] % 4} rank:0")
    return rows


def _mce_rows(host: dict[str, Any]) -> list[str]:
    rows = []
    for i, e in enumerate(host.get("mce", []), 1):
        kind = "Uncorrected_error" if e["status"] & UC else "Corrected_error"
        cpu = f", cpu=0x{e['cpu']:08x}" if e["cpu"] else ""  # perl leaves out zeros
        rows.append(f"{i} 2026-11-30 01:25:11 +0000 error: MEMORY CONTROLLER RD_CHANNEL0_ERR, "
                    f"mcg mcgstatus=0, mci {kind}, mcgcap=0x0f000c1c, status=0x{e['status']:x}, "
                    f"addr=0x{e.get('addr', 0):x}{cpu}, bank=0x{e['bank']:08x}")
    return rows


def errors(state: dict[str, Any]) -> str:
    host = state.get("host") or {}
    out = []
    mc = _mc_rows(host)
    out.append("Memory controller events:\n" + "\n".join(mc) + "\n" if mc
               else "No Memory errors.\n")
    out += [f"No {name} errors.\n" for name in _SECTIONS_BEFORE_MCE]
    mce = _mce_rows(host)
    out.append("MCE events:\n" + "\n".join(mce) + "\n" if mce else "No MCE errors.\n")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if argv != ["--errors"]:
        raise ToolError("ras-mc-ctl (hwsim stand-in, SIMULATED): only --errors", 1)
    sys.stdout.write(errors(load_state()))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
