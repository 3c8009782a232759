"""One small file written on a node atomically, through the session's bounded commands.

For what the controller leaves on a node after a run (its verdict for node_exporter,
rackready.steps.verdict_metrics): the folder made (`mkdir -p`), the file uploaded beside
its target and renamed over it (rackready.remote.ship: staged in /tmp and installed with
`sudo -n` where the node's user needs root), every command capped and under a time limit
like the suite's preparation. Raises SessionError, one line, for anything the node or the
network does.
"""

from __future__ import annotations

import posixpath
import shlex

import paramiko

from rackready.remote.records import Limits, SessionError
from rackready.remote.runner import Fail, lost
from rackready.remote.shell import command_failed
from rackready.remote.ship import quiet_shipper

# a few KiB to a few hundred: seconds, not the suite's hours
PUT_LIMITS = Limits(deadline_s=60, command_s=30, idle_s=30)


def put_file(client: paramiko.SSHClient, data: bytes, dest: str, *, become: bool,
             limits: Limits = PUT_LIMITS) -> None:
    """Write data to dest (an absolute path) on the node, replacing it at once, mode 0644."""
    if not posixpath.isabs(dest) or dest.endswith("/"):
        raise ValueError(f"{dest!r} is not an absolute file path")
    folder = posixpath.dirname(dest)
    shipper = quiet_shipper(client, limits, become)
    try:
        what = f"creating {folder}"
        rc, _, err = shipper.shell.exec(f"umask 022; mkdir -p -- {shlex.quote(folder)}", what)
        if rc:
            raise Fail(command_failed(what, rc, err))
        shipper.put(data, dest)
    except Fail as exc:
        raise SessionError(str(exc)) from None
    except (OSError, EOFError, paramiko.SSHException) as exc:
        raise SessionError(lost(exc)) from None
    finally:
        shipper.cleanup()  # the staging folder of a become upload; never raises
