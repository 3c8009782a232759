"""Site inventories (inventories/<name>/): which nodes exist and what they must be.

Read through Ansible's own inventory parser and variable manager, so what
rackready sees is what the playbooks see, connection facts included: user,
port, key, become and the ssh arguments Ansible passes (ProxyJump, known_hosts).

Vault: encrypted group_vars/host_vars are decrypted with Ansible's own loader
when a password is configured the way Ansible reads it (ANSIBLE_VAULT_PASSWORD_FILE,
ANSIBLE_VAULT_IDENTITY_LIST or ansible.cfg). Without one, encrypted files and
values are skipped; only a value rackready needs is an error. Secrets are never
printed.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackready.errors import UserError
from rackready.site.bmc import BmcAccess, bmc_access
from rackready.site.connection import Hop, connection_facts
from rackready.site.paths import PROJECT_ROOT, inventory_path, log
from rackready.site.vault import VAULT_HINT, _check_yaml, _Facts, _Loader, _vault_secrets


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
    rdma_devices: tuple[str, ...] = ()  # compute ConnectX PCI addresses (rdma_network_mlx_devices)
    validation_site: dict | None = None  # rackready_validation_site: extra settings for the suite
    # rackready_validation_without: needs this host cannot have (reported not applicable)
    validation_without: tuple[str, ...] = ()
    # rackready_hostname: the node's own hostname where it is not its inventory name
    hostname: str = ""
    # rackready_gpu_serials: the GPU board serials this node must report (optional)
    gpu_serials: tuple[str, ...] = ()
    # connection facts beyond user/port/key (see connection_facts)
    become: bool = False  # ansible_become: the suite runs as root through `sudo -n`
    jump: Hop | None = None  # ProxyJump from ansible_ssh_common_args / _extra_args
    proxy_command: str | None = None  # ProxyCommand, %h %p %r already expanded
    # The role variables validation judges against, under their Ansible names, as the
    # roles see them (host/group vars over role defaults): one source for both sides.
    provisioned: dict | None = None
    # rackready_slurm: the site's Slurm as `invoke validate --via slurm` uses it (see
    # rackready.site.slurm); None where the inventory has none
    slurm: dict | None = None
    # The BMC: resolved only when the out-of-band step needs it, so a vaulted
    # password without a vault password fails that node alone; never printed (repr=False).
    bmc: Callable[[], BmcAccess | None] | None = field(default=None, repr=False, compare=False)


# Per role, the variables whose values the node must show after provisioning.
PROVISIONED_VARS = {
    "rdma_network": ("rdma_network_roce_priority", "rdma_network_roce_trust",
                     "rdma_network_roce_mtu", "rdma_network_roce_gid_index",
                     "rdma_network_roce_dscp", "rdma_network_roce_ecn",
                     "rdma_network_mlxconfig", "rdma_network_peermem"),
    "validation_tools": ("validation_tools_venv", "validation_tools_nccl_tests_dir",
                         "validation_tools_nccl_tests_version"),
    "nvidia_driver": ("nvidia_driver_branch", "nvidia_driver_ecc_enabled",
                      "nvidia_driver_mig_enabled", "nvidia_driver_persistence_enabled"),
    "cuda_toolkit": ("cuda_toolkit_version",),
    "nccl": ("nccl_version",),
    # the site's BIOS choices over the platform profile: the out-of-band step compares the
    # BMC's attributes with what the role set, so a site override is not read as drift
    "bios": ("bios_attributes_override",),
}


def _hosts(name: str, *, vault_files_needed: bool = False) -> tuple[Path, dict[str, dict]]:
    """Every host of the inventory with its variables (still untemplated).

    vault_files_needed: an encrypted vars file without a password is an error (as it
    is for ansible-playbook); otherwise it is skipped and only a needed value says so.
    """
    path = inventory_path(name)
    _check_yaml(path)
    return path, _read(path, vault_files_needed)[1]


def _read(path: Path, vault_files_needed: bool = False) -> tuple[object, dict[str, dict]]:
    # Ansible on first use: a heavy import, kept out of every command's startup
    from ansible import constants
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.vars.manager import VariableManager

    constants.INVENTORY_UNPARSED_IS_FAILED = True
    loader = _Loader()
    noise = io.StringIO()  # Ansible's parser warnings; the error below says it in one line
    try:
        with contextlib.redirect_stderr(noise):
            _vault_secrets(loader, path)
    except AnsibleError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"vault password: {first}") from None
    try:
        with contextlib.redirect_stderr(noise):
            inv = InventoryManager(loader=loader, sources=[str(path)])
            varman = VariableManager(loader=loader, inventory=inv)
            hosts = {h.name: varman.get_vars(host=h) for h in inv.get_hosts()}
    except AnsibleError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{path}: malformed inventory: {first}") from None
    if not hosts:
        raise UserError(f"{path}: malformed inventory: it names no host")
    if loader.sealed:
        log.debug("vault-encrypted files skipped (no vault password): %s",
                  ", ".join(loader.sealed))
        if vault_files_needed:
            raise UserError(f"{loader.sealed[0]} is vault-encrypted and no vault password is "
                            f"given ({VAULT_HINT})")
    for v in hosts.values():
        v["_rackready_sealed"] = tuple(loader.sealed)
        v["_rackready_loader"] = loader
    return loader, dict(sorted(hosts.items()))


def check_inventory(name: str | Path, *, vault_files_needed: bool = False) -> None:
    """The inventory parses and names at least one host (UserError otherwise)."""
    _hosts(str(name), vault_files_needed=vault_files_needed)


def hosts_in_group(name: str, group: str) -> list[str]:
    """Hosts of an inventory in one group (e.g. the `staging` host of the offline bundle)."""
    path, hosts = _hosts(name)
    return [h for h, v in hosts.items() if group in v.get("group_names", [])]


def load(name: str) -> list[Node]:
    """The GPU nodes of an inventory: every host that names a hardware profile
    (staging or mirror hosts have none and are not validated). An encrypted vars file
    that cannot be opened is refused, as ansible-playbook refuses it: skipped, it would
    take the site's settings in it (fabric, user, what a node lacks) out of the plan."""
    path, hosts = _hosts(name, vault_files_needed=True)
    nodes = [_node(h, v, path) for h, v in hosts.items() if v.get("rackready_profile")]
    if not nodes:
        raise UserError(f"{path}: no host in the inventory has a rackready_profile")
    return nodes


