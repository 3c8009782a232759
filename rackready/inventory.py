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
import getpass
import io
import logging
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rackready.errors import UserError

PROJECT_ROOT = Path(__file__).resolve().parents[1]
INVENTORIES = PROJECT_ROOT / "inventories"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hop:
    """A jump host (ProxyJump): reached first, the node through it."""

    address: str
    port: int
    user: str
    key_file: str | None
    known_hosts: str | None


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
    # The BMC (issue 17): resolved only when the out-of-band step needs it, so a vaulted
    # password without a vault password fails that node alone; never printed (repr=False).
    bmc: Callable[[], BmcAccess | None] | None = field(default=None, repr=False, compare=False)


# Per role, the variables whose values the node must show after provisioning.
PROVISIONED_VARS = {
    "rdma_network": ("rdma_network_roce_priority", "rdma_network_roce_trust",
                     "rdma_network_roce_mtu", "rdma_network_roce_gid_index"),
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


def _hosts(name: str, *, vault_files_needed: bool = False) -> tuple[Path, dict[str, dict]]:
    """Every host of the inventory with its variables (still untemplated).

    vault_files_needed: an encrypted vars file without a password is an error (as it
    is for ansible-playbook); otherwise it is skipped and only a needed value says so.
    """
    path = inventory_path(name)
    _check_yaml(path)
    return path, _read(path, vault_files_needed)[1]


def _read(path: Path, vault_files_needed: bool = False) -> tuple[object, dict[str, dict]]:
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


VAULT_HINT = ("set ANSIBLE_VAULT_PASSWORD_FILE or ANSIBLE_VAULT_IDENTITY_LIST, or "
              "vault_password_file in ansible.cfg")


def vault_env(inventory: str | Path) -> dict[str, str]:
    """Environment for Ansible commands on this inventory: the lab's own vault
    password file when the inventory is the lab's and none is configured."""
    from ansible import constants

    cfg = constants.config
    if cfg.get_config_value("DEFAULT_VAULT_PASSWORD_FILE") or \
            cfg.get_config_value("DEFAULT_VAULT_IDENTITY_LIST"):
        return {}
    try:
        path = Path(inventory_path(str(inventory))).resolve()
    except UserError:
        return {}
    lab_dir = (INVENTORIES / "lab").resolve()
    if not path.is_relative_to(lab_dir):
        return {}
    from rackready.lab import config as lab_config

    pw = lab_config.vault_password_file()
    return {"ANSIBLE_VAULT_PASSWORD_FILE": str(pw)} if pw.exists() else {}


def _vault_secrets(loader, path: Path) -> None:
    """Vault passwords as ansible-playbook would find them (never prompting)."""
    from ansible import constants
    from ansible.cli import CLI

    cfg = constants.config
    files = cfg.get_config_value("DEFAULT_VAULT_PASSWORD_FILE")
    ids = list(cfg.get_config_value("DEFAULT_VAULT_IDENTITY_LIST") or [])
    if not files and not ids:
        files = vault_env(path).get("ANSIBLE_VAULT_PASSWORD_FILE")
    if not files and not ids:
        return
    files = [files] if isinstance(files, str) else list(files or [])
    secrets = CLI.setup_vault_secrets(loader, vault_ids=ids, vault_password_files=files,
                                      ask_vault_pass=False, auto_prompt=False)
    loader.set_vault_secrets(secrets)


def _make_loader_class():
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.vault import is_encrypted

    class Loader(DataLoader):
        """Ansible's loader; an encrypted file without a vault password reads as empty."""

        def __init__(self) -> None:
            super().__init__()
            self.sealed: list[str] = []
            self.has_secrets = False

        def set_vault_secrets(self, vault_secrets) -> None:
            super().set_vault_secrets(vault_secrets)
            self.has_secrets = bool(vault_secrets)

        def _decrypt_if_vault_data(self, b_vault_data, b_file_name=None):
            if is_encrypted(b_vault_data) and not self.has_secrets:
                name = b_file_name.decode(errors="replace") if b_file_name else "?"
                if name not in self.sealed:
                    self.sealed.append(name)
                return b"{}", False
            return super()._decrypt_if_vault_data(b_vault_data, b_file_name)

    return Loader


def _Loader():  # noqa: N802  (a class made on first use: Ansible is imported lazily)
    global _LOADER_CLASS
    if _LOADER_CLASS is None:
        _LOADER_CLASS = _make_loader_class()
    return _LOADER_CLASS()


_LOADER_CLASS = None


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
        bmc=lambda: bmc_access(fact),
    )


