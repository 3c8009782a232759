"""Short commands on a node within the session's limits: each pumped (stdout and stderr
together, capped) and under the session's deadline unless told otherwise."""

from __future__ import annotations

import time
from collections.abc import Callable

import paramiko

from rackready.remote.records import Limits
from rackready.remote.runner import Fail, Stop, build_remote_command, exit_status, pump
from rackready.sanitize import one_line

_OUTPUT_CAP = 64 << 10  # what a preparation command may print


def command_failed(what: str, rc: int, err: str) -> str:
    """The problem line of a command that exited non-zero: its last stderr line."""
    reason = one_line(err.strip().splitlines()[-1]) if err.strip() else f"exit status {rc}"
    return f"{what} failed: {reason}"


class NodeShell:
    """One node's SSH client, the session's limits and deadline, and whether to `sudo -n`."""

    def __init__(self, client: paramiko.SSHClient, limits: Limits, become: bool,
                 deadline: float) -> None:
        self.client = client
        self.limits = limits
        self.become = become
        self.deadline = deadline  # time.monotonic() when the whole session must end

    def open_channel(self, command: str,
                     client: paramiko.SSHClient | None = None) -> paramiko.Channel:
        transport = (client or self.client).get_transport()
        if transport is None or not transport.is_active():
            raise EOFError("the SSH transport is closed")
        channel = transport.open_session(timeout=self.limits.command_s)
        channel.exec_command(command)
        return channel

    def exec(self, script: str, what: str, *, become: bool | None = None,
             timeout: float | None = None, deadline_free: bool = False) -> tuple[int, str, str]:
        """Run a short script; its exit status, stdout and stderr (each capped)."""
        command = build_remote_command(script, become=self.become if become is None else become)
        limit = timeout or self.limits.command_s
        end = time.monotonic() + limit
        if not deadline_free:
            end = min(end, self.deadline)
        out, err = bytearray(), bytearray()

        def keep(buf: bytearray) -> Callable[[bytes], None]:
            return lambda data: buf.extend(data[: max(0, _OUTPUT_CAP - len(buf))])

        channel = self.open_channel(command)
        try:
            late = (f"deadline of {self.limits.deadline_s:g} s passed" if end == self.deadline
                    else f"no answer within {limit:g} s")
            pump(channel, keep(out), keep(err), end, limit, late)
        except Stop as exc:
            raise Fail(f"{what}: {exc}") from None
        finally:
            channel.close()
        rc = exit_status(channel)
        if rc is None:
            raise EOFError(f"the node closed the session while {what}")
        return (rc, out.decode(errors="replace"),
                err.decode(errors="replace"))
