"""ibv_devinfo stand-in (ibverbs-utils): `ibv_devinfo [-d DEV] [-v]`."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from .common import ToolError, load_state, run
from .ibstat import devices

USAGE = "Usage: ibv_devinfo [-d device] [-i port] [-v] [-l]"


def _colon_guid(guid: str) -> str:
    h = guid[2:]
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))


def block(n: dict[str, Any], verbose: bool, mtu: int) -> str:
    ib = n["link_layer"] == "InfiniBand"
    active = n["state"] == "Active"
    mtu_code = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}
    act = min(4096, mtu) if ib else (4096 if mtu >= 4200 else 1024)
    lines = [f"hca_id:\t{n['name']}", "\ttransport:\t\t\tInfiniBand (0)",
             f"\tfw_ver:\t\t\t\t{n['fw']}", f"\tnode_guid:\t\t\t{_colon_guid(n['node_guid'])}",
             f"\tsys_image_guid:\t\t\t{_colon_guid(n['node_guid'])}",
             "\tvendor_id:\t\t\t0x02c9", f"\tvendor_part_id:\t\t\t{int(n['device_id'], 16)}",
             "\thw_ver:\t\t\t\t0x0", f"\tboard_id:\t\t\t{n['psid']}", "\tphys_port_cnt:\t\t\t1"]
    if verbose:
        lines += ["\tmax_mr_size:\t\t\t0xffffffffffffffff",
                  "\tpage_size_cap:\t\t\t0xfffffffffffff000",
                  "\tmax_qp:\t\t\t\t131072", "\tmax_cq:\t\t\t\t16777216"]
    lines += ["\t\tport:\t1",
              f"\t\t\tstate:\t\t\t{'PORT_ACTIVE (4)' if active else 'PORT_DOWN (1)'}",
              "\t\t\tmax_mtu:\t\t4096 (5)",
              f"\t\t\tactive_mtu:\t\t{act} ({mtu_code[act]})",
              f"\t\t\tsm_lid:\t\t\t{n['sm_lid']}", f"\t\t\tport_lid:\t\t{n['lid']}",
              "\t\t\tport_lmc:\t\t0x00", f"\t\t\tlink_layer:\t\t{n['link_layer']}"]
    if verbose:
        speed = "106.25 Gbps" if active else "2.5 Gbps"
        lines += [f"\t\t\tactive_width:\t\t{'4X (2)' if active else '1X (1)'}",
                  f"\t\t\tactive_speed:\t\t{speed} (128)" if active else
                  f"\t\t\tactive_speed:\t\t{speed} (1)",
                  f"\t\t\tphys_state:\t\t{'LINK_UP (5)' if active else 'POLLING (2)'}"]
    return "\n".join(lines) + "\n\n"


def main(argv: list[str]) -> int:
    state = load_state()
    verbose = False
    dev = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-v", "--verbose"):
            verbose = True
        elif a in ("-d", "--ib-dev") and i + 1 < len(argv):
            i += 1
            dev = argv[i]
        elif a in ("-l", "--list"):
            nics = devices(state)
            print(f"{len(nics)} HCA{'s' if len(nics) != 1 else ''} found:")
            for n in nics:
                print(f"\t{n['name']}")
            return 0
        else:
            raise ToolError(USAGE, 1)
        i += 1
    nics = devices(state)
    if not nics:
        raise ToolError("No IB devices found", 255)
    if dev is not None:
        nics = [n for n in nics if n["name"] == dev]
        if not nics:
            raise ToolError(f"IB device '{dev}' wasn't found", 255)
    qos = state.get("nic_config", {})
    for n in nics:
        # RoCE follows the netdev's MTU; an IB port's comes from the subnet manager
        eth = n.get("link_layer") == "Ethernet"
        mtu = (netdev_mtu(n.get("netdev")) if eth else None) or \
            qos.get(n["name"], {}).get("qos", {}).get("mtu", 4096)
        sys.stdout.write(block(n, verbose, mtu))
    return 0


def netdev_mtu(netdev: str | None) -> int | None:
    """The port's netdev MTU where the lab gave the node real interfaces for its NICs
    (an Ethernet port's RoCE MTU follows it, so `ip link set mtu` acts as on real ports)."""
    if not netdev:
        return None
    try:  # `ip`, not /sys: a container's /sys can show another network namespace
        out = subprocess.run(["ip", "-o", "link", "show", "dev", netdev], capture_output=True,
                             text=True, timeout=5).stdout.split()
        return int(out[out.index("mtu") + 1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


if __name__ == "__main__":
    sys.exit(run(main))
