"""The controller's session with one node over SSH: the node is untrusted input.

API (what rackready.validate calls, once per node, from its thread pool):

    outcome = run_on_node(
        client,                      # a connected paramiko.SSHClient (rackready.ssh.connect)
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
import errno
import json
import math
import os
import re
import secrets
import select
import shlex
import stat
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko
from paramiko.sftp import CMD_CLOSE, CMD_HANDLE, CMD_NAME, CMD_OPENDIR, CMD_READDIR

from rackready.result_shape import CAPS
from rackready.sanitize import one_line, replace_surrogates_in, strip_control

# Whole-session deadline per validation level (the suite's own check timeouts sit inside).
LEVEL_DEADLINES: dict[str, float] = {"quick": 600.0, "standard": 1800.0, "burnin": 12 * 3600.0}

MAX_NAME_BYTES = 255  # one artifact file or directory name
MAX_DEPTH = 8  # directory levels under artifacts/
LOCK_HELD_RC = 75  # flock -E: the lock is held by another suite
EXIT_GRACE_S = 2.0  # after the exit status, how long to wait for an EOF that may never come
_CHUNK = 1 << 16
_OUTPUT_CAP = 64 << 10  # what a preparation command may print
_NOTES_PER_KIND = 20  # notes of one kind about the node's output logged; the rest counted
_TAIL = 4 << 10  # the end of a capped stream kept beside its head (its last error line)
_SAFE_RUN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGEST = re.compile(r"[0-9a-f]{64}")


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


class _Fail(Exception):
    """Ends the session with this one-line problem."""


class _Refused(_Fail):
    """The node's SFTP server refused one request (permission, missing file)."""

    def __init__(self, message: str, errno_: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno_


class _Stop(Exception):
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


def build_suite_script(*, command_args: list[str], env: dict[str, str], bundle_dir: str,
                       lock: str, pgid_file: str, out: str, site: str) -> str:
    """cd into the verified bundle, take the node's lock (never wait), start a new session."""
    for key in env:
        if not _ENV_KEY.fullmatch(key):
            raise ValueError(f"environment variable name {key!r} is not valid")
    if not command_args:
        raise ValueError("command_args is empty")
    prog = command_args[0]
    argv = [*command_args, "--out", out, "--site", site]
    assign = [f"{k}={v}" for k, v in env.items()]
    q = shlex.quote
    missing = q(f"{prog} not found on the node; provision it first")
    return (
        f"umask 022; cd {q(bundle_dir)} || exit 3; "
        f"command -v {q(prog)} >/dev/null 2>&1 || {{ echo {missing} >&2; exit 127; }}; "
        f"exec flock -n -E {LOCK_HELD_RC} {q(lock)} setsid -w "
        f"sh -c 'echo $$ > \"$0\" && exec \"$@\"' {q(pgid_file)} "
        f"env {shlex.join(assign + argv)}"
    )


def run_on_node(client: paramiko.SSHClient, node_name: str, *, bundle: tuple[bytes, str],
                site_yaml: str, command_args: list[str], env: dict[str, str],
                remote_base: str, run_id: str, files: NodeFiles, limits: Limits,
                on_event: Callable[[dict], None], on_status: Callable[[str], None],
                resume: bool = False, become: bool = False,
                python: str | None = None) -> SessionOutcome:
    """Ship, verify, run and fetch on one node; see the module docstring.

    python, when given, is the program and command_args its arguments.
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
            raise _Stop(f"sent more than {_size(self.cap)} on {self.name}")
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
                f"{_size(self.cap)} not kept; its end follows]\n"
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
        _pump(channel, out.feed, err.feed, time.monotonic() + timeout_s, idle_s,
              f"no end within {timeout_s:g} s")
        rc = _exit_status(channel)
    except _Stop as exc:
        rc, problem = None, str(exc)
    finally:
        channel.close()
    if not problem and err.dropped:
        problem = f"sent more than {_size(max_stderr)} on stderr ({err.dropped} bytes not kept)"
    elif not problem and rc is None:
        problem = "the node closed the command without an exit status"
    return CommandResult(rc, out.text(), err.text(), problem)


def _check_args(digest: str, run_id: str, remote_base: str) -> None:
    if not _DIGEST.fullmatch(digest):
        raise ValueError(f"bundle digest {digest!r} is not a sha256 hex digest")
    if not _SAFE_RUN_ID.fullmatch(run_id):
        raise ValueError(f"run id {run_id!r} is not a safe directory name")
    if not remote_base.startswith("/"):
        raise ValueError(f"remote_base {remote_base!r} is not an absolute path")


class _Session:
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

    def _prepare(self, base: str, rdir: str, resume: bool) -> None:
        self.on_status("preparing")
        q = shlex.quote
        if resume:
            leaf = f"[ -d {q(rdir)} ] || exit 23"
        else:  # exclusive: no -p on the leaf, an existing directory is an error
            leaf = f"mkdir -- {q(rdir)} || {{ [ -e {q(rdir)} ] && exit 21; exit 22; }}"
        # a resumed run's old pgid file would hide a held lock (see _run_suite)
        script = (f"umask 022; mkdir -p -- {q(base + '/bundle')} {q(base + '/runs')} "
                  f"|| exit 20; {leaf}; rm -f -- {q(rdir + '/pgid')}")
        rc, _, err = self._exec(script, "preparing the node")
        if rc == 21:
            raise _Fail(f"remote run directory {rdir} already exists (a run id used twice)")
        if rc == 23:
            raise _Fail(f"nothing to resume: {rdir} does not exist on the node")
        if rc in (20, 22):
            raise _Fail(_mkdir_problem(err, rdir if rc == 22 else f"{base}/runs"))
        if rc:
            raise _Fail(self._command_failed("preparing the node", rc, err))

    def _bundle(self, payload: bytes, digest: str, base: str, rdir: str) -> str:
        """Verify the cached bundle by its hash and unpack it fresh; ship it when needed."""
        cache = f"{base}/bundle/{digest}.tar.gz"
        shipped_now = False
        while True:
            self.on_status("verifying bundle")
            rc, out, err = self._exec(_verify_script(cache, digest, rdir), "verifying the bundle")
            if rc == 0:
                bundle_dir = out.strip()
                if not (bundle_dir.startswith(f"{rdir}/bundle.") and "\n" not in bundle_dir):
                    raise _Fail(f"verifying the bundle printed {one_line(bundle_dir, 80)!r}")
                return bundle_dir
            if rc not in (10, 11):
                raise _Fail(self._command_failed("unpacking the bundle", rc, err))
            if shipped_now:
                raise _Fail(f"the bundle on the node does not match sha256 {digest[:12]} "
                            "even after shipping it again")
            if rc == 10:
                self._note(f"cached bundle {cache} does not match its sha256: shipping again")
            self.on_status("shipping bundle")
            self._put(payload, cache)
            shipped_now = self.out.shipped = True

    def _put(self, data: bytes, dest: str) -> None:
        """Upload to dest atomically (a temporary name, then mv); become: staged in /tmp."""
        token = secrets.token_hex(4)
        tmp = f"{dest}.part-{token}"
        q = shlex.quote
        if self.become:
            staged = f"{self._staging()}/{token}"
            self._sftp_write(staged, data)
            script = (f"install -m 0644 -- {q(staged)} {q(tmp)} && mv -f -- {q(tmp)} {q(dest)}; "
                      f"rc=$?; rm -f -- {q(staged)} {q(tmp)}; exit $rc")
        else:
            self._sftp_write(tmp, data)
            script = f"mv -f -- {q(tmp)} {q(dest)} || {{ rc=$?; rm -f -- {q(tmp)}; exit $rc; }}"
        rc, _, err = self._exec(script, f"writing {dest}")
        if rc:
            raise _Fail(f"cannot write {dest}: {_reason(err) or f'exit status {rc}'}")

    def _staging(self) -> str:
        if self.staging is None:  # as the login user: sudo installs from here
            rc, out, err = self._exec("mktemp -d /tmp/rackready.XXXXXX", "making an upload folder",
                                      become=False)
            path = out.strip()
            if rc or not path.startswith("/tmp/rackready.") or "\n" in path:
                raise _Fail(self._command_failed("making an upload folder in /tmp", rc, err))
            self.staging = path
        return self.staging

    def _sftp_write(self, path: str, data: bytes) -> None:
        sftp = self._open_sftp(self.limits.command_s)
        try:
            with _sftp_errors("write", path, self.client), sftp.open(path, "wb") as fh:
                fh.set_pipelined(True)
                fh.write(data)
        finally:
            sftp.close()

    def _cleanup(self) -> None:
        if self.staging is None:
            return
        try:
            rc, _, err = self._exec(f"rm -rf -- {shlex.quote(self.staging)}",
                                    "removing the upload folder", become=False)
            if rc:
                self._note(f"could not remove {self.staging}: {one_line(err)}")
        except (_Fail, OSError, EOFError, paramiko.SSHException) as exc:
            self._note(f"could not remove {self.staging}: {one_line(str(exc))}")

    # -- running the suite ---------------------------------------------------------------

    def _run_suite(self, script: str, rdir: str) -> str:
        """Run and stream; returns the problem line when the suite had to be stopped."""
        command = build_remote_command(script, become=self.become)
        self._note(f"$ {command}")
        self.on_status("starting")
        sink = _EventSink(self)
        channel = self._open_channel(command)
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

    def _open_channel(self, command: str) -> paramiko.Channel:
        transport = self.client.get_transport()
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

    def _open_sftp(self, idle: float) -> paramiko.SFTPClient:
        sftp = self.client.open_sftp()
        sftp.get_channel().settimeout(idle)  # a node that stops answering
        return sftp

    def _fetch(self, rout: str) -> None:
        self.fetch_end = time.monotonic() + self.limits.fetch_s
        self.total = 0
        self.entries = 0
        sftp = self._open_sftp(self.limits.idle_s)
        try:
            try:
                self._in_time(sftp)
                with _sftp_errors("read", f"{rout}/result.json", self.client):
                    attr = sftp.lstat(f"{rout}/result.json")
                    if not stat.S_ISREG(attr.st_mode or 0):
                        self._refuse("result.json", _kind(attr.st_mode))
                    else:
                        self.out.result_fetched = self._get(
                            sftp, f"{rout}/result.json", attr, self.files.result,
                            "result.json", "result.json")
            except _Refused as exc:
                if exc.errno != errno.ENOENT:  # no result.json is said by result_fetched
                    self._refuse("result.json", str(exc))
            self._walk(sftp, f"{rout}/artifacts", self.files.artifacts.resolve(), [], 0)
        except _StopWalk:
            pass  # recorded as refused
        except TimeoutError:
            if time.monotonic() >= self.fetch_end - 0.05:  # the wait was cut to the deadline
                raise _Fail(self._fetch_late()) from None
            raise _Fail(f"stalled: no answer for {self.limits.idle_s:g} s while fetching "
                        "results") from None
        finally:
            sftp.close()

    def _fetch_late(self) -> str:
        return f"fetching results took longer than {self.limits.fetch_s:g} s"

    def _in_time(self, sftp: paramiko.SFTPClient) -> None:
        """Before each SFTP request of the fetch: the deadline passed ends it; the wait
        for an answer is cut to what is left of it (a slow node never stretches it)."""
        left = self.fetch_end - time.monotonic()
        if left <= 0:
            raise _Fail(self._fetch_late())
        sftp.get_channel().settimeout(min(self.limits.idle_s, left))

    def _walk(self, sftp: paramiko.SFTPClient, remote: str, base: Path, parts: list[str],
              depth: int) -> None:
        room = self.limits.max_files - self.entries
        try:
            with _sftp_errors("list", remote, self.client):
                entries = _listdir(sftp, remote, room + 1, lambda: self._in_time(sftp))
        except _Refused as exc:
            self._refuse("/".join(parts) or ".", str(exc))
            return
        if entries is None:
            return  # no artifacts/ folder
        for raw, attr in sorted(entries, key=lambda e: e[0]):
            if raw in (b".", b".."):
                continue
            self.entries += 1
            if self.entries > self.limits.max_files:
                self._refuse("/".join([*parts, "*"]),
                             f"more than {self.limits.max_files} entries: the rest not fetched")
                raise _StopWalk
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                self._refuse(repr(raw)[1:], "unsafe name (not UTF-8)", quoted=True)
                continue
            shown = "/".join([*parts, name])
            why = unsafe_name(name)
            if why:
                self._refuse(shown, f"unsafe name ({why})")
                continue
            mode = attr.st_mode
            if mode is None:  # a server that lists no attributes
                self._in_time(sftp)
                mode = sftp.lstat(f"{remote}/{name}").st_mode or 0
            if stat.S_ISDIR(mode):
                if depth + 1 >= MAX_DEPTH:
                    self._refuse(shown, f"deeper than {MAX_DEPTH} levels")
                    continue
                self._walk(sftp, f"{remote}/{name}", base, [*parts, name], depth + 1)
            elif stat.S_ISREG(mode):
                local = (base / Path(*parts, name)).resolve()
                if not local.is_relative_to(base) or local == base:
                    self._refuse(shown, "resolves outside the artifacts folder")
                    continue
                try:
                    self._get(sftp, f"{remote}/{name}", attr, local, f"artifacts/{shown}", shown)
                except _Refused as exc:
                    self._refuse(shown, str(exc))
            else:
                self._refuse(shown, _kind(mode))

    def _get(self, sftp: paramiko.SFTPClient, remote: str, attr: paramiko.SFTPAttributes,
             local: Path, shown: str, label: str) -> bool:
        """Copy one regular file, capped; a temporary name until it is whole."""
        cap = min(self.limits.max_file_bytes, self.limits.max_total_bytes - self.total)
        if (attr.st_size or 0) > cap:
            self._refuse(label, self._over(attr.st_size or 0))
            return False
        try:
            local.parent.mkdir(parents=True, exist_ok=True)
            tmp = local.with_name(f".{local.name}.part-{secrets.token_hex(4)}")
            fh = tmp.open("xb")
        except OSError as exc:
            raise _Fail(f"cannot write {local} on the controller: {exc.strerror}") from None
        n = 0
        ok = False
        try:
            self._in_time(sftp)
            with fh, _sftp_errors("read", remote, self.client), sftp.open(remote, "rb") as rf:
                if attr.st_size:  # requests in flight together: ~100x faster than one by one
                    rf.prefetch(min(attr.st_size, cap + 1))
                while True:
                    chunk = rf.read(min(_CHUNK * 4, cap + 1 - n))
                    if not chunk:
                        break
                    n += len(chunk)
                    if n > cap:
                        self._refuse(label, self._over(n))
                        return False
                    _local_write(local, fh.write, chunk)
                    self._in_time(sftp)
            _local_write(local, os.replace, tmp, local)
            ok = True
        finally:
            if not ok:
                tmp.unlink(missing_ok=True)
        self.total += n
        self.out.fetched.append(shown)
        return True

    def _over(self, size: int) -> str:
        if size > self.limits.max_file_bytes:
            return f"larger than the per-file cap of {_size(self.limits.max_file_bytes)}"
        return f"over the total cap of {_size(self.limits.max_total_bytes)} per node"

    def _refuse(self, name: str, why: str, quoted: bool = False) -> None:
        shown = name if quoted else repr(name)
        self.out.refused.append(f"{one_line(shown, 120)}: {why}")
        self._note(f"refused {shown}: {why}")

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


class _StopWalk(Exception):
    """More entries under artifacts/ than max_files: the walk ends there."""


class _EventSink:
    """Splits stdout into lines and sorts them: events, bad event lines, plain log text."""

    def __init__(self, session: _Session) -> None:
        self.s = session
        self.limits = session.limits
        self.partial = bytearray()
        self.skipping = False  # inside an over-long line
        self.bytes = 0
        try:
            session.files.events.parent.mkdir(parents=True, exist_ok=True)
            self.fh = session.files.events.open("ab")
        except OSError as exc:
            raise _Fail(f"cannot write {session.files.events} on the controller: "
                        f"{exc.strerror}") from None

    def close(self) -> None:
        self.fh.close()

    def feed(self, data: bytes) -> None:
        self.bytes += len(data)
        if self.bytes > self.limits.max_stream_bytes:
            raise _Stop(f"sent more than {_size(self.limits.max_stream_bytes)} on stdout")
        start = 0
        while True:
            nl = data.find(b"\n", start)
            piece = data[start:] if nl < 0 else data[start:nl]
            if not self.skipping:
                self.partial += piece
                if len(self.partial) > self.limits.max_line_bytes:
                    self._long()
            if nl < 0:
                return
            if self.skipping:
                self.skipping = False
            else:
                self._line(bytes(self.partial))
                self.partial.clear()
            start = nl + 1

    def finish(self) -> None:
        """The stream ended: a last line without a newline still counts."""
        if self.partial and not self.skipping:
            self._line(bytes(self.partial))
        self.partial.clear()

    def _long(self) -> None:
        self.partial.clear()
        self.skipping = True
        self._bad(f"a line longer than {_size(self.limits.max_line_bytes)}", b"")

    def _line(self, raw: bytes) -> None:
        text = raw.rstrip(b"\r")
        stripped = text.strip()
        if not stripped:
            return
        if not stripped.startswith((b"{", b"[")):
            self.s._log_text(text.decode(errors="replace") + "\n")
            return
        try:
            event = json.loads(text.decode("utf-8"), parse_constant=_reject_constant,
                               parse_float=_finite_float)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UTF-8 are ValueErrors
            self._bad(f"not JSON ({one_line(str(exc), 80)})", text)
            return
        if b"\\u" in text:  # lone surrogates ("\ud800") are valid JSON but no text
            event = replace_surrogates_in(event)
        why = event_problem(event)
        if why:
            self._bad(why, text)
            return
        if self.s.out.events >= self.limits.max_events:
            raise _Stop(f"sent more than {self.limits.max_events} events")
        self.fh.write(text + b"\n")
        self.fh.flush()  # a controller that dies keeps what arrived
        self.s.out.events += 1
        try:
            self.s.on_event(event)
        except Exception as exc:  # the event came from the node; it must not end the session
            self.s._note_some("events the controller could not show",
                              f"the controller could not show an event: "
                              f"{type(exc).__name__}: {exc}")

    def _bad(self, why: str, text: bytes) -> None:
        self.s.out.bad_lines += 1
        sample = one_line(text[:200].decode(errors="replace"), 200)
        self.s._note_some("bad event lines", f"bad event line ({why}): {sample}")


def event_problem(event: Any) -> str:
    """Why a parsed stdout line is not an event we pass on ("" when it is fine)."""
    if not isinstance(event, dict):
        return f"a JSON {type(event).__name__}, not an object"
    kind = event.get("event")
    if not isinstance(kind, str):
        return "no string \"event\" field"
    for key, check in (*_COMMON_FIELDS, *_EVENT_FIELDS.get(kind, ())):
        if key in event and not check(event[key]):
            return f"{kind}: field {key!r} has the wrong type or range"
    for key in _REQUIRED.get(kind, ()):
        if key not in event:
            return f"{kind}: field {key!r} is missing"
    return ""


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _result(v: Any) -> bool:
    if not isinstance(v, dict):
        return False
    return all(k not in v or check(v[k]) for k, check in (
        ("check", _str), ("status", _str), ("message", _str), ("duration_s", _num),
        ("measurements", lambda m: isinstance(m, list) and all(isinstance(x, dict) for x in m)),
        ("needs", lambda n: isinstance(n, list) and all(isinstance(x, str) for x in n))))


_COMMON_FIELDS: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("ts", _str), ("check", _str), ("node", _str), ("resumed", lambda v: isinstance(v, bool)))
_EVENT_FIELDS: dict[str, tuple[tuple[str, Callable[[Any], bool]], ...]] = {
    "run_started": (("run_id", _str), ("profile", _str), ("level", _str),
                    ("simulated", lambda v: isinstance(v, bool))),
    "progress": (("fraction", lambda v: _num(v) and 0 <= v <= 1),
                 ("eta_s", lambda v: v is None or _num(v)), ("label", _str)),
    "check_started": (("needs", lambda n: isinstance(n, list)
                       and all(isinstance(x, str) for x in n)),),
    "check_finished": (("result", _result),),
    "measurement": (("measurement", lambda m: isinstance(m, dict)
                     and isinstance(m.get("name"), str)),),
    # the start-of-run counters: a list of {counter, labels, value} records
    "health_start": (("counters", lambda v: isinstance(v, list)
                      and all(isinstance(x, dict) for x in v)), ("error", _str)),
    "run_finished": (("outcome", _str),),
}
_REQUIRED = {"progress": ("fraction",), "check_finished": ("check", "result"),
             "measurement": ("measurement",), "check_started": ("check",)}


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NonFinite(f"non-finite number {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 parses as inf
        raise _NonFinite(f"non-finite number {text[:20]}")
    return value


def unsafe_name(name: str) -> str:
    """Why a node-chosen file name may not be used on the controller ("" when it may)."""
    if not name:
        return "empty"
    if name in (".", ".."):
        return f"is {name!r}"
    if "/" in name:
        return "contains '/'"
    if "\x00" in name:
        return "contains NUL"
    if strip_control(name) != name or "\n" in name or "\t" in name:
        return "contains control characters"
    if len(name.encode("utf-8", errors="surrogateescape")) > MAX_NAME_BYTES:
        return f"longer than {MAX_NAME_BYTES} bytes"
    return ""


def _listdir(sftp: paramiko.SFTPClient, path: str, limit: int,
             in_time: Callable[[], None] = lambda: None
             ) -> list[tuple[bytes, paramiko.SFTPAttributes]] | None:
    """At most `limit` entries of a remote folder, names as raw bytes; None when missing.

    paramiko's listdir_attr reads a whole folder into memory and decodes names strictly;
    a node listing millions of entries or non-UTF-8 names must not take the controller down.
    in_time runs before every request (the fetch's deadline; it raises when passed).
    """
    try:
        in_time()
        t, msg = sftp._request(CMD_OPENDIR, path)
    except FileNotFoundError:
        return None
    if t != CMD_HANDLE:
        raise paramiko.SFTPError("expected a handle")
    handle = msg.get_binary()
    entries: list[tuple[bytes, paramiko.SFTPAttributes]] = []
    try:
        while len(entries) < limit:
            in_time()
            try:
                t, msg = sftp._request(CMD_READDIR, handle)
            except EOFError:
                break  # end of the folder
            if t != CMD_NAME:
                raise paramiko.SFTPError("expected a name response")
            for _ in range(msg.get_int()):
                raw = msg.get_string()
                msg.get_string()  # longname
                attr = paramiko.SFTPAttributes._from_msg(msg)
                entries.append((raw, attr))
    finally:
        sftp._request(CMD_CLOSE, handle)
    return entries


def _pump(channel: paramiko.Channel, on_out: Callable[[bytes], None],
          on_err: Callable[[bytes], None], deadline: float, idle_s: float,
          deadline_msg: str) -> None:
    """Drain stdout and stderr together until the command ends (never one alone: a node
    that fills one stream's window while we wait on the other would hang both sides)."""
    last = time.monotonic()
    exited_at: float | None = None
    while True:
        got = False
        if channel.recv_ready():
            data = channel.recv(_CHUNK)
            if data:
                got = True
                on_out(data)
        if channel.recv_stderr_ready():
            data = channel.recv_stderr(_CHUNK)
            if data:
                got = True
                on_err(data)
        now = time.monotonic()
        if now >= deadline:  # checked even while data flows: a flooding node ends too
            raise _Stop(deadline_msg)
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
            raise _Stop(f"stalled: no output for {idle_s:g} s")
        wait = min(0.2, max(0.01, deadline - now), max(0.01, idle_s - (now - last)))
        if channel.eof_received:
            time.sleep(min(wait, 0.05))  # the channel's pipe stays readable after EOF
        else:
            select.select([channel], [], [], wait)


def _exit_status(channel: paramiko.Channel) -> int | None:
    """The command's exit status; None when the channel closed without one (paramiko
    then reports -1)."""
    if not channel.exit_status_ready():
        return None
    rc = channel.recv_exit_status()
    return rc if rc >= 0 else None


def _transport_active(channel: paramiko.Channel) -> bool:
    transport = channel.get_transport()
    return transport is not None and transport.is_active()


@contextmanager
def _sftp_errors(verb: str, path: str, client: paramiko.SSHClient):
    """An SFTP refusal is reported as what it is; only a dead connection is 'lost'."""
    try:
        yield
    except (PermissionError, FileNotFoundError) as exc:
        raise _Refused(f"cannot {verb} {path}: {exc.strerror or exc}", exc.errno) from None
    except (TimeoutError, ConnectionError):
        raise
    except OSError as exc:
        transport = client.get_transport()
        if transport is not None and transport.is_active():
            raise _Refused(f"cannot {verb} {path}: {one_line(str(exc)) or 'SFTP failure'}"
                           ) from None
        raise


def _verify_script(cache: str, digest: str, rdir: str) -> str:
    """Exit 11: not shipped; 10: corrupt or not matching; 0: the unpacked folder on stdout."""
    q = shlex.quote
    c = q(cache)
    return (
        f"[ -f {c} ] || exit 11; umask 022; "
        f"d=$(mktemp -d {q(rdir + '/bundle.XXXXXX')}) || exit 12; "
        f"if ! gzip -dc -- {c} > \"$d/bundle.tar\" 2>/dev/null || "
        f"! printf '%s  %s\\n' {digest} \"$d/bundle.tar\" | sha256sum -c --status; "
        "then rm -rf -- \"$d\"; exit 10; fi; "
        "tar -xf \"$d/bundle.tar\" -C \"$d\" --no-same-owner || exit 13; "
        "rm -f -- \"$d/bundle.tar\"; printf '%s\\n' \"$d\""
    )


def _mkdir_problem(err: str, fallback: str) -> str:
    m = re.search(r"cannot create directory ['‘\"]?(.+?)['’\"]?: (.+)$", err.strip(), re.M)
    if m:
        return f"cannot create {one_line(m.group(1))}: {one_line(m.group(2))}"
    return f"cannot create {fallback}: {one_line(_reason(err)) or 'mkdir failed'}"


def _reason(err: str) -> str:
    lines = err.strip().splitlines()
    return one_line(lines[-1].rsplit(": ", 1)[-1]) if lines else ""


def _local_write(local: Path, write: Callable[..., object], *args: object) -> None:
    """A write on the controller's own disk (full, a folder where the file goes) is the
    controller's problem, said as such: never read as the node's connection being lost."""
    try:
        write(*args)
    except OSError as exc:
        raise _Fail(f"cannot write {local} on the controller: "
                    f"{exc.strerror or type(exc).__name__}") from None


def _lost(exc: BaseException) -> str:
    text = one_line(str(exc)) or type(exc).__name__
    return f"connection lost: {text}"


def _kind(mode: int | None) -> str:
    mode = mode or 0
    if stat.S_ISLNK(mode):
        return "a symlink (not followed)"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a fifo"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


__all__ = ["LEVEL_DEADLINES", "CommandResult", "Limits", "NodeFiles", "SessionError",
           "SessionOutcome", "build_remote_command", "build_suite_script", "event_problem",
           "run_command", "run_on_node", "ship_bundle", "unsafe_name"]