def find(name: str, inventory: str) -> Node:
    path, hosts = _hosts(inventory, vault_files_needed=True)
    if name not in hosts:
        known = ", ".join(h for h, v in hosts.items() if v.get("rackready_profile"))
        raise UserError(f"unknown node '{name}' in inventory '{inventory}' (nodes: {known})")
    return _node(name, hosts[name], path)


def _node(name: str, v: dict, path: Path) -> Node:
    profile = v.get("rackready_profile")
    if not profile:
        raise UserError(f"{path}: host '{name}' has no rackready_profile")
    fact = _Facts(str(name), v)
    conn = connection_facts(fact)
    return Node(
        name=str(name),
        address=conn["address"],
        profile=fact.text("rackready_profile"),
        platform=fact.text("rackready_platform", ""),
        fabric=fact.text("rackready_fabric", ""),
        user=conn["user"],
        port=conn["port"],
        key_file=conn["key_file"],
        known_hosts=conn["known_hosts"],
        sysroot=fact.text("rackready_sysroot", "/"),
        lab=bool(v.get("rackready_lab", False)),
        rdma_devices=tuple(str(d) for d in v.get("rdma_network_mlx_devices") or ()),
        validation_site=dict(v.get("rackready_validation_site") or {}),
        validation_without=tuple(str(n) for n in v.get("rackready_validation_without") or ()),
        hostname=fact.text("rackready_hostname", ""),
        gpu_serials=_serials(str(name), v.get("rackready_gpu_serials")),
        provisioned=provisioned(v, path, str(name)),
        become=conn["become"],
        jump=conn["jump"],
        proxy_command=conn["proxy_command"],
        slurm=_plain(v["rackready_slurm"]) if v.get("rackready_slurm") is not None else None,
        bmc=lambda: bmc_access(fact),
    )


def _serials(host: str, value: Any) -> tuple[str, ...]:
    """rackready_gpu_serials: a list of board serials (a person's input: one line if not)."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(s, str | int) for s in value):
        raise UserError(f"host '{host}': rackready_gpu_serials must be a list of GPU serials")
    return tuple(str(s).strip() for s in value if str(s).strip())


def provisioned(hostvars: dict, path: Path, host: str = "") -> dict:
    """PROVISIONED_VARS as the roles resolve them: inventory variables over role defaults
    (Ansible's precedence), templated by Ansible. Plain data, ready for the site file."""
    # Ansible on first use: a heavy import, kept out of every command's startup
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    loader = DataLoader()
    merged: dict = {}
    for role in PROVISIONED_VARS:
        merged.update(loader.load_from_file(str(PROJECT_ROOT / "roles" / role / "defaults"
                                                / "main.yml")) or {})
    merged.update(hostvars)
    templar = Templar(loader=loader, variables=merged)
    out: dict = {}
    for names in PROVISIONED_VARS.values():
        for name in names:
            try:
                value = templar.template(merged[name])
            except AnsibleError as exc:
                first = str(exc).strip().splitlines()[0]
                raise UserError(f"{path}: host '{host}': {name}: {first}") from None
            out[name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    """Ansible's str/int/dict subclasses as plain data for YAML and JSON."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)
