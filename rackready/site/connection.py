"""How Ansible's ssh connection reaches a host, reproduced for paramiko: the ssh
arguments Ansible passes (ProxyJump, ProxyCommand, known_hosts, -F), become."""

from __future__ import annotations

import configparser
import getpass
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

import paramiko

from rackready.errors import UserError
from rackready.site.paths import log
from rackready.site.vault import _Facts


@dataclass(frozen=True)
class Hop:
    """A jump host (ProxyJump): reached first, the node through it."""

    address: str
    port: int
    user: str
    key_file: str | None
    known_hosts: str | None


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
        # Ansible on first use: a heavy import, kept out of every command's startup
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
    # Ansible on first use: a heavy import, kept out of every command's startup
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
