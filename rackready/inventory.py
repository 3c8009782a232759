"""Site inventories (inventories/<name>/): which nodes exist and what they must be.

Read through Ansible's own inventory parser, so what rackready sees is what
the playbooks see. Vaulted values are never decrypted here: validation and
reports need addresses and profiles, not secrets.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rackready.errors import UserError

PROJECT_ROOT = Path(__file__).resolve().parents[1]
INVENTORIES = PROJECT_ROOT / "inventories"


@dataclass(frozen=True)
class Node:
    name: str
    address: str
    profile: str
    platform: str
    fabric: str
    user: str
    port: int
    key_file: str | None
    known_hosts: str | None
    sysroot: str
    lab: bool


def inventory_path(name: str) -> Path:
    """inventories/<name>, or a path to an inventory folder or hosts file."""
    direct = Path(name)
    if direct.exists() and (direct.is_file() or (direct / "hosts.yml").exists()):
        return direct / "hosts.yml" if direct.is_dir() else direct
    path = INVENTORIES / name / "hosts.yml"
    if not path.exists():
        known = sorted(p.name for p in INVENTORIES.iterdir() if (p / "hosts.yml").exists())
        hint = "; run `invoke lab.up` first" if name == "lab" else ""
        raise UserError(
            f"unknown inventory '{name}' (known: {', '.join(known) or 'none'}){hint}"
        )
    return path


def load(name: str) -> list[Node]:
    """Every host in the inventory with the variables rackready needs."""
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    path = inventory_path(name)
    loader = DataLoader()
    try:
        inv = InventoryManager(loader=loader, sources=[str(path)])
        if not inv.hosts and not path.read_text().strip():
            raise UserError(f"{path}: empty inventory")
        varman = VariableManager(loader=loader, inventory=inv)
        nodes = []
        for host in sorted(inv.get_hosts(), key=lambda h: h.name):
            v = varman.get_vars(host=host)
            nodes.append(_node(host.name, v, path))
    except AnsibleError as exc:
        first = str(exc).strip().splitlines()[0]
        raise UserError(f"{path}: malformed inventory: {first}") from None
    if not nodes:
        raise UserError(f"{path}: no hosts in the inventory")
    return nodes


def _node(name: str, v: dict, path: Path) -> Node:
    profile = v.get("rackready_profile")
    if not profile:
        raise UserError(f"{path}: host '{name}' has no rackready_profile")
    args = str(v.get("ansible_ssh_common_args", ""))
    known = None
    for token in args.split():
        if token.startswith("UserKnownHostsFile="):
            known = token.split("=", 1)[1]
    return Node(
        name=name,
        address=str(v.get("ansible_host", name)),
        profile=str(profile),
        platform=str(v.get("rackready_platform", "")),
        fabric=str(v.get("rackready_fabric", "")),
        user=str(v.get("ansible_user", "root")),
        port=int(v.get("ansible_port", 22)),
        key_file=v.get("ansible_ssh_private_key_file"),
        known_hosts=known,
        sysroot=str(v.get("rackready_sysroot", "/")),
        lab=bool(v.get("rackready_lab", False)),
    )


def find(name: str, inventory: str) -> Node:
    nodes = load(inventory)
    for node in nodes:
        if node.name == name:
            return node
    raise UserError(
        f"unknown node '{name}' in inventory '{inventory}' "
        f"(nodes: {', '.join(n.name for n in nodes)})"
    )
