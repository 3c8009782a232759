"""Bounded remote commands: stdout and stderr pumped together, capped, under a deadline
and an idle timeout; the one place that knows about `sudo -n` (build_remote_command)."""

from __future__ import annotations

import select
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass

import paramiko

from rackready.sanitize import one_line

EXIT_GRACE_S = 2.0  # after the exit status, how long to wait for an EOF that may never come

CHUNK = 1 << 16

_TAIL = 4 << 10  # the end of a capped stream kept beside its head (its last error line)


class Fail(Exception):
    """Ends the session with this one-line problem."""


class Stop(Exception):
    """The suite must be stopped (cap or time limit); the message is the problem line."""


def build_remote_command(script: str, *, become: bool = False) -> str:
    """The command line for a POSIX sh script on the node; the one place for `sudo -n`.

    Always `sh -c`, so the user's login shell (fish, zsh) does not matter; LC_ALL=C so
    error messages are the ones parsed here.
    """
    body = f"export LC_ALL=C; {script}"
    if become:
        return f"sudo -n -- sh -c {shlex.quote(body)}"
    return f"sh -c {shlex.quote(body)}"


@dataclass
class CommandResult:
    """One bounded remote command (run_command)."""

    rc: int | None  # its exit status; None when it was stopped or the node gave none
    out: str  # stdout, at most the cap (decoded, bad UTF-8 replaced)
    err: str  # stderr: its first bytes up to the cap, then its last few KiB
    problem: str = ""  # "" or the one cap or time limit that was hit


class _Capture:
    """A stream kept up to `cap` bytes; past it, only its last _TAIL bytes and a count."""

    def __init__(self, cap: int, name: str, stop: bool) -> None:
        self.cap, self.name, self.stop = cap, name, stop
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def feed(self, data: bytes) -> None:
        room = self.cap - len(self.head)
        if len(data) > room and self.stop:
            raise Stop(f"sent more than {size_text(self.cap)} on {self.name}")
        self.head += data[: max(0, room)]
        rest = data[max(0, room):]
        if rest:
            self.dropped += len(rest)
            self.tail = (self.tail + rest)[-_TAIL:]

    def text(self) -> str:
        kept = self.head.decode(errors="replace")
        if not self.dropped:
            return kept
        return (f"{kept}\n[rackready: {self.dropped} bytes of {self.name} over the cap of "
                f"{size_text(self.cap)} not kept; its end follows]\n"
                + self.tail.decode(errors="replace"))


def run_command(client: paramiko.SSHClient, command: str, *, timeout_s: float, idle_s: float,
                max_stdout: int, max_stderr: int) -> CommandResult:
    """Run one command line on a node, bounded as the suite is: stdout and stderr drained
    together (a full stderr window never hangs both sides), stdout over max_stdout stops
    it, stderr over max_stderr is dropped past the cap (its end kept), and it is stopped
    after timeout_s in all or idle_s without a byte. Channel errors propagate (OSError,
    EOFError, paramiko.SSHException): the caller says which node was lost."""
    transport = client.get_transport()
    if transport is None or not transport.is_active():
        raise EOFError("the SSH transport is closed")
    channel = transport.open_session(timeout=min(timeout_s, 30))
    out = _Capture(max_stdout, "stdout", stop=True)
    err = _Capture(max_stderr, "stderr", stop=False)
    problem = ""
    try:
        channel.exec_command(command)
        pump(channel, out.feed, err.feed, time.monotonic() + timeout_s, idle_s,
              f"no end within {timeout_s:g} s")
        rc = exit_status(channel)
    except Stop as exc:
        rc, problem = None, str(exc)
    finally:
        channel.close()
    if not problem and err.dropped:
        problem = f"sent more than {size_text(max_stderr)} on stderr ({err.dropped} bytes not kept)"
    elif not problem and rc is None:
        problem = "the node closed the command without an exit status"
    return CommandResult(rc, out.text(), err.text(), problem)


def pump(channel: paramiko.Channel, on_out: Callable[[bytes], None],
          on_err: Callable[[bytes], None], deadline: float, idle_s: float,
          deadline_msg: str) -> None:
    """Drain stdout and stderr together until the command ends (never one alone: a node
    that fills one stream's window while we wait on the other would hang both sides)."""
    last = time.monotonic()
    exited_at: float | None = None
    while True:
        got = False
        if channel.recv_ready():
            data = channel.recv(CHUNK)
            if data:
                got = True
                on_out(data)
        if channel.recv_stderr_ready():
            data = channel.recv_stderr(CHUNK)
            if data:
                got = True
                on_err(data)
        now = time.monotonic()
        if now >= deadline:  # checked even while data flows: a flooding node ends too
            raise Stop(deadline_msg)
        if got:
            last = now
            continue
        if channel.exit_status_ready():
            if channel.eof_received or channel.closed:
                return
            exited_at = exited_at or now
            if now - exited_at > EXIT_GRACE_S:  # a leftover child still holds stdout open
                return
        elif channel.closed or channel.eof_received and not _transport_active(channel):
            return  # the caller sees there is no exit status
        if now - last >= idle_s:
            raise Stop(f"stalled: no output for {idle_s:g} s")
        wait = min(0.2, max(0.01, deadline - now), max(0.01, idle_s - (now - last)))
        if channel.eof_received:
            time.sleep(min(wait, 0.05))  # the channel's pipe stays readable after EOF
        else:
            select.select([channel], [], [], wait)


def exit_status(channel: paramiko.Channel) -> int | None:
    """The command's exit status; None when the channel closed without one (paramiko
    then reports -1)."""
    if not channel.exit_status_ready():
        return None
    rc = channel.recv_exit_status()
    return rc if rc >= 0 else None


def _transport_active(channel: paramiko.Channel) -> bool:
    transport = channel.get_transport()
    return transport is not None and transport.is_active()


def lost(exc: BaseException) -> str:
    text = one_line(str(exc)) or type(exc).__name__
    return f"connection lost: {text}"


def size_text(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"
