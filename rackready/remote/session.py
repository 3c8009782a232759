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

import paramiko

from rackready.remote.events import EventSink
from rackready.remote.fetch import Fetcher
from rackready.remote.nodelog import NodeLog
from rackready.remote.records import (
    LEVEL_DEADLINES,
    Limits,
    NodeEvent,
    NodeFiles,
    SessionError,
    SessionOutcome,
)
from rackready.remote.runner import Fail, Stop, build_remote_command, exit_status, lost, pump
from rackready.remote.shell import NodeShell
from rackready.remote.ship import (
    ENV_KEY,
    LOCK_HELD_RC,
    Shipper,
    build_suite_script,
    check_args,
    quiet_shipper,
)
from rackready.remote.slurm import SlurmLaunch
from rackready.sanitize import one_line

# the session's records live in records (its parts take them); callers name them here
__all__ = ["LEVEL_DEADLINES", "NODE_BASE", "Limits", "NodeEvent", "NodeFiles", "SessionError",
           "SessionOutcome", "run_on_node", "ship_bundle"]

# Where the controller keeps its bundles and runs on a node (the validate and rack steps)
NODE_BASE = "/var/lib/rackready"


def run_on_node(client: paramiko.SSHClient, node_name: str, *, bundle: tuple[bytes, str],
                site_yaml: str, command_args: list[str], env: dict[str, str],
                remote_base: str, run_id: str, files: NodeFiles, limits: Limits,
                on_event: Callable[[NodeEvent], None], on_status: Callable[[str], None],
                resume: bool = False, become: bool = False,
                python: str | None = None, launch: SlurmLaunch | None = None) -> SessionOutcome:
    """Ship, verify, run and fetch on one node; see the module docstring.

    python, when given, is the program and command_args its arguments. launch: the suite
    runs as a Slurm job (rackready.remote.slurm) instead of in the node's SSH session.
    """
    check_args(bundle[1], run_id, remote_base)
    args = [python, *command_args] if python else list(command_args)
    for key in env:
        if not ENV_KEY.fullmatch(key):
            raise ValueError(f"environment variable name {key!r} is not valid")
    if not args:
        raise ValueError("command_args is empty")
    if "--resume" in args and not resume:
        raise ValueError("command_args has --resume: pass resume=True (the run folder exists)")
    session = _Session(client, node_name, files, limits, on_event, on_status, become)
    session.launch = launch
    return session.run(bundle[0], bundle[1], site_yaml, args, env,
                       remote_base.rstrip("/") or "/", run_id, resume)


def ship_bundle(client: paramiko.SSHClient, bundle: tuple[bytes, str], *, remote_base: str,
                run_id: str, limits: Limits | None = None, become: bool = False) -> str:
    """Make R, verify the bundle (shipping it when needed) and unpack it into R; returns
    the unpacked folder. For jobs outside the suite (e.g. a multi-node workload test)."""
    check_args(bundle[1], run_id, remote_base)
    base = remote_base.rstrip("/") or "/"
    rdir = f"{base}/runs/{run_id}"
    shipper = quiet_shipper(client, limits or Limits.for_level("quick"), become)
    try:
        shipper.prepare(base, rdir, resume=False)
        return shipper.bundle(bundle[0], bundle[1], base, rdir)
    except Fail as exc:
        raise SessionError(str(exc)) from None
    except (OSError, EOFError, paramiko.SSHException) as exc:
        raise SessionError(lost(exc)) from None
    finally:
        shipper.cleanup()


