"""mlxlink stand-in (MFT): `mlxlink -d DEV [-m] [-c] [-e] [--json]` from the state.

Prints the sections mlxlink prints (mstflint mlxlink_commander.cpp; layout as in MFT 4.3x
output): Operational Info always, Module Info (-m) from the NIC's transceiver, Physical
Counters and BER Info (-c) from its port counters, EYE Opening Info (-e). DEV is the RDMA
device (mlx5_0), its PCI address (0000:19:00.0 or 19:00.0) or an mst path ending in one.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .common import ToolError, load_state, module_loaded, present, run

USAGE = ("Usage: mlxlink -d <device> [-p <port>] [-m] [-c] [-e] [--json]")
NO_ERRORS = "15E-255"  # what mlxlink prints for a BER with no error counted


def _args(argv: list[str]) -> tuple[str, set[str]]:
    dev, flags = None, set()
    it = iter(argv)
    for a in it:
        if a in ("-d", "--device"):
            dev = next(it, None)
        elif a in ("-p", "--port"):
            next(it, None)
        elif a in ("-m", "--show_module", "-c", "--show_counters", "-e", "--show_eye",
                   "--json"):
            flags.add({"--show_module": "-m", "--show_counters": "-c",
                       "--show_eye": "-e"}.get(a, a))
        else:
            raise ToolError(f"-E- Unknown option: {a}\n{USAGE}", 1)
    if not dev:
        raise ToolError(f"-E- Please provide a device name\n{USAGE}", 1)
    return dev, flags


def _find(state: dict[str, Any], dev: str) -> dict[str, Any]:
    for n in present(state["nics"]):
        if dev in (n["name"], n["bdf"], n["bdf"][5:]) or dev.endswith(n["bdf"]):
            return n
    raise ToolError(f"-E- Failed to open device: {dev}, No such file or directory", 1)


def _lanes(vals: list[float], rng: str) -> str:
    return ",".join(f"{v:.3f}" for v in vals) + f" [{rng}]"


def sections(nic: dict[str, Any], flags: set[str]) -> dict[str, dict[str, Any]]:
    up = nic["state"] == "Active"
    ib = nic["link_layer"] == "InfiniBand"
    out: dict[str, dict[str, Any]] = {"Operational Info": {
        "State": "Active" if up else "Polling", "Physical state": "LinkUp" if up else "Polling",
        "Speed": ("IB-NDR" if ib else "400G") if up else "N/A", "Width": "4x" if up else "N/A",
        "FEC": "Standard_RS-FEC - (544,514)" if up else "N/A",
        "Loopback Mode": "No Loopback", "Auto Negotiation": "ON"}}
    mod = nic.get("module") or {}
    if "-m" in flags:
        out["Module Info"] = {
            "Temperature [C]": f"{mod.get('temp_c', 'N/A')} [-5..75]",
            "Voltage [mV]": "3287.4 [2970..3630]",
            "Bias Current [mA]": "6.504,6.520,6.498,6.512 [2..15]",
            "Rx Power Current [dBm]": _lanes(mod.get("rx_dbm", []), "-10.41..5"),
            "Tx Power Current [dBm]": _lanes(mod.get("tx_dbm", []), "-8.508..5"),
            "Identifier": mod.get("identifier", "N/A"),
            "Compliance": mod.get("compliance", "N/A"),
            "Cable Technology": "850 nm VCSEL",
            "Cable Type": mod.get("cable_type", "N/A"), "OUI": "Mellanox",
            "Vendor Name": mod.get("vendor", "N/A"),
            "Vendor Part Number": mod.get("part", "N/A"),
            "Vendor Serial Number": mod.get("serial", "N/A"), "Rev": "A5",
            "Wavelength [nm]": "850", "Transfer Distance [m]": "50",
            "Digital Diagnostic Monitoring": "Yes", "Module State": "Ready state"}
    if "-c" in flags:
        c = nic.get("counters", {})
        eff = int(mod.get("effective_errors", 0))
        out["Physical Counters and BER Info"] = {
            "Time Since Last Clear [Min]": "1440.0",
            "Effective Physical Errors": str(eff),
            "Effective Physical BER": f"{eff or 15}E-{12 if eff else 255}",
            "Raw Physical Errors Per Lane": "0,0,0,0",
            "Raw Physical BER": mod.get("raw_ber", NO_ERRORS),
            "Link Down Counter": str(c.get("link_downed", 0)),
            "Link Error Recovery Counter": str(c.get("link_error_recovery", 0))}
    if "-e" in flags:
        out["EYE Opening Info"] = {"FOM Mode": "N/A", "Lane": "0,1,2,3",
                                   "Physical Grade": "1412,1398,1405,1420",
                                   "Height Eye Opening [mV]": "N/A",
                                   "Phase Eye Opening [psec]": "N/A"}
    return out


def render_text(secs: dict[str, dict[str, Any]]) -> str:
    lines = []
    for title, body in secs.items():
        lines += ["", title, "-" * len(title)]
        lines += [f"{k:<35}: {v}" for k, v in body.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    dev, flags = _args(argv)
    state = load_state()
    if not module_loaded(state, "mlx5_core"):
        raise ToolError(f"-E- Failed to open device: {dev}, No such file or directory", 1)
    secs = sections(_find(state, dev), flags)
    if "--json" in flags:
        sys.stdout.write(json.dumps({"result": {"output": secs},
                                     "status": {"code": 0, "message": "OK"}}, indent=4) + "\n")
    else:
        sys.stdout.write(render_text(secs))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
