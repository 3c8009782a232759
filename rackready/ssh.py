"""SSH to nodes with paramiko, host keys always verified.

Known hosts come from the inventory (the lab's generated file) or the user's
and system's known_hosts. A host missing from them, or presenting a different
key, is refused: there is no trust on first use.
"""

from __future__ import annotations

from pathlib import Path

import paramiko

from rackready.errors import UserError
from rackready.inventory import Node


class NodeUnreachable(UserError):
    pass


def connect(node: Node, timeout_s: float = 15) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    if node.known_hosts:
        path = Path(node.known_hosts)
        if not path.exists():
            raise UserError(f"{node.name}: known_hosts file {path} does not exist")
        client.load_host_keys(str(path))
    else:
        client.load_system_host_keys()  # ~/.ssh/known_hosts
        system = Path("/etc/ssh/ssh_known_hosts")
        if system.exists():
            client.load_system_host_keys(str(system))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            node.address,
            port=node.port,
            username=node.user,
            key_filename=node.key_file,
            timeout=timeout_s,
            banner_timeout=timeout_s,
            auth_timeout=timeout_s,
            allow_agent=node.key_file is None,
            look_for_keys=node.key_file is None,
        )
    except paramiko.BadHostKeyException:
        raise UserError(
            f"{node.name}: host key CHANGED for {node.address}; refusing to connect "
            "(verify the node, then update known_hosts)"
        ) from None
    except paramiko.SSHException as exc:
        if "not found in known_hosts" in str(exc):
            raise UserError(
                f"{node.name}: {node.address} is not in known_hosts; refusing to connect "
                "(add its verified host key first)"
            ) from None
        raise NodeUnreachable(f"{node.name}: SSH failed: {exc}") from None
    except OSError as exc:  # socket timeouts are OSErrors too
        raise NodeUnreachable(f"{node.name}: unreachable at {node.address}: {exc}") from None
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(5)  # notice a node that drops mid-run
    return client


def run(client: paramiko.SSHClient, command: str, timeout_s: float = 120) -> tuple[int, str, str]:
    _, stdout, stderr = client.exec_command(command, timeout=timeout_s)
    out = stdout.read().decode(errors="replace")
    err = stderr.read().decode(errors="replace")
    return stdout.channel.recv_exit_status(), out, err
