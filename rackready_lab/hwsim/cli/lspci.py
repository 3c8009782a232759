"""lspci stand-in (pciutils): -D, -n, -v/-vv/-vvv, -d VENDOR:[DEVICE], -s BDF."""

from __future__ import annotations

import sys
from typing import Any

from .common import SPEED_OF_GEN, ToolError, load_state, run
from .pci import pci_devices

USAGE = "Usage: lspci [<switches>]\n\n-D\t\tAlways show domain numbers\n-n\t\tShow numeric ID's\n" \
        "-v/-vv/-vvv\tBe verbose\n-s [[[[<domain>]:]<bus>]:][<slot>][.[<func>]]\n" \
        "-d [<vendor>]:[<device>][:<class>]"
DRIVERS = {"gpu": "nvidia", "nic": "mlx5_core", "nvme": "nvme", "bridge": "pcieport",
           "nvswitch": "nvidia-nvswitch"}


def _gts(gen: int) -> str:
    return SPEED_OF_GEN[gen].split()[0].replace(".0", "") + "GT/s"


def verbose(d: dict[str, Any], modules: list[str]) -> list[str]:
    lnk_speed = _gts(d["gen_cur"]) + (" (downgraded)" if d["gen_cur"] < d["gen_max"] else "")
    lnk_width = f"x{d['width_cur']}" + (" (downgraded)" if d["width_cur"] < d["width_max"]
                                        else "")
    port = d.get("port", "Endpoint")
    lines = [f"\tSubsystem: Device {d['vendor']}:{d['device']}",
             "\tControl: I/O- Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr+ Stepping- "
             "SERR+ FastB2B- DisINTx+",
             f"\tNUMA node: {d['numa']}",
             f"\tCapabilities: [68] Express (v2) {port}, MSI 00",
             f"\t\tLnkCap:\tPort #0, Speed {_gts(d['gen_max'])}, Width x{d['width_max']}, "
             "ASPM not supported",
             "\t\tLnkCtl:\tASPM Disabled; RCB 64 bytes, Disabled- CommClk+",
             f"\t\tLnkSta:\tSpeed {lnk_speed}, Width {lnk_width}"]
    if d["kind"] == "bridge":
        flag = "+" if d.get("acs") else "-"
        lines += ["\tCapabilities: [148 v1] Access Control Services",
                  "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ "
                  "EgressCtrl+ DirectTrans+",
                  f"\t\tACSCtl:\tSrcValid{flag} TransBlk- ReqRedir{flag} CmpltRedir{flag} "
                  f"UpstreamFwd{flag} EgressCtrl- DirectTrans-"]
    driver = DRIVERS[d["kind"]]
    if driver.replace("-", "_") in modules or d["kind"] == "bridge":
        lines.append(f"\tKernel driver in use: {driver}")
    lines.append(f"\tKernel modules: {driver}")
    return lines


def main(argv: list[str]) -> int:
    domain = numeric = False
    level = 0
    vend = slot = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-d", "-s"):
            if i + 1 >= len(argv):
                raise ToolError(USAGE, 2)
            i += 1
            vend, slot = (argv[i], slot) if a == "-d" else (vend, argv[i])
        elif a.startswith("-") and len(a) > 1 and set(a[1:]) <= set("Dnv"):
            domain |= "D" in a
            numeric |= "n" in a
            level += a.count("v")
        else:
            raise ToolError(f"lspci: invalid option -- '{a.lstrip('-')[:1]}'\n{USAGE}", 2)
        i += 1
    state = load_state()
    out: list[str] = []
    for d in pci_devices(state):
        if vend is not None:
            # -d [<vendor>]:[<device>][:<class>], as lspci(8) documents
            v, _, rest = vend.partition(":")
            dev, _, cls = rest.partition(":")
            if (v and v.lower() != d["vendor"]) or (dev and dev.lower() != d["device"]) \
                    or (cls and not d["class"].startswith(cls.lower())):
                continue
        if slot is not None and not (d["bdf"].endswith(slot.lower()) or d["bdf"] == slot):
            continue
        addr = d["bdf"] if domain else d["bdf"][5:]
        name = d["name"]
        if d.get("lost"):
            name = name.replace("(rev a1)", "(rev ff)")
        if numeric:
            cls = d["class"][:4]
            name = f"{cls}: {d['vendor']}:{d['device']}"
        out.append(f"{addr} {name}")
        if level:
            if d.get("lost"):
                out.append("\t!!! Unknown header type 7f")
            else:
                out += verbose(d, state.get("modules", []))
            out.append("")
    sys.stdout.write("\n".join(out) + ("\n" if out else ""))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
