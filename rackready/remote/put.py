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

from rackready.remote.runner import _Fail, _lost
from rackready.remote.session import Limits, SessionError, _Session

# a few KiB to a few hundred: seconds, not the suite's hours
PUT_LIMITS = Limits(deadline_s=60, command_s=30, idle_s=30)


def put_file(client: paramiko.SSHClient, data: bytes, dest: str, *, become: bool,
             limits: Limits = PUT_LIMITS) -> None:
    """Write data to dest (an absolute path) on the node, replacing it at once, mode 0644."""
    if not posixpath.isabs(dest) or dest.endswith("/"):
        raise ValueError(f"{dest!r} is not an absolute file path")
    folder = posixpath.dirname(dest)
    session = _Session(client, "", None, limits, lambda ev: None, lambda text: None, become)
    try:
        what = f"creating {folder}"
        rc, _, err = session._exec(f"umask 022; mkdir -p -- {shlex.quote(folder)}", what)
        if rc:
            raise _Fail(session._command_failed(what, rc, err))
        session._put(data, dest)
    except _Fail as exc:
        raise SessionError(str(exc)) from None
    except (OSError, EOFError, paramiko.SSHException) as exc:
        raise SessionError(_lost(exc)) from None
    finally:
        session._cleanup()  # the staging folder of a become upload; never raises
