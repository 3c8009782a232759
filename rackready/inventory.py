"""Site inventories (inventories/<name>/): which nodes exist and what they must be.

Read through Ansible's own inventory parser, so what rackready sees is what
the playbooks see. Vaulted values are never decrypted here: validation and
reports need addresses and profiles, not secrets.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import yaml

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
    rdma_devices: tuple[str, ...] = ()  # compute ConnectX PCI addresses (rdma_network_mlx_devices)
    validation_site: dict | None = None  # rackready_validation_site: extra settings for the suite
    # rackready_validation_without: needs this host cannot have (reported not applicable)
    validation_without: tuple[str, ...] = ()
    # The role variables validation judges against, under their Ansible names, as the
    # roles see them (host/group vars over role defaults): one source for both sides.
    provisioned: dict | None = None


# Per role, the variables whose values the node must show after provisioning.
PROVISIONED_VARS = {
    "rdma_network": ("rdma_network_roce_priority", "rdma_network_roce_trust",
                     "rdma_network_roce_mtu"),
    "validation_tools": ("validation_tools_venv", "validation_tools_nccl_tests_dir",
                         "validation_tools_nccl_tests_version"),
    "nvidia_driver": ("nvidia_driver_branch", "nvidia_driver_ecc_enabled",
                      "nvidia_driver_mig_enabled", "nvidia_driver_persistence_enabled"),
    "cuda_toolkit": ("cuda_toolkit_version",),
    "nccl": ("nccl_version",),
}


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


def _hosts(name: str) -> tuple[Path, dict[str, dict]]:
    """Every host of the inventory with its variables (vaulted values stay sealed)."""
    from ansible import constants
    from ansible.errors import AnsibleError
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    path = inventory_path(name)
    _check_yaml(path)
    constants.INVENTORY_UNPARSED_IS_FAILED = True
    loader = DataLoader()
    noise = io.StringIO()  # Ansible's parser warnings; the error below says it in one line
    try:
        with contextlib.redirect_stderr(noise):
            inv = InventoryManager(loader=loader, sources=[str(path)])
            varman = VariableManager(loader=loader, inventory=inv)
            hosts = {h.name: varman.get_vars(host=h) for h in inv.get_hosts()}
    except AnsibleError as exc:
        first = str(exc).strip().splitlines()[0]
        raise UserError(f"{path}: malformed inventory: {first}") from None
    return path, dict(sorted(hosts.items()))


def hosts_in_group(name: str, group: str) -> list[str]:
    """Hosts of an inventory in one group (e.g. the `staging` host of the offline bundle)."""
    path, hosts = _hosts(name)
    return [h for h, v in hosts.items() if group in v.get("group_names", [])]


def load(name: str) -> list[Node]:
    """The GPU nodes of an inventory: every host that names a hardware profile
    (staging or mirror hosts have none and are not validated)."""
    path, hosts = _hosts(name)
    nodes = [_node(h, v, path) for h, v in hosts.items() if v.get("rackready_profile")]
    if not nodes:
        raise UserError(f"{path}: no host in the inventory has a rackready_profile")
    return nodes


def find(name: str, inventory: str) -> Node:
    path, hosts = _hosts(inventory)
    if name not in hosts:
        known = ", ".join(h for h, v in hosts.items() if v.get("rackready_profile"))
        raise UserError(f"unknown node '{name}' in inventory '{inventory}' (nodes: {known})")
    return _node(name, hosts[name], path)


def _check_yaml(path: Path) -> None:
    """YAML inventories and their group/host vars must parse; say where they do not."""
    files = [path]
    for sub in ("group_vars", "host_vars"):
        folder = path.parent / sub
        if folder.is_dir():
            files += sorted(folder.rglob("*.yml")) + sorted(folder.rglob("*.yaml"))
    for f in files:
        if f.suffix not in (".yml", ".yaml"):
            continue
        try:
            data = yaml.load(f.read_text(encoding="utf-8"), Loader=_VaultTolerantLoader)
        except UnicodeDecodeError as exc:
            raise UserError(f"{f}: malformed inventory: not UTF-8 text (byte {exc.start})") \
                from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise UserError(f"{f}:{where}: malformed inventory: {problem}") from None
        if f == path and not isinstance(data, dict):
            raise UserError(f"{f}: malformed inventory: expected a mapping with 'all:'")


class _VaultTolerantLoader(yaml.SafeLoader):
    """Safe YAML that accepts Ansible's !vault tag without decrypting it."""


_VaultTolerantLoader.add_constructor("!vault", lambda loader, node: "<vaulted>")
_VaultTolerantLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


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
        name=str(name),
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
        rdma_devices=tuple(str(d) for d in v.get("rdma_network_mlx_devices") or ()),
        validation_site=dict(v.get("rackready_validation_site") or {}),
        validation_without=tuple(str(n) for n in v.get("rackready_validation_without") or ()),
        provisioned=provisioned(v, path, str(name)),
    )


def role_default(role: str, name: str) -> str:
    """A literal role default (roles/<role>/defaults/main.yml), e.g. the venv path."""
    path = PROJECT_ROOT / "roles" / role / "defaults" / "main.yml"
    return str((yaml.safe_load(path.read_text(encoding="utf-8")) or {})[name])


def provisioned(hostvars: dict, path: Path, host: str = "") -> dict:
    """PROVISIONED_VARS as the roles resolve them: inventory variables over role defaults
    (Ansible's precedence), templated by Ansible. Plain data, ready for the site file."""
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
            # Ansible's str/int subclasses become plain data for YAML and JSON.
            out[name] = value if isinstance(value, bool) else (
                int(value) if isinstance(value, int) else str(value))
    return out
