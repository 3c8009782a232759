"""SSH to nodes with paramiko, host keys always verified, as Ansible's ssh reaches them.

Known hosts come from the inventory (UserKnownHostsFile in the ssh arguments, the
lab's generated file) or the user's and system's known_hosts. A host missing from
them, or presenting a different key, is refused: there is no trust on first use.

A node behind a jump host (ProxyJump in ansible_ssh_common_args) is reached as ssh
does: a verified connection to the jump host, a direct-tcpip channel from there to
the node, and the node's own SSH session (verified too) over that channel. A
ProxyCommand runs locally and carries the session on its stdin/stdout.

Commands go through rackready.remote.runner.run_command (stdout and stderr drained
together, capped, under a deadline): this module only connects.
"""

from __future__ import annotations

import socket
from pathlib import Path

import paramiko

from rackready.errors import UserError
from rackready.site.connection import Hop
from rackready.site.inventory import Node


class NodeUnreachable(UserError):
    pass


class _Client(paramiko.SSHClient):
    """The node's client; closing it also closes the jump host's connection."""

    jump: paramiko.SSHClient | None = None

    def close(self) -> None:
        super().close()
        if self.jump is not None:
            self.jump.close()
            self.jump = None


def connect(node: Node, timeout_s: float = 15) -> paramiko.SSHClient:
    jump = None
    sock = None
    if node.jump is not None:
        hop = node.jump
        label = f"{node.name}: jump host {hop.user}@{_where(hop.address, hop.port)}"
        jump = _open(paramiko.SSHClient(), label, hop.address, hop.port, hop.user,
                     hop.key_file, hop.known_hosts, timeout_s, None)
        try:
            sock = jump.get_transport().open_channel(  # type: ignore[union-attr]
                "direct-tcpip", (node.address, node.port), ("127.0.0.1", 0),
                timeout=timeout_s)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            jump.close()
            raise NodeUnreachable(
                f"{label} could not open a channel to {_where(node.address, node.port)}: "
                f"{_why(exc)}") from None
    elif node.proxy_command:
        try:
            sock = paramiko.ProxyCommand(node.proxy_command)
        except (paramiko.SSHException, OSError) as exc:
            raise NodeUnreachable(f"{node.name}: ProxyCommand failed: {_why(exc)}") from None
    client = _Client()
    client.jump = jump
    via = f" (through the jump host {node.jump.address})" if node.jump else ""
    try:
        _open(client, f"{node.name}{via}", node.address, node.port, node.user, node.key_file,
              node.known_hosts, timeout_s, sock)
    except UserError:
        client.close()
        raise
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(5)  # notice a node that drops mid-run
    return client


def _open(client: paramiko.SSHClient, label: str, address: str, port: int, user: str,
          key_file: str | None, known_hosts: str | None, timeout_s: float,
          sock: paramiko.Channel | paramiko.ProxyCommand | None) -> paramiko.SSHClient:
    """Connect one hop; every failure is one line that names the hop (label)."""
    if known_hosts:
        path = Path(known_hosts)
        if not path.exists():
            raise UserError(f"{label}: known_hosts file {path} does not exist")
        client.load_host_keys(str(path))
    else:
        client.load_system_host_keys()  # ~/.ssh/known_hosts
        system = Path("/etc/ssh/ssh_known_hosts")
        if system.exists():
            client.load_system_host_keys(str(system))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    if key_file and not Path(key_file).exists():
        raise UserError(f"{label}: private key {key_file} does not exist")
    try:
        client.connect(
            address,
            port=port,
            username=user,
            key_filename=key_file,
            timeout=timeout_s,
            banner_timeout=timeout_s,
            auth_timeout=timeout_s,
            allow_agent=key_file is None,
            look_for_keys=key_file is None,
            sock=sock,
        )
    except paramiko.BadHostKeyException:
        raise UserError(
            f"{label}: host key CHANGED for {address}; refusing to connect "
            "(verify the node, then update known_hosts)"
        ) from None
    except paramiko.AuthenticationException as exc:
        raise NodeUnreachable(f"{label}: authentication as '{user}' failed: {_why(exc)}") \
            from None
    except paramiko.SSHException as exc:
        if "not found in known_hosts" in str(exc):
            raise UserError(
                f"{label}: {address} is not in known_hosts; refusing to connect "
                "(add its verified host key first)"
            ) from None
        raise NodeUnreachable(f"{label}: SSH failed: {_why(exc)}") from None
    except (OSError, EOFError) as exc:  # socket timeouts are OSErrors too
        raise NodeUnreachable(f"{label}: unreachable at {_where(address, port)}: {_why(exc)}") \
            from None
    return client


def _where(address: str, port: int) -> str:
    return address if port == 22 else f"{address}:{port}"


def _why(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout):
        return "timed out"
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


__all__ = ["Hop", "NodeUnreachable", "connect"]
