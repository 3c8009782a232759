"""The controller's session with one node over SSH: the node is untrusted input.

API (what rackready.steps.validate calls, once per node, from its thread pool):

    outcome = run_on_node(
        client,                      # a connected paramiko.SSHClient (rackready.remote.ssh.connect)
        node.name,
        bundle=bundle.build(),       # (tar.gz bytes, sha256 of the uncompressed tar)
        site_yaml=yaml.safe_dump(site),
        command_args=[python, "-m", "validation", "run", "--profile", P, "--level", L, ...],
        env={"RACKREADY_BUNDLE_SHA256": digest, "PYTHONUNBUFFERED": "1"},
        remote_base="/var/lib/rackready",
        run_id=run_id,               # [A-Za-z0-9._-], unique per run
        files=NodeFiles(events=..., log=..., result=..., artifacts=...),
        limits=Limits.for_level(level),
        on_event=lambda ev: board.event(node.name, ev),   # only well-formed events
        on_status=lambda text: board.update(node.name, text),
        resume=False, become=False)  # or python="/opt/.../python" + its arguments alone
    outcome.problem   # "" when the run ended normally, else ONE line saying why not

    folder = ship_bundle(client, bundle, remote_base=..., run_id=...)  # the verified,
                                    # unpacked bundle for jobs outside the suite (SessionError)
    res = run_command(client, command, timeout_s=..., idle_s=..., max_stdout=...,
                      max_stderr=...)  # any other remote command, bounded like the suite

run_on_node never raises for anything the node or the network does: a node that
sends garbage, stalls, floods, lists hostile file names or drops the connection
ends with a SessionOutcome whose problem line says so. ValueError only for
arguments the caller got wrong (a run id with a "/", a digest that is not hex).

Layout on the node (R = {remote_base}/runs/{run_id}, created exclusively):

    {remote_base}/bundle/{digest}.tar.gz   the shipped bundle, uploaded once per digest;
                                           re-verified by sha256 before every run
    {remote_base}/suite.lock               flock: one suite per node at a time
    R/bundle.XXXXXX/                       the verified bundle, unpacked fresh; the suite
                                           runs from here
    R/site.yml  R/pgid                     the suite's site facts; its process group id
    R/out/                                 the suite's --out: result.json, artifacts/

The command run is command_args + ["--out", R/out, "--site", R/site.yml], started
under `flock -n` and `setsid` (its own process group, so a deadline or a stall
kills everything it started, over a second channel). Every remote command goes
through build_remote_command, the one place that knows about `sudo -n` (become).
resume=True continues in an existing R (the caller adds "--resume" to command_args);
otherwise an existing R fails the node. The node needs sh, coreutils, gzip, tar and
util-linux (flock, setsid): all in a Debian base system.

After a run that ended by itself, problem names, in this order: no result.json,
a refused file, malformed event lines. A stopped run (deadline, stall, a cap) keeps
that reason, and what the node left is still fetched.

Caps and time limits are the fields of Limits (docs/reliability.md lists them).
"""

from __future__ import annotations

import codecs
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko

from rackready.remote.events import _EventSink
from rackready.remote.fetch import (
    _Fetching,
)
from rackready.remote.result_shape import CAPS
from rackready.remote.runner import (
    _exit_status,
    _Fail,
    _lost,
    _pump,
    _size,
    _Stop,
    build_remote_command,
)
from rackready.remote.ship import (
    _ENV_KEY,
    LOCK_HELD_RC,
    _check_args,
    _Shipping,
    build_suite_script,
)
from rackready.remote.slurm import SlurmLaunch
from rackready.sanitize import one_line, strip_control

# Whole-session deadline per validation level (the suite's own check timeouts sit inside).
LEVEL_DEADLINES: dict[str, float] = {"quick": 600.0, "standard": 1800.0, "burnin": 12 * 3600.0}

# Where the controller keeps its bundles and runs on a node (the validate and rack steps)
NODE_BASE = "/var/lib/rackready"
_OUTPUT_CAP = 64 << 10  # what a preparation command may print

_NOTES_PER_KIND = 20  # notes of one kind about the node's output logged; the rest counted


@dataclass(frozen=True)
class Limits:
    """Every cap on what one node may send, and every time limit of its session."""

    deadline_s: float  # preparing + running the suite (LEVEL_DEADLINES)
    idle_s: float = 300  # no byte on stdout/stderr this long -> stalled
    max_line_bytes: int = 1 << 20  # one event line; longer lines are dropped and counted
    max_events: int = CAPS.events
    max_stream_bytes: int = 256 << 20  # all of stdout
    max_stderr_bytes: int = 8 << 20  # node output kept in node.log; the rest counted, dropped
    max_file_bytes: int = 64 << 20  # one fetched file (result.json too)
    max_total_bytes: int = 512 << 20  # all fetched files of one node
    max_files: int = 5000  # entries listed under artifacts/
    fetch_s: float = 600  # fetching result.json and artifacts
    command_s: float = 120  # one preparation command or upload
    kill_grace_s: float = 10  # between SIGTERM and SIGKILL of the suite's process group

    @classmethod
    def for_level(cls, level: str, **overrides: Any) -> Limits:
        return cls(deadline_s=LEVEL_DEADLINES[level], **overrides)


