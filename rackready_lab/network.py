"""The lab network: a bridge on the controller, one namespace and veth per node.

Nodes get only the lab subnet's connected route: no default route, and the
controller does not forward, so nothing leaves the lab (as on an isolated
provisioning network).
"""

from __future__ import annotations

from pathlib import Path

from rackready_lab import config
from rackready_lab.config import NodeSpec
from rackready_lab.shell import run


def _link_exists(name: str) -> bool:
    return run(["ip", "link", "show", name], check=False).returncode == 0


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def ensure_bridge() -> None:
    prefix = config.SUBNET.prefixlen
    if not _link_exists(config.BRIDGE):
        run(["ip", "link", "add", config.BRIDGE, "type", "bridge"])
    addrs = run(["ip", "-o", "addr", "show", "dev", config.BRIDGE]).stdout
    if f" {config.GATEWAY}/{prefix} " not in addrs:
        run(["ip", "addr", "add", f"{config.GATEWAY}/{prefix}", "dev", config.BRIDGE])
    run(["ip", "link", "set", config.BRIDGE, "up"])


def remove_bridge() -> None:
    if _link_exists(config.BRIDGE):
        run(["ip", "link", "del", config.BRIDGE])


def ensure_node_network(node: NodeSpec) -> None:
    """Namespace + veth pair: host end on the bridge, node end `host0` inside."""
    if not netns_exists(node.netns):
        run(["ip", "netns", "add", node.netns])
    if not _link_exists(node.host_veth):
        run(
            ["ip", "link", "add", node.host_veth, "type", "veth", "peer", "name", "host0",
             "netns", node.netns]
        )
    run(["ip", "link", "set", node.host_veth, "master", config.BRIDGE])
    run(["ip", "link", "set", node.host_veth, "up"])
    ns = ["ip", "-n", node.netns]
    run([*ns, "link", "set", "lo", "up"])
    have = run([*ns, "-o", "addr", "show", "dev", "host0"]).stdout
    cidr = f"{node.ip}/{config.SUBNET.prefixlen}"
    if f" {cidr} " not in have:
        run([*ns, "addr", "add", cidr, "dev", "host0"])
    run([*ns, "link", "set", "host0", "up"])


def remove_node_network(node: NodeSpec) -> None:
    if _link_exists(node.host_veth):
        run(["ip", "link", "del", node.host_veth])
    if netns_exists(node.netns):
        run(["ip", "netns", "del", node.netns])


def lab_links() -> list[str]:
    """Every interface on the controller that the lab created (for checks and tests)."""
    out = run(["ip", "-o", "link", "show"]).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    return [n for n in names if n == config.BRIDGE or n.startswith("rrv-")]


def lab_namespaces() -> list[str]:
    base = Path("/run/netns")
    return sorted(p.name for p in base.glob("rr-*")) if base.exists() else []


def ensure_nic_netdevs(node: NodeSpec, netdevs: list[str]) -> None:
    """Real interfaces inside the node named as its simulated ConnectX ports: a veth
    pair each, both ends in the node's namespace and down. They carry no traffic; they
    give the provisioning's `ip link set ... mtu` something real to act on."""
    have = run(["ip", "-n", node.netns, "-o", "link", "show"]).stdout
    for dev in netdevs:
        if f": {dev}@" in have or f": {dev}:" in have:
            continue
        run(["ip", "-n", node.netns, "link", "add", dev, "type", "veth", "peer", "name",
             f"{dev[:13]}p"])
