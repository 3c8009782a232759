"""A site's Slurm as the controller reaches it: `rackready_slurm` in the inventory.

    rackready_slurm:
      submit_host: login01.example     # a host with the Slurm client (srun, scontrol)
      partition: gpu                   # optional; --partition overrides it
      user: ops                        # optional; default: the nodes' ansible_user
      port: 22                         # optional
      become: true                     # optional: scontrol's admin commands through sudo -n
                                       # (drain, resume, the reservation); default: the nodes'
      pending_s: 45                    # optional: how long a job may wait to start before it
                                       # is cancelled as the scheduler's state (never drained)

The controller logs in to the submit host with the nodes' own key, known_hosts and jump
host (one site, one trust): host keys are verified as for every node. Jobs run as that
user; the suite inside them becomes root on the node as over SSH.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from rackready.errors import UserError
from rackready.site.inventory import Node

_KEYS = {"submit_host", "partition", "user", "port", "become", "pending_s"}
PENDING_S = 45.0  # a job still pending this long after submission never started
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class SlurmSite:
    submit: Node  # the submit host, reached as the nodes are
    partition: str
    admin_become: bool
    pending_s: float = PENDING_S


def settings(nodes: list[Node], partition: str | None = None) -> SlurmSite:
    """The one rackready_slurm every node shares; a mistake is one line."""
    given = [n.slurm for n in nodes]
    if not nodes or any(g is None for g in given):
        missing = [n.name for n, g in zip(nodes, given, strict=True) if g is None]
        raise UserError("--via slurm: rackready_slurm is not set for "
                        f"{', '.join(missing) or 'any node'} (see docs/slurm.md)")
    if any(g != given[0] for g in given):
        raise UserError("--via slurm: the nodes' rackready_slurm differ; one run uses one "
                        "Slurm (set it in group_vars/all)")
    s = given[0]
    assert s is not None
    if not isinstance(s, dict) or set(s) - _KEYS:
        extra = sorted(set(s) - _KEYS) if isinstance(s, dict) else []
        raise UserError(f"rackready_slurm: unknown key(s) {', '.join(extra)} (known: "
                        f"{', '.join(sorted(_KEYS))})" if extra
                        else "rackready_slurm must be a mapping")
    host = str(s.get("submit_host") or "")
    if not host or not _NAME.fullmatch(host):
        raise UserError(f"rackready_slurm.submit_host must be a host name or address, "
                        f"not '{host}'")
    part = partition if partition is not None else str(s.get("partition") or "")
    if part and not _NAME.fullmatch(part):
        raise UserError(f"--partition must be a Slurm partition name, not '{part}'")
    port = s.get("port", 22)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise UserError(f"rackready_slurm.port must be a port number, not '{port}'")
    user = str(s.get("user") or nodes[0].user)
    if not _NAME.fullmatch(user):
        raise UserError(f"rackready_slurm.user must be a user name, not '{user}'")
    become = s.get("become", nodes[0].become)
    if not isinstance(become, bool):
        raise UserError("rackready_slurm.become must be true or false")
    pending = s.get("pending_s", PENDING_S)
    if isinstance(pending, bool) or not isinstance(pending, int | float) \
            or not 5 <= pending <= 86400:
        raise UserError(f"rackready_slurm.pending_s must be seconds from 5 to 86400, "
                        f"not '{pending}'")
    submit = dataclasses.replace(nodes[0], name=f"Slurm submit host {host}", address=host,
                                 port=port, user=user, become=become, slurm=None, bmc=None)
    return SlurmSite(submit=submit, partition=part, admin_become=become,
                     pending_s=float(pending))
