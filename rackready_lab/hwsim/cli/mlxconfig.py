"""mlxconfig stand-in (mft): `-d DEV [-e] q [PARAM..]` and `-d DEV [-y] set K=V ..`.

As MFT prints it, `q` shows the "Next Boot" column alone; `-e` (--enable_verbosity)
shows Default, Current and Next Boot.

`set` records into the next-boot (pending) values; only a reboot (the
hwsim-boot unit) makes them current, as with the firmware.
"""

from __future__ import annotations

import sys
from typing import Any

from .common import ToolError, load_state, locked_state, present, run

USAGE = "-E- Usage: mlxconfig -d <device> [-e] [-y] <q[uery] [PARAM..] | set PARAM=VALUE..>"
DEFAULTS = {"LINK_TYPE_P1": "IB(1)", "SRIOV_EN": "False(0)", "NUM_OF_VFS": "0",
            "ADVANCED_PCI_SETTINGS": "False(0)", "ATS_ENABLED": "False(0)",
            "PCI_WR_ORDERING": "per_mkey(0)"}
ENUMS = {"LINK_TYPE_P1": {"1": "IB(1)", "IB": "IB(1)", "2": "ETH(2)", "ETH": "ETH(2)"},
         "PCI_WR_ORDERING": {"0": "per_mkey(0)", "PER_MKEY": "per_mkey(0)",
                             "1": "force_relax(1)", "FORCE_RELAX": "force_relax(1)"}}
BOOLS = {"SRIOV_EN", "ADVANCED_PCI_SETTINGS", "ATS_ENABLED"}


def find_nic(state: dict[str, Any], dev: str) -> dict[str, Any]:
    for k, n in enumerate(present(state["nics"])):
        names = {n["name"], n["bdf"], n["bdf"][5:], f"/dev/mst/mt4129_pciconf{k}"}
        if dev in names:
            return n
    raise ToolError(f"-E- Failed to open device: {dev}. No such file or directory", 1)


def normalise(key: str, value: str) -> str:
    v = value.split("(")[0].strip().upper()
    if key in ENUMS:
        if v not in ENUMS[key]:
            raise ToolError(f"-E- Bad value {value} for parameter {key}", 1)
        return ENUMS[key][v]
    if key in BOOLS:
        if v in ("1", "TRUE"):
            return "True(1)"
        if v in ("0", "FALSE"):
            return "False(0)"
        raise ToolError(f"-E- Bad value {value} for parameter {key}", 1)
    if not v.isdigit():
        raise ToolError(f"-E- Bad value {value} for parameter {key}", 1)
    return str(int(v))


def header(n: dict[str, Any], dev: str) -> str:
    return (f"\nDevice #1:\n----------\n\nDevice type:        ConnectX7           \n"
            f"Name:               {n['model']}_Ax  \nDescription:        {n['description']}\n"
            f"Device:             {dev}           \n\n")


def main(argv: list[str]) -> int:
    yes = "-y" in argv or "--yes" in argv
    verbose = "-e" in argv or "--enable_verbosity" in argv
    args = [a for a in argv if a not in ("-y", "--yes", "-e", "--enable_verbosity")]
    if len(args) < 3 or args[0] not in ("-d", "--dev"):
        raise ToolError(USAGE, 1)
    dev, cmd, params = args[1], args[2], args[3:]
    if cmd in ("q", "query"):
        state = load_state()
        n = find_nic(state, dev)
        cfg = state["nic_config"][n["name"]]["mlxconfig"]
        keys = params or list(DEFAULTS)
        out = [header(n, dev) + "Configurations:                                      "
               + ("Default             Current             Next Boot" if verbose
                  else "Next Boot")]
        for k in keys:
            if k not in cfg["current"]:
                raise ToolError(f"-E- The Device doesn't support {k} parameter", 1)
            cur = cfg["current"][k]
            nxt = cfg["pending"].get(k, cur)
            mark = "*" if nxt != DEFAULTS[k] else " "
            out.append(f"{mark}       {k:<36}{DEFAULTS[k]:<20}{cur:<20}{nxt}" if verbose
                       else f"{mark}       {k:<36}{nxt}")
        if any(line.startswith("*") for line in out[1:]):
            out.append("The '*' shows parameters with next value different from default/current "
                       "value.")
        print("\n".join(out))
        return 0
    if cmd != "set" or not params:
        raise ToolError(USAGE, 1)
    pairs = []
    for p in params:
        k, eq, v = p.partition("=")
        if not eq or k not in DEFAULTS:
            raise ToolError(f"-E- The Device doesn't support {k} parameter", 1)
        pairs.append((k, normalise(k, v)))
    with locked_state() as state:
        n = find_nic(state, dev)
        cfg = state["nic_config"][n["name"]]["mlxconfig"]
        lines = [header(n, dev) + "Configurations:                                      "
                 "Next Boot       New"]
        for k, v in pairs:
            lines.append(f"         {k:<36}{cfg['pending'].get(k, cfg['current'][k]):<16}{v}")
        print("\n".join(lines) + "\n")
        if not yes:
            answer = sys.stdin.readline().strip().lower() if not sys.stdin.isatty() else ""
            if answer != "y":
                raise ToolError(" Apply new Configuration? (y/n) [n] : n\nAborted by user", 1)
        print(" Apply new Configuration? (y/n) [n] : y\nApplying... Done!\n"
              "-I- Please reboot machine to load new configurations.")
        for k, v in pairs:
            if v == cfg["current"][k]:
                cfg["pending"].pop(k, None)
            else:
                cfg["pending"][k] = v
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
