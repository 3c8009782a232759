"""Where the lab keeps things and how its network is laid out.

Everything lives outside the repository: the Debian root file system is built
once and cached; per-node copies, keys and the package repository are state
that `lab.down` removes.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

CACHE_DIR = Path(os.environ.get("RACKREADY_CACHE", "/var/cache/rackready"))
STATE_DIR = Path(os.environ.get("RACKREADY_LAB_STATE", "/var/lib/rackready/lab"))

# A /24 that only the lab uses. The controller is .1 on a bridge; nodes are
# .11, .12, ... each in its own network namespace, with no route beyond it.
SUBNET = ipaddress.ip_network(os.environ.get("RACKREADY_LAB_SUBNET", "10.213.7.0/24"))
GATEWAY = SUBNET.network_address + 1
BRIDGE = "rrlab0"
REPO_PORT = 8473

NODE_PREFIX = "lab-gpu"
# Nodes are reached as a real rack's are: a non-root admin with passwordless sudo,
# only through a jump host (SSH only, no route of its own) at .10.
ADMIN_USER = "rradmin"
JUMP_NAME = "lab-jump"
SLURM_NAME = "lab-slurm"
MAX_NODES = 16
SUITE = "bookworm"

# The lab boots one platform per node in turn unless --profile picks one.
DEFAULT_PLATFORMS = (
    ("xe9680-h200", "roce"),
    ("dl380a-gen12-h200nvl", "ib"),
)
PLATFORMS = ("xe9680-h200", "xe9680-h100", "dl380a-gen12-h200nvl", "dl380a-gen11-h100nvl")

# Loop-device files that stand for NVMe data drives (the lab has no NVMe).
DATA_DRIVES = 4
DATA_DRIVE_MIB = 64


@dataclass(frozen=True)
class NodeSpec:
    name: str
    index: int
    platform: str
    fabric: str
    # UEFI Secure Boot on at the node's first boot (hwsim state secure_boot.enabled)
    secure_boot: bool = False

    @property
    def ip(self) -> str:
        return str(GATEWAY + 9 + self.index)  # lab-gpu01 is .11

    @property
    def profile(self) -> str:
        return f"{self.platform}-lab"

    @property
    def netns(self) -> str:
        return f"rr-{self.name}"

    @property
    def host_veth(self) -> str:
        # interface names are at most 15 characters
        return f"rrv-{self.name[-5:]}"

    @property
    def root(self) -> Path:
        return STATE_DIR / "nodes" / self.name / "rootfs"

    @property
    def dir(self) -> Path:
        return STATE_DIR / "nodes" / self.name


def node_name(index: int) -> str:
    return f"{NODE_PREFIX}{index:02d}"


def vault_password_file() -> Path:
    """The lab's generated vault password (its inventory's group_vars/all/vault.yml)."""
    return STATE_DIR / "vault-password"


def jump_spec() -> NodeSpec:
    """The jump host: a machine like a node (index 0: .10), without platform or drives."""
    return NodeSpec(JUMP_NAME, 0, "", "")


def slurm_spec() -> NodeSpec:
    """The lab's Slurm controller (rackready_lab.slurm): index -1, .9, beside the jump host."""
    return NodeSpec(SLURM_NAME, -1, "", "")
