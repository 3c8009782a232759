"""mlnx_qos stand-in (mlnx-tools): `-i IF [--trust pcp|dscp] [--pfc 0,0,0,1,0,0,0,0]
[--dscp2prio set,DSCP,PRIO | del,DSCP,PRIO]`.

Settings are run-time only: hwsim-boot resets them at every (re)boot.
"""

from __future__ import annotations

import sys
from typing import Any

from .common import ToolError, load_state, locked_state, present, run

USAGE = ("Usage: mlnx_qos -i <interface> [--trust=pcp|dscp] [--pfc=0,0,0,1,0,0,0,0] "
         "[--dscp2prio=set|del,<dscp>,<prio>]")


def _dscp2prio(qos: dict[str, Any]) -> list[int]:
    return list(qos.get("dscp2prio") or [d >> 3 for d in range(64)])


def _nic(state: dict[str, Any], ifname: str) -> dict[str, Any]:
    for n in present(state["nics"]):
        if n["netdev"] == ifname:
            if n["link_layer"] != "Ethernet":
                raise ToolError(f"Netlink error: {ifname} does not support DCB", 1)
            return n
    raise ToolError(f"Interface {ifname} does not exist", 1)


def show(qos: dict[str, Any]) -> str:
    pfc = "".join(f"{v:<4}" for v in qos["pfc"])
    lines = ["DCBX mode: OS controlled", f"Priority trust state: {qos['trust']}"]
    if qos["trust"] == "dscp":
        # as mlnx_qos prints it: per priority, its DSCPs from the highest down; a priority
        # no DSCP maps to is left out
        table = _dscp2prio(qos)
        lines.append("dscp2prio mapping:")
        for prio in range(8):
            dscps = [d for d in range(63, -1, -1) if table[d] == prio]
            if dscps:
                lines.append(f"\tprio:{prio} dscp:{','.join(f'{d:02d}' for d in dscps)},")
    lines += ["default priority:", "Receive buffer size (bytes): 130944,130944,0,0,0,0,0,0,"
              "total_size=1027728", "Cable len: 7", "PFC configuration:",
              "\tpriority    0   1   2   3   4   5   6   7", f"\tenabled     {pfc}",
              f"\tbuffer      {''.join(f'{v:<4}' for v in qos['pfc'])}"]
    for tc in range(8):
        lines += [f"tc: {tc} ratelimit: unlimited, tsa: vendor", f"\t priority:  {tc}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    opts: dict[str, str] = {}
    i = 0
    while i < len(argv):
        key, eq, val = argv[i].partition("=")
        if key not in ("-i", "--interface", "--trust", "--pfc", "-f", "--dscp2prio"):
            raise ToolError(USAGE, 1)
        if not eq:
            i += 1
            if i >= len(argv):
                raise ToolError(USAGE, 1)
            val = argv[i]
        opts[{"--interface": "-i", "-f": "--pfc"}.get(key, key)] = val
        i += 1
    if "-i" not in opts:
        raise ToolError(USAGE, 1)
    trust, pfc = opts.get("--trust"), opts.get("--pfc")
    if trust is not None and trust not in ("pcp", "dscp"):
        raise ToolError(f"Invalid trust state {trust}; valid: pcp, dscp", 1)
    bits: list[int] | None = None
    if pfc is not None:
        try:
            bits = [int(b) for b in pfc.split(",")]
        except ValueError:
            bits = []
        if len(bits) != 8 or any(b not in (0, 1) for b in bits):
            raise ToolError("PFC must be 8 comma-separated values of 0 or 1", 1)
    remap: tuple[str, int, int] | None = None
    if opts.get("--dscp2prio") is not None:
        action, *nums = opts["--dscp2prio"].split(",")
        if action not in ("set", "del") or len(nums) != 2 or not all(x.isdigit() for x in nums) \
                or int(nums[0]) > 63 or int(nums[1]) > 7:
            raise ToolError("dscp2prio must be set|del,<dscp 0-63>,<prio 0-7>", 1)
        remap = (action, int(nums[0]), int(nums[1]))
    if trust is None and bits is None and remap is None:
        state = load_state()
        n = _nic(state, opts["-i"])
        sys.stdout.write(show(state["nic_config"][n["name"]]["qos"]))
        return 0
    with locked_state() as state:
        n = _nic(state, opts["-i"])
        qos = state["nic_config"][n["name"]]["qos"]
        if trust is not None:
            qos["trust"] = trust
        if bits is not None:
            qos["pfc"] = bits
        if remap is not None:
            table = _dscp2prio(qos)
            action, dscp, prio = remap
            # del puts the DSCP back on its default priority
            table[dscp] = prio if action == "set" else dscp >> 3
            qos["dscp2prio"] = table
        sys.stdout.write(show(qos))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
