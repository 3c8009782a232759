"""ibstat stand-in (infiniband-diags): `ibstat`, `ibstat -l`, `ibstat CA [PORT]`."""

from __future__ import annotations

import sys
from typing import Any

from .common import ToolError, load_state, module_loaded, present, run

USAGE = ("Usage: ibstat [-d(ebug) -l(ist_of_cas) -s(hort) -p(ort_list) -V(ersion)] "
         "<ca_name> [portnum]")


def ca_block(n: dict[str, Any]) -> str:
    ib = n["link_layer"] == "InfiniBand"
    cap = "0xa751e848" if ib else "0x00010000"
    return (f"CA '{n['name']}'\n\tCA type: {n['ca_type']}\n\tNumber of ports: 1\n"
            f"\tFirmware version: {n['fw']}\n\tHardware version: 0\n"
            f"\tNode GUID: {n['node_guid']}\n\tSystem image GUID: {n['node_guid']}\n"
            f"\tPort 1:\n\t\tState: {n['state']}\n\t\tPhysical state: {n['phys_state']}\n"
            f"\t\tRate: {n['rate']}\n\t\tBase lid: {n['lid']}\n\t\tLMC: 0\n"
            f"\t\tSM lid: {n['sm_lid']}\n\t\tCapability mask: {cap}\n"
            f"\t\tPort GUID: {n['port_guid']}\n\t\tLink layer: {n['link_layer']}\n")


def devices(state: dict[str, Any]) -> list[dict[str, Any]]:
    # Without the verbs/umad modules the tools see no HCA at all.
    if not (module_loaded(state, "mlx5_ib") and module_loaded(state, "ib_umad")):
        return []
    return present(state["nics"])


def main(argv: list[str]) -> int:
    state = load_state()
    nics = devices(state)
    flags = [a for a in argv if a.startswith("-")]
    args = [a for a in argv if not a.startswith("-")]
    if any(f not in ("-l", "--list_of_cas") for f in flags) or len(args) > 2:
        raise ToolError(USAGE, 255)
    if not nics:
        raise ToolError("ibpanic: [0] main: stat of IB device 'mlx5_0' failed: No such file or "
                        "directory" if args else "ibstat: no IB devices found", 255)
    if flags:
        print("\n".join(n["name"] for n in nics))
        return 0
    if args:
        match = [n for n in nics if n["name"] == args[0]]
        if not match or (len(args) == 2 and args[1] != "1"):
            raise ToolError(f"ibpanic: [0] main: stat of IB device '{args[0]}' failed: "
                            "No such file or directory", 255)
        nics = match
    sys.stdout.write("".join(ca_block(n) for n in nics))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