class _Session:
    """One node's run of the suite, composed of its parts: the shell its commands go
    through, the shipper, the event sink, the fetcher and node.log."""

    def __init__(self, client: paramiko.SSHClient, node_name: str, files: NodeFiles,
                 limits: Limits, on_event: Callable[[NodeEvent], None],
                 on_status: Callable[[str], None], become: bool) -> None:
        self.client = client
        self.node = node_name
        self.files = files
        self.limits = limits
        self.on_event = on_event
        self.on_status = on_status
        self.out = SessionOutcome(rc=None, problem="")
        self.log = NodeLog(None, limits.max_stderr_bytes)
        self.start = time.monotonic()
        self.deadline = self.start + limits.deadline_s
        self.shell = NodeShell(client, limits, become, self.deadline)
        self.shipper = Shipper(self.shell, self.log.note, on_status, self.out)
        self.last_err = ""  # the node's last stderr line, for the problem line
        self._err_decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.launch: SlurmLaunch | None = None

    # -- the session -------------------------------------------------------------------

    def run(self, payload: bytes, digest: str, site_yaml: str, command_args: list[str],
            env: dict[str, str], base: str, run_id: str, resume: bool) -> SessionOutcome:
        rdir = f"{base}/runs/{run_id}"
        self.out.remote_dir = rdir
        try:
            self.files.log.parent.mkdir(parents=True, exist_ok=True)
            self.log.fh = self.files.log.open("ab")
        except OSError as exc:
            self.out.problem = f"cannot write {self.files.log} on the controller: {exc.strerror}"
            return self.out
        try:
            try:
                self.shipper.prepare(base, rdir, resume)
                bundle_dir = self.shipper.bundle(payload, digest, base, rdir)
                self.shipper.put(site_yaml.encode(), f"{rdir}/site.yml")
                script = build_suite_script(
                    command_args=command_args, env=env, bundle_dir=bundle_dir,
                    lock=f"{base}/suite.lock", pgid_file=f"{rdir}/pgid", out=f"{rdir}/out",
                    site=f"{rdir}/site.yml")
                stopped = self._run_suite(script, rdir)
            except Fail as exc:
                self.out.problem = str(exc)
                return self.out
            except (OSError, EOFError, paramiko.SSHException) as exc:
                self.out.problem = lost(exc)
                return self.out
            try:
                self.on_status("fetching results")
                Fetcher(self.client, self.files, self.limits, self.out,
                        self.log.note).fetch(f"{rdir}/out")
            except Fail as exc:
                stopped = stopped or str(exc)
            except (OSError, EOFError, paramiko.SSHException) as exc:
                stopped = stopped or lost(exc) + " while fetching results"
            self.out.problem = stopped or self._ending_problem()
            return self.out
        finally:
            self.shipper.cleanup()
            self.out.duration_s = round(time.monotonic() - self.start, 3)
            if self.out.problem:
                self.log.note(f"problem: {self.out.problem}")
            self.log.note_unlogged()
            self.out.dropped_log_bytes = self.log.dropped
            self.log.note_dropped()
            assert self.log.fh is not None
            self.log.fh.close()

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

    # -- running the suite ---------------------------------------------------------------

    def _run_suite(self, script: str, rdir: str) -> str:
        """Run and stream; returns the problem line when the suite had to be stopped."""
        command = build_remote_command(script, become=self.shell.become)
        client = self.client
        if self.launch is not None:  # the same command, as a Slurm job of its own
            command, client = self.launch.command(command), self.launch.host.client
        self.log.note(f"$ {command}")
        self.on_status("starting" if self.launch is None else "submitting to Slurm")
        sink = EventSink(self.files.events, self.limits, self.out, self.log,
                         self.on_event)
        channel = self.shell.open_channel(command, client)
        stopped = ""
        try:
            pump(channel, sink.feed, self._stderr, self.deadline, self.limits.idle_s,
                 f"deadline of {self.limits.deadline_s:g} s passed")
            sink.finish()
        except Stop as exc:
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
        self.out.rc = exit_status(channel)
        channel.close()
        if self.out.rc is None:
            raise EOFError("the node closed the session without an exit status")
        if self.out.rc == LOCK_HELD_RC and not self._exists(f"{rdir}/pgid"):
            raise Fail("another validation run holds the node's lock")
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
        self.log.log_text(text)

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
            rc, _, err = self.shell.exec(script, "stopping the suite",
                                         timeout=self.limits.kill_grace_s + self.limits.command_s,
                                         deadline_free=True)
        except (Fail, OSError, EOFError, paramiko.SSHException) as exc:
            self.log.note(f"could not stop the suite on the node: {one_line(str(exc))}")
            return
        self.log.note({0: "suite's process group stopped (SIGTERM)",
                    4: "no process group recorded: the suite had not started",
                    5: "suite's process group killed (SIGKILL after the grace period)"}.get(
            rc, f"stopping the suite failed (exit {rc}): {one_line(err)}"))

    def _exists(self, path: str) -> bool:
        rc, _, _ = self.shell.exec(f"[ -e {shlex.quote(path)} ]", "checking the run",
                                   deadline_free=True)
        return rc == 0