@dataclass
class NodeFiles:
    """Where the session writes on the controller (chosen by the run-directory module)."""

    events: Path  # appended: every well-formed event line, as the node sent it
    log: Path  # appended: the commands run, stderr and non-event stdout (cleaned, capped)
    result: Path  # result.json, written only when fetched whole
    artifacts: Path  # the artifacts/ tree; nothing is written outside it


@dataclass
class SessionOutcome:
    rc: int | None  # the suite's exit status; None when it was stopped or never ran
    problem: str  # "" when the run ended normally; else one line
    events: int = 0
    bad_lines: int = 0  # malformed or over-long event lines (logged, never passed on)
    fetched: list[str] = field(default_factory=list)  # "result.json", "artifacts/a/b"
    refused: list[str] = field(default_factory=list)  # "'name': why", one per refusal
    result_fetched: bool = False
    remote_dir: str = ""  # R on the node
    dropped_log_bytes: int = 0  # node output over max_stderr_bytes
    shipped: bool = False  # the bundle was uploaded in this session
    duration_s: float = 0.0


def run_on_node(client: paramiko.SSHClient, node_name: str, *, bundle: tuple[bytes, str],
                site_yaml: str, command_args: list[str], env: dict[str, str],
                remote_base: str, run_id: str, files: NodeFiles, limits: Limits,
                on_event: Callable[[dict], None], on_status: Callable[[str], None],
                resume: bool = False, become: bool = False,
                python: str | None = None, launch: SlurmLaunch | None = None) -> SessionOutcome:
    """Ship, verify, run and fetch on one node; see the module docstring.

    python, when given, is the program and command_args its arguments. launch: the suite
    runs as a Slurm job (rackready.remote.slurm) instead of in the node's SSH session.
    """
    _check_args(bundle[1], run_id, remote_base)
    args = [python, *command_args] if python else list(command_args)
    for key in env:
        if not _ENV_KEY.fullmatch(key):
            raise ValueError(f"environment variable name {key!r} is not valid")
    if not args:
        raise ValueError("command_args is empty")
    if "--resume" in args and not resume:
        raise ValueError("command_args has --resume: pass resume=True (the run folder exists)")
    session = _Session(client, node_name, files, limits, on_event, on_status, become)
    session.launch = launch
    return session.run(bundle[0], bundle[1], site_yaml, args, env,
                       remote_base.rstrip("/") or "/", run_id, resume)


class SessionError(Exception):
    """One line: why ship_bundle could not install the bundle."""


def ship_bundle(client: paramiko.SSHClient, bundle: tuple[bytes, str], *, remote_base: str,
                run_id: str, limits: Limits | None = None, become: bool = False) -> str:
    """Make R, verify the bundle (shipping it when needed) and unpack it into R; returns
    the unpacked folder. For jobs outside the suite (e.g. a multi-node workload test)."""
    _check_args(bundle[1], run_id, remote_base)
    base = remote_base.rstrip("/") or "/"
    rdir = f"{base}/runs/{run_id}"
    session = _Session(client, "", None, limits or Limits.for_level("quick"),
                       lambda ev: None, lambda text: None, become)
    try:
        session._prepare(base, rdir, resume=False)
        return session._bundle(bundle[0], bundle[1], base, rdir)
    except _Fail as exc:
        raise SessionError(str(exc)) from None
    except (OSError, EOFError, paramiko.SSHException) as exc:
        raise SessionError(_lost(exc)) from None
    finally:
        session._cleanup()