def _serials(host: str, value: Any) -> tuple[str, ...]:
    """rackready_gpu_serials: a list of board serials (a person's input: one line if not)."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(s, str | int) for s in value):
        raise UserError(f"host '{host}': rackready_gpu_serials must be a list of GPU serials")
    return tuple(str(s).strip() for s in value if str(s).strip())


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


# ---------------------------------------------------------------- BMC access (issue 17)

class Secret(str):
    """A password that prints as asterisks (repr, str formatting); .reveal() gives it."""

    def __repr__(self) -> str:
        return "'********'"

    def __str__(self) -> str:
        return "********"

    def __format__(self, spec: str) -> str:
        return "********"

    def reveal(self) -> str:
        return str.__str__(self)


@dataclass(frozen=True)
class BmcAccess:
    address: str
    user: str
    password: Secret = field(repr=False)
    ca_file: str | None
    # rackready_bmc_tls_insecure_skip_verify: only for a lab bring-up, named to be seen
    insecure_skip_verify: bool = False


def bmc_access(fact: _Facts) -> BmcAccess | None:
    """The node's BMC from rackready_bmc_*; None without an address (UserError: one line)."""
    address = str(fact.get("rackready_bmc_address", "") or "")
    if not address:
        return None
    from ansible.plugins.loader import init_plugin_loader

    init_plugin_loader()  # the credentials come through lookups (env), as in Ansible
    ca = str(fact.get("rackready_bmc_ca_file", "") or "") or None
    if ca and not Path(ca).is_absolute():
        ca = str(Path(fact.v.get("inventory_dir") or PROJECT_ROOT) / ca)
    return BmcAccess(address=address, user=str(fact.get("rackready_bmc_user", "root")),
                     password=Secret(str(fact.get("rackready_bmc_password", "") or "")),
                     ca_file=ca,
                     insecure_skip_verify=bool(fact.get("rackready_bmc_tls_insecure_skip_verify",
                                                        False)))


class _Facts:
    """One host's variables, each templated as Ansible would when it is used.

    A value that is vault-encrypted (inline or in a skipped file) is an error only
    here, when it is needed; the error names the variable, never its value.
    """

    def __init__(self, host: str, v: dict) -> None:
        self.host = host
        self.v = v
        self._templar = None

    def has(self, key: str) -> bool:
        return self.v.get(key) is not None

    def get(self, key: str, default=None):
        from ansible.errors import AnsibleError

        raw = self.v.get(key)
        if raw is None:
            return default
        try:
            value = self._template(raw)
        except AnsibleError as exc:
            text = str(exc)
            if "vault" in text.lower() or (self.v.get("_rackready_sealed")
                                          and "is undefined" in text):
                sealed = self.v.get("_rackready_sealed") or ()
                where = f" (encrypted file: {sealed[0]})" if sealed else ""
                raise UserError(f"host '{self.host}': {key} needs a vault password and none "
                                f"is given{where}; {VAULT_HINT}") from None
            first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
            raise UserError(f"host '{self.host}': {key} cannot be templated: {first}") \
                from None
        return default if value is None else value

    def text(self, key: str, default: str | None = None) -> str:
        value = self.get(key, default)
        if value is None:
            raise UserError(f"host '{self.host}': {key} is not set")
        return str(value)

    def _template(self, raw):
        from ansible.parsing.yaml.objects import AnsibleVaultEncryptedUnicode

        if isinstance(raw, AnsibleVaultEncryptedUnicode):
            return str(raw)  # decrypts, or raises "no vault secrets"
        if isinstance(raw, str) and ("{{" in raw or "{%" in raw):
            if self._templar is None:
                from ansible.template import Templar

                self._templar = Templar(loader=self.v.get("_rackready_loader"),
                                        variables=self.v)
            return self._templar.template(raw, fail_on_undefined=True)
        return raw


# ssh options whose meaning rackready reproduces; the rest only go to the debug log
_SSH_KEYS = {"proxyjump": "ProxyJump", "proxycommand": "ProxyCommand",
             "userknownhostsfile": "UserKnownHostsFile",
             "stricthostkeychecking": "StrictHostKeyChecking", "identityfile": "IdentityFile",
             "port": "Port", "user": "User", "hostname": "HostName"}
_FLAG_OPTION = {"-J": "proxyjump", "-i": "identityfile", "-p": "port", "-l": "user"}
_NO_VALUE_FLAGS = set("46AaCfGgKkMNnqsTtVvXxYy")  # ssh's single-letter flags without argument