class _Session(_Shipping, _Fetching):
    def __init__(self, client: paramiko.SSHClient, node_name: str, files: NodeFiles | None,
                 limits: Limits, on_event: Callable[[dict], None],
                 on_status: Callable[[str], None], become: bool) -> None:
        self.client = client
        self.node = node_name
        self.files = files
        self.limits = limits
        self.on_event = on_event
        self.on_status = on_status
        self.become = become
        self.out = SessionOutcome(rc=None, problem="")
        self.staging: str | None = None  # become: the user's upload folder under /tmp
        self.log_fh: Any = None
        self.log_budget = limits.max_stderr_bytes
        self.start = time.monotonic()
        self.deadline = self.start + limits.deadline_s
        self.last_err = ""  # the node's last stderr line, for the problem line
        self._err_decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.fetch_end = 0.0
        self.total = 0  # bytes fetched
        self.entries = 0  # entries listed under artifacts/
        self.unlogged: dict[str, int] = {}  # notes past _NOTES_PER_KIND, by kind
        self.launch: SlurmLaunch | None = None

    # -- the session -------------------------------------------------------------------

    def run(self, payload: bytes, digest: str, site_yaml: str, command_args: list[str],
            env: dict[str, str], base: str, run_id: str, resume: bool) -> SessionOutcome:
        assert self.files is not None
        rdir = f"{base}/runs/{run_id}"
        self.out.remote_dir = rdir
        try:
            self.files.log.parent.mkdir(parents=True, exist_ok=True)
            self.log_fh = self.files.log.open("ab")
        except OSError as exc:
            self.out.problem = f"cannot write {self.files.log} on the controller: {exc.strerror}"
            return self.out
        try:
            try:
                self._prepare(base, rdir, resume)
                bundle_dir = self._bundle(payload, digest, base, rdir)
                self._put(site_yaml.encode(), f"{rdir}/site.yml")
                script = build_suite_script(
                    command_args=command_args, env=env, bundle_dir=bundle_dir,
                    lock=f"{base}/suite.lock", pgid_file=f"{rdir}/pgid", out=f"{rdir}/out",
                    site=f"{rdir}/site.yml")
                stopped = self._run_suite(script, rdir)
            except _Fail as exc:
                self.out.problem = str(exc)
                return self.out
            except (OSError, EOFError, paramiko.SSHException) as exc:
                self.out.problem = _lost(exc)
                return self.out
            try:
                self.on_status("fetching results")
                self._fetch(f"{rdir}/out")
            except _Fail as exc:
                stopped = stopped or str(exc)
            except (OSError, EOFError, paramiko.SSHException) as exc:
                stopped = stopped or _lost(exc) + " while fetching results"
            self.out.problem = stopped or self._ending_problem()
            return self.out
        finally:
            self._cleanup()
            self.out.duration_s = round(time.monotonic() - self.start, 3)
            if self.out.problem:
                self._note(f"problem: {self.out.problem}")
            self._note_unlogged()
            self._note_dropped()
            self.log_fh.close()

    def _ending_problem(self) -> str:
        """After a run that ended by itself: what is still wrong, most important first."""
        o = self.out
        if not o.result_fetched and self.launch is not None:
            slurm = self.launch.problem()
            if slurm:
                return f"no result.json: {slurm}"
        if not o.result_fetched:
            why = "" if o.rc == 0 else f": {self.last_err}" if self.last_err else ""
            return f"no result.json (validation exited {o.rc}){why}"
        if o.refused:
            more = f" (and {len(o.refused) - 1} more)" if len(o.refused) > 1 else ""
            return f"refused artifact {o.refused[0]}{more}"
        if o.bad_lines:
            return f"sent {o.bad_lines} malformed event line{'s' * (o.bad_lines != 1)}"
        return ""

    # -- preparation ---------------------------------------------------------------------

    # -- running the suite ---------------------------------------------------------------

    def _run_suite(self, script: str, rdir: str) -> str:
        """Run and stream; returns the problem line when the suite had to be stopped."""
        command = build_remote_command(script, become=self.become)
        client = self.client
        if self.launch is not None:  # the same command, as a Slurm job of its own
            command, client = self.launch.command(command), self.launch.host.client
        self._note(f"$ {command}")
        self.on_status("starting" if self.launch is None else "submitting to Slurm")
        sink = _EventSink(self)
        channel = self._open_channel(command, client)
        stopped = ""
        try:
            _pump(channel, sink.feed, self._stderr, self.deadline, self.limits.idle_s,
                  f"deadline of {self.limits.deadline_s:g} s passed")
            sink.finish()
        except _Stop as exc:
            stopped = str(exc)
        finally:
            sink.close()
        if stopped:
            self.on_status(f"stopping: {stopped}")
            self._kill(f"{rdir}/pgid")
            if self.launch is not None:
                self.launch.stop()
            channel.close()
            return stopped
        self.out.rc = _exit_status(channel)
        channel.close()
        if self.out.rc is None:
            raise EOFError("the node closed the session without an exit status")
        if self.out.rc == LOCK_HELD_RC and not self._exists(f"{rdir}/pgid"):
            raise _Fail("another validation run holds the node's lock")
        return ""

    def _stderr(self, data: bytes) -> None:
        text = self._err_decoder.decode(data)
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if lines:
            self.last_err = one_line(lines[-1])
        if self.launch is not None:
            for line in lines:
                status = self.launch.stderr_line(line.strip())
                if status:
                    self.on_status(status)
        self._log_text(text)

    def _kill(self, pgid_file: str) -> None:
        """SIGTERM the suite's process group, SIGKILL after the grace period."""
        q = shlex.quote
        ticks = max(1, int(self.limits.kill_grace_s * 10))
        script = (
            f"p=$(cat -- {q(pgid_file)} 2>/dev/null); "
            "case $p in ''|*[!0-9]*) exit 4;; esac; [ \"$p\" -gt 1 ] || exit 4; "
            # zombies (an init that does not reap, in containers) are not alive
            "alive() { kill -0 -\"$p\" 2>/dev/null || return 1; "
            "command -v ps >/dev/null 2>&1 || return 0; "
            "ps -o stat= --sid \"$p\" 2>/dev/null | grep -qv '^Z'; }; "
            "kill -TERM -\"$p\" 2>/dev/null || exit 0; i=0; "
            "while alive; do "
            f"[ $i -ge {ticks} ] && {{ kill -KILL -\"$p\" 2>/dev/null; exit 5; }}; "
            "sleep 0.1; i=$((i+1)); done; exit 0")
        try:
            rc, _, err = self._exec(script, "stopping the suite", timeout=self.limits.kill_grace_s
                                    + self.limits.command_s, deadline_free=True)
        except (_Fail, OSError, EOFError, paramiko.SSHException) as exc:
            self._note(f"could not stop the suite on the node: {one_line(str(exc))}")
            return
        self._note({0: "suite's process group stopped (SIGTERM)",
                    4: "no process group recorded: the suite had not started",
                    5: "suite's process group killed (SIGKILL after the grace period)"}.get(
            rc, f"stopping the suite failed (exit {rc}): {one_line(err)}"))

    def _exists(self, path: str) -> bool:
        rc, _, _ = self._exec(f"[ -e {shlex.quote(path)} ]", "checking the run", deadline_free=True)
        return rc == 0

    # -- remote commands -----------------------------------------------------------------

    def _open_channel(self, command: str,
                      client: paramiko.SSHClient | None = None) -> paramiko.Channel:
        transport = (client or self.client).get_transport()
        if transport is None or not transport.is_active():
            raise EOFError("the SSH transport is closed")
        channel = transport.open_session(timeout=self.limits.command_s)
        channel.exec_command(command)
        return channel

    def _exec(self, script: str, what: str, *, become: bool | None = None,
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

        channel = self._open_channel(command)
        try:
            late = (f"deadline of {self.limits.deadline_s:g} s passed" if end == self.deadline
                    else f"no answer within {limit:g} s")
            _pump(channel, keep(out), keep(err), end, limit, late)
        except _Stop as exc:
            raise _Fail(f"{what}: {exc}") from None
        finally:
            channel.close()
        rc = _exit_status(channel)
        if rc is None:
            raise EOFError(f"the node closed the session while {what}")
        return (rc, out.decode(errors="replace"),
                err.decode(errors="replace"))

    def _command_failed(self, what: str, rc: int, err: str) -> str:
        reason = one_line(err.strip().splitlines()[-1]) if err.strip() else f"exit status {rc}"
        return f"{what} failed: {reason}"

    # -- fetching ------------------------------------------------------------------------

    # -- node.log ------------------------------------------------------------------------

    def _note(self, text: str) -> None:
        """A line of our own in node.log (not counted against the node's budget)."""
        if self.log_fh is not None:
            self.log_fh.write(f"[rackready] {strip_control(text)}\n".encode())
            self.log_fh.flush()

    def _note_some(self, kind: str, text: str) -> None:
        """A note the node can cause once per line it sends: the first few of each kind
        are logged, the rest counted (a flood of them must not grow node.log unbounded)."""
        seen = self.unlogged.get(kind, -_NOTES_PER_KIND)
        self.unlogged[kind] = seen + 1
        if seen < 0:
            self._note(text)

    def _note_unlogged(self) -> None:
        for kind, n in self.unlogged.items():
            if n > 0:
                self._note(f"{n} more {kind} not logged (the first {_NOTES_PER_KIND} are)")

    def _log_text(self, text: str) -> None:
        """Node output into node.log: control characters stripped, capped."""
        data = strip_control(text).encode()
        keep = data[: max(0, self.log_budget)]
        self.log_budget -= len(keep)
        self.out.dropped_log_bytes += len(data) - len(keep)
        if keep:
            self.log_fh.write(keep)
            self.log_fh.flush()

    def _note_dropped(self) -> None:
        if self.out.dropped_log_bytes:
            self._note(f"{self.out.dropped_log_bytes} bytes of node output not kept "
                       f"(over the cap of {_size(self.limits.max_stderr_bytes)})")