def parse_ssh_args(text: str, where: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(option, value) pairs in order (lower-case names) and the ignored arguments,
    from an ssh argument string as Ansible passes it (shlex-split)."""
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise UserError(f"{where}: cannot split the ssh arguments: {exc}") from None
    options: list[tuple[str, str]] = []
    ignored: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        flag, rest = tok[:2], tok[2:]
        if flag == "-o" or flag in _FLAG_OPTION or flag == "-F":
            if not rest:
                i += 1
                if i >= len(tokens):
                    raise UserError(f"{where}: ssh option {flag} has no value")
                rest = tokens[i]
            if flag == "-o":
                key, sep, value = rest.partition("=")
                if not sep:
                    key, _, value = rest.strip().partition(" ")
                key, value = key.strip().lower(), value.strip()
            elif flag == "-F":
                key, value = "-f", rest
            else:
                key, value = _FLAG_OPTION[flag], rest
            if key in _SSH_KEYS or key == "-f":
                options.append((key, value))
            else:
                ignored.append(f"-o {rest}" if flag == "-o" else tok)
        elif tok.startswith("-") and all(c in _NO_VALUE_FLAGS for c in tok[1:]):
            ignored.append(tok)
        elif tok.startswith("-") and len(tok) == 2 and i + 1 < len(tokens):
            ignored += [tok, tokens[i + 1]]  # a flag with an argument (-c, -m, -E, ...)
            i += 1
        else:
            ignored.append(tok)
        i += 1
    return options, ignored


def connection_facts(fact: _Facts) -> dict:
    """How Ansible's ssh connection reaches the host, reproduced for paramiko.

    Option order is Ansible's command line: ansible.cfg's ssh_args, then -o Port,
    -o IdentityFile and -o User from ansible_port / _ssh_private_key_file / _user,
    then ansible_ssh_common_args and ansible_ssh_extra_args. For ssh the first value
    of an option wins, and a -F file comes after the command line.
    """
    host = fact.host
    where = f"host '{host}'"
    pairs: list[tuple[str, str]] = []
    ignored: list[str] = []
    cfg_args = str(fact.get("ansible_ssh_args", "") or _cfg_ssh_args())
    sources = [("ssh_args", cfg_args)]
    for key, opt in (("ansible_port", "port"), ("ansible_ssh_private_key_file", "identityfile"),
                     ("ansible_user", "user")):
        if fact.has(key):
            pairs.append((opt, str(fact.get(key))))
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        sources.append((key, str(fact.get(key, "") or "")))
    for i, (label, text) in enumerate(sources):
        found, skipped = parse_ssh_args(text, f"{where}: {label}")
        if i == 0:
            pairs = found + pairs  # ssh_args come first on Ansible's command line
        else:
            pairs += found
        ignored += skipped
    if ignored:
        log.debug("%s: ssh arguments rackready does not reproduce (ignored): %s", host,
                  " ".join(ignored))
    first: dict[str, str] = {}
    for key, value in pairs:
        if key == "identityfile" and "identityfile" in first:
            continue  # ssh tries every -i; rackready uses the first
        first.setdefault(key, value)
    config_file = first.get("-f")
    address = str(fact.get("ansible_host", host))
    target_cfg = _ssh_config(config_file, address, where)
    for key in ("user", "port", "identityfile", "userknownhostsfile",
                "stricthostkeychecking", "proxyjump", "proxycommand", "hostname"):
        if key not in first and key in target_cfg:
            value = target_cfg[key]
            first[key] = value[0] if isinstance(value, list) else value
    address = first.get("hostname") or address  # ssh connects to HostName when given
    checking = fact.get("ansible_host_key_checking", None)
    if checking is None:
        from ansible import constants

        checking = constants.config.get_config_value("HOST_KEY_CHECKING")
    # refused wherever it is said, even where an earlier value would win for ssh
    said = [v.lower() for k, v in pairs if k == "stricthostkeychecking"]
    said += [str(target_cfg.get("stricthostkeychecking", "yes")).lower()]
    said += [] if _truth(checking) else ["no"]
    strict = next((v for v in said if v in ("no", "off", "accept-new")), "yes")
    if strict != "yes":
        raise UserError(f"{where}: StrictHostKeyChecking={strict} is refused: rackready "
                        "verifies every host key (give a known_hosts file instead)")
    _check_become(fact)
    user = first.get("user") or getpass.getuser()
    try:
        port = int(first.get("port", 22))
    except ValueError:
        raise UserError(f"{where}: ssh port {first.get('port')!r} is not a number") from None
    key_file = _path(first.get("identityfile"))
    known = first.get("userknownhostsfile")
    known = _path(known.split()[0]) if known else None
    jump = None
    proxy = first.get("proxycommand")
    spec = first.get("proxyjump")
    if spec and spec.lower() != "none":
        if proxy and proxy.lower() != "none":
            raise UserError(f"{where}: both ProxyJump and ProxyCommand are given (ssh refuses "
                            "that too)")
        jump = _jump(spec, where, config_file, key_file, known)
        proxy = None
    if proxy and proxy.lower() != "none":
        proxy = (proxy.replace("%%", "\0").replace("%h", address).replace("%p", str(port))
                 .replace("%r", user).replace("\0", "%"))
    else:
        proxy = None
    return {"address": address, "user": user, "port": port, "key_file": key_file,
            "known_hosts": known, "become": bool(_truth(fact.get("ansible_become", False))),
            "jump": jump, "proxy_command": proxy}


def _cfg_ssh_args() -> str:
    """The ssh connection's ssh_args: ANSIBLE_SSH_ARGS, else ansible.cfg [ssh_connection]."""
    import configparser
    import os

    from ansible import constants

    if "ANSIBLE_SSH_ARGS" in os.environ:
        return os.environ["ANSIBLE_SSH_ARGS"]
    if not constants.CONFIG_FILE:
        return ""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(constants.CONFIG_FILE)
        return parser.get("ssh_connection", "ssh_args", fallback="")
    except configparser.Error:
        return ""


def _check_become(fact: _Facts) -> None:
    if not _truth(fact.get("ansible_become", False)):
        return
    method = str(fact.get("ansible_become_method", "sudo"))
    if method != "sudo":
        raise UserError(f"host '{fact.host}': ansible_become_method={method} is not "
                        "supported by validate (only sudo)")
    user = str(fact.get("ansible_become_user", "root"))
    if user != "root":
        raise UserError(f"host '{fact.host}': ansible_become_user={user}: the suite must run "
                        "as root")


def _truth(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)


def _path(value: str | None) -> str | None:
    return str(Path(value).expanduser()) if value else None


def _ssh_config(path: str | None, host: str, where: str) -> dict:
    """What an `ssh -F file` config says for host (ssh reads no other file then)."""
    if not path:
        return {}
    import paramiko

    file = Path(path).expanduser()
    try:
        config = paramiko.SSHConfig.from_path(str(file))
    except OSError as exc:
        raise UserError(f"{where}: ssh config {file}: {exc.strerror}") from None
    return config.lookup(host)


def _jump(spec: str, where: str, config_file: str | None, key_file: str | None,
          known: str | None) -> Hop:
    """One ProxyJump hop: [user@]host[:port]. The hop's own options come from the -F
    file when one is given (what ssh passes to the jump); else the node's known_hosts
    and key are used for it too."""
    hops = [h.strip() for h in spec.split(",") if h.strip()]
    if len(hops) != 1:
        raise UserError(f"{where}: ProxyJump={spec}: {len(hops)} jump hosts; rackready "
                        "supports one")
    hop = hops[0].removeprefix("ssh://")
    user, _, rest = hop.rpartition("@")
    if rest.startswith("["):
        addr, _, port_text = rest[1:].partition("]")
        port_text = port_text.removeprefix(":")
    elif rest.count(":") == 1:
        addr, _, port_text = rest.partition(":")
    else:
        addr, port_text = rest, ""
    if not addr:
        raise UserError(f"{where}: ProxyJump={spec}: no host")
    cfg = _ssh_config(config_file, addr, where)
    try:
        port = int(port_text or cfg.get("port", 22))
    except ValueError:
        raise UserError(f"{where}: ProxyJump={spec}: port is not a number") from None
    if config_file:
        keys = cfg.get("identityfile") or []
        hop_key = _path(keys[0]) if keys else None
        hop_known = cfg.get("userknownhostsfile")
        hop_known = _path(hop_known.split()[0]) if hop_known else None
        strict = str(cfg.get("stricthostkeychecking", "yes")).lower()
        if strict in ("no", "off", "accept-new"):
            raise UserError(f"{where}: the jump host's StrictHostKeyChecking={strict} "
                            f"({config_file}) is refused: rackready verifies every host key")
    else:
        hop_key, hop_known = key_file, known
    return Hop(address=cfg.get("hostname", addr), port=port,
               user=user or cfg.get("user") or getpass.getuser(),
               key_file=hop_key, known_hosts=hop_known)
