"""Slurm from the controller: commands on the site's submit host over SSH.

A node's suite runs as a Slurm job of its own: `srun` on the submit host, exclusive on
that node, so its stdout (the event stream) comes back through the same pump as over
SSH; the bundle is shipped to the node and the results fetched from it as before.
srun's stderr carries the job's own stderr too, so nothing in it is Slurm's word: the job's
id and state come from squeue on the submit host, by the job name the controller chose.
Drain and resume go through scontrol there, with validation.drain's rule (a node drained
by anyone else is left as it is). Everything a Slurm command prints is untrusted text:
one sanitized line where it reaches a problem.
"""

from __future__ import annotations

import contextlib
import math
import re
import secrets
import shlex
import threading
import time
from dataclasses import dataclass, field

import paramiko

from rackready.remote import ssh
from rackready.remote.runner import run_command
from rackready.sanitize import one_line
from rackready.site.slurm import PENDING_S, SlurmSite
from validation.drain import DrainError, NodeState, Scontrol, parse_show_node

JOB_MARK = "rackready-slurm-job"  # the job's first stderr line: "<mark> <job id>"
# Lines on srun's stderr: only a cue to show the state squeue gave; their numbers are never
# read (the node writes to the same stream and could name another node's job).
_JOB_LINE = re.compile(rf"^{JOB_MARK} \d+$")
_QUEUED = re.compile(r"^srun: job \d+ queued and waiting for resources")
# A job still pending pending_s after submission (the site's rackready_slurm.pending_s)
# never started: the scheduler's state, reported with squeue's reason and cancelled.
# Pending reasons that cannot clear by waiting (the node down, not responding, drained,
# reserved for others, not in the partition) are given HOPELESS_S to be seen twice; squeue
# is asked every POLL_S until the job runs.
HOPELESS_S = 6.0
POLL_S = 2.0
_HOPELESS = ("ReqNodeNotAvail", "NodeDown", "PartitionNodeLimit", "PartitionDown",
             "PartitionInactive", "PartitionConfig", "BadConstraints", "InvalidQOS",
             "InvalidAccount", "AccountNotAllowed", "QOSNotAllowed")
# Slurm's own words for a job that ended without finishing (slurmstepd/srun on stderr)
_ENDED = re.compile(r"\*\*\* (?:JOB|STEP) [\d.]+ ON \S+ CANCELLED AT \S+(?: DUE TO ([A-Z ]+))?"
                    r"|srun: error: (.+)|srun: (Force Terminated job.*|Job step aborted.*)")
_NAMED_JOB = re.compile(r"\*\*\* (?:JOB|STEP) (\d+)")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What one Slurm command may print on the submit host (scontrol's answers are a few KiB);
# more is a host gone wrong, refused rather than held in memory.
MAX_STDOUT = 1 << 20
MAX_STDERR = 64 << 10


class SlurmError(RuntimeError):
    """A Slurm command failed on the submit host; the message is one line."""


class SubmitHost:
    """One SSH connection to the submit host, shared by every node's session (channels
    are independent); admin commands use sudo -n where the site says so."""

    def __init__(self, site: SlurmSite, timeout_s: float = 30) -> None:
        self.site = site
        self.timeout_s = timeout_s
        self.client: paramiko.SSHClient = ssh.connect(site.submit)

    def close(self) -> None:
        self.client.close()

    def run(self, args: list[str], *, admin: bool = False) -> str:
        return self._run(args, admin=admin)[0]

    def _run(self, args: list[str], *, admin: bool = False,
             timeout_s: float | None = None) -> tuple[str, str]:
        command = " ".join(shlex.quote(a) for a in args)
        if admin and self.site.admin_become:
            command = f"sudo -n {command}"
        limit = timeout_s or self.timeout_s
        try:  # bounded as every remote command: both streams drained together, capped
            res = run_command(self.client, command, timeout_s=limit, idle_s=limit,
                              max_stdout=MAX_STDOUT, max_stderr=MAX_STDERR)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise SlurmError(f"{args[0]} on {self.site.submit.address}: "
                             f"connection lost: {one_line(str(exc)) or type(exc).__name__}"
                             ) from None
        if res.problem:
            raise SlurmError(f"{' '.join(args[:2])} on {self.site.submit.address}: "
                             f"{res.problem}")
        if res.rc != 0:
            lines = (res.err or res.out).strip().splitlines()
            raise SlurmError(f"{' '.join(args[:2])} exited {res.rc}: "
                             f"{one_line(lines[-1]) if lines else 'no output'}")
        return res.out, res.err

    def allocate(self, nodes: list[str], minutes: int, reservation: str = "",
                 wait_s: int = 90) -> str:
        """One allocation of the whole nodes (the rack step's); returns its job id. Gives up
        when Slurm cannot grant it within wait_s."""
        args = ["salloc", "--no-shell", "--job-name=rackready-rack", f"--nodes={len(nodes)}",
                f"--nodelist={','.join(nodes)}", "--exclusive", f"--time={minutes}",
                f"--immediate={wait_s}"]
        if self.site.partition:
            args.append(f"--partition={self.site.partition}")
        if reservation:
            args.append(f"--reservation={reservation}")
        out, err = self._run(args, timeout_s=wait_s + self.timeout_s)
        granted = re.search(r"Granted job allocation (\d+)", out + err)
        if granted is None:
            raise SlurmError(f"salloc granted no allocation: {one_line(err or out)}")
        return granted.group(1)

    def node_state(self, node: str) -> NodeState:
        try:
            return parse_show_node(self.run(["scontrol", "show", "node", "-o", node]))
        except DrainError as exc:
            raise SlurmError(str(exc)) from None

    def job(self, job_id: str) -> tuple[str, str]:
        """(JobState, Reason) of a job Slurm still knows; ("", "") when it does not."""
        try:
            text = self.run(["scontrol", "show", "job", "-o", job_id])
        except SlurmError:
            return "", ""
        state = re.search(r"(?:^|\s)JobState=(\S+)", text)
        why = re.search(r"(?:^|\s)Reason=(\S+)", text)
        return (state.group(1) if state else "",
                "" if not why or why.group(1) == "None" else why.group(1))

    def cancel(self, job_id: str) -> None:
        with contextlib.suppress(SlurmError):  # gone already: the node's kill still ran
            self.run(["scancel", job_id])

    def jobs_named(self, name: str) -> list[tuple[str, str, str]]:
        """(id, state, reason) of the submit user's jobs named name, finished ones too while
        slurmctld keeps them (MinJobAge), oldest first."""
        out = self.run(["squeue", "--noheader", f"--user={self.site.submit.user}",
                        f"--name={name}", "--states=all", "--format=%i|%T|%r"])
        jobs = []
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 3 and parts[0].isdigit():
                why = one_line(parts[2])
                jobs.append((parts[0], one_line(parts[1]), "" if why == "None" else why))
        return sorted(jobs, key=lambda j: int(j[0]))

    def cancel_named(self, name: str) -> None:
        """Cancels the submit user's jobs of this name: a job not yet seen by squeue too."""
        with contextlib.suppress(SlurmError):
            self.run(["scancel", f"--user={self.site.submit.user}", f"--name={name}"])

    def reserve(self, name: str, nodes: list[str], minutes: int) -> None:
        """A maintenance reservation on the nodes for the run's jobs only, so no other job
        lands on a node that --drain resumes before its verdict."""
        self.run(["scontrol", "create", "reservation", f"ReservationName={name}",
                  "StartTime=now", f"Duration={minutes}", f"Nodes={','.join(nodes)}",
                  f"Users={self.site.submit.user}", "Flags=MAINT,IGNORE_JOBS"], admin=True)

    def unreserve(self, name: str) -> None:
        self.run(["scontrol", "delete", f"ReservationName={name}"], admin=True)


def step_command(job_id: str, node: str, inner: str) -> str:
    """One task of an allocation on one of its nodes (srun --jobid), running inner as the
    node's SSH session would."""
    opts = ["srun", f"--jobid={job_id}", f"--nodelist={node}", "--nodes=1", "--ntasks=1",
            "--export=NONE", "--unbuffered"]
    return " ".join(shlex.quote(a) for a in [*opts, "/bin/sh", "-c",
                                               f'export PATH={PATH}; exec /bin/sh -c "$1"',
                                               "rackready", inner])


class RemoteScontrol(Scontrol):
    """validation.drain's scontrol, run on the submit host (its drain/resume rule)."""

    def __init__(self, host: SubmitHost, node: str) -> None:
        self.host = host
        self.node = node
        self.timeout_s = host.timeout_s
        self.path = "scontrol"

    def _run(self, *args: str) -> str:
        admin = args[0] == "update"
        try:
            return self.host.run(["scontrol", *args], admin=admin)
        except SlurmError as exc:
            raise DrainError(str(exc)) from None


@dataclass
class SlurmLaunch:
    """How one node's suite goes through Slurm (rackready.remote.session uses it).

    The job is known by the name the controller gave it (`--job-name`, unique to the
    launch); its id and state come from squeue on the submit host, never from the stream.
    From command() on, a watcher asks squeue until the job runs: a job pending past
    pending_s (the site's; HOPELESS_S for a reason that waiting cannot clear) is cancelled and is
    `never_started`, the scheduler's state rather than the node's."""

    host: SubmitHost
    node: str
    deadline_s: float
    reservation: str = ""
    job_id: str = ""
    last_slurm_line: str = ""
    never_started: str = ""  # why the job never ran, in Slurm's words
    pending_s: float = PENDING_S
    hopeless_s: float = HOPELESS_S
    poll_s: float = POLL_S
    job_name: str = ""
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _watcher: threading.Thread | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.job_name:
            node = re.sub(r"[^A-Za-z0-9._-]", "-", self.node)[:64]
            self.job_name = f"rackready-validate-{node}-{secrets.token_hex(4)}"

    def command(self, inner: str) -> str:
        """srun on the submit host: one task, the whole node, the run's time limit; the
        job first marks its start on stderr, then runs the session's command as given.
        Starts the watcher (the command runs next)."""
        opts = ["srun", f"--job-name={self.job_name}", f"--nodelist={self.node}",
                "--nodes=1", "--ntasks=1", "--exclusive", "--export=NONE", "--unbuffered",
                f"--time={max(1, math.ceil(self.deadline_s / 60)) + 1}"]
        if self.host.site.partition:
            opts.append(f"--partition={self.host.site.partition}")
        if self.reservation:
            opts.append(f"--reservation={self.reservation}")
        script = (f'export PATH={PATH}; printf "{JOB_MARK} %s\\n" "$SLURM_JOB_ID" >&2; '
                  'exec /bin/sh -c "$1"')
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, daemon=True,
                                             name=f"slurm-{self.node}")
            self._watcher.start()
        return " ".join(shlex.quote(a) for a in [*opts, "/bin/sh", "-c", script,
                                                   "rackready", inner])

    def _watch(self) -> None:
        """Until the job is seen running or ended: its id, and a pending job's end."""
        start = time.monotonic()
        hopeless = 0
        limit = start + self.deadline_s + self.pending_s + 60  # a session that never ends
        while not self._done.wait(self.poll_s) and time.monotonic() < limit:
            try:
                jobs = self.host.jobs_named(self.job_name)
            except SlurmError:
                continue  # asked again; without an id, stop() still cancels by name
            if not jobs:
                continue
            job_id, state, why = jobs[0]
            self.job_id = self.job_id or job_id
            if state != "PENDING":
                return  # running or ended: the session's own end says the rest
            hopeless = hopeless + 1 if why.startswith(_HOPELESS) else 0
            waited = time.monotonic() - start
            if waited >= self.pending_s or (hopeless >= 2 and waited >= self.hopeless_s):
                self.never_started = (f"Slurm job {self.job_id} never started: PENDING"
                                      f"{f' ({why})' if why else ''} after {waited:.0f} s; "
                                      "cancelled")
                self.host.cancel_named(self.job_name)
                return

    def finish(self) -> None:
        """The session is over: the watcher stops; a job it never saw is looked up once
        (a short job can run and end between two polls)."""
        self._done.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=self.host.timeout_s + self.poll_s)
        if self._watcher is None or self.job_id or self.never_started:
            return
        try:
            jobs = self.host.jobs_named(self.job_name)
        except SlurmError:
            return
        if jobs:
            self.job_id = jobs[0][0]
        else:  # Slurm never had a job of this name: srun was refused before any ran
            self.never_started = ("Slurm ran no job"
                                  + (f": {self.last_slurm_line}" if self.last_slurm_line
                                     else ""))

    def stderr_line(self, line: str) -> str | None:
        """Notes a line of srun's stderr; returns a status for the board, if any. A job id
        in the line is never taken: the status names the id squeue gave, if any yet."""
        job = f" {self.job_id}" if self.job_id else ""
        if _JOB_LINE.match(line):
            return f"running as Slurm job{job}"
        if _QUEUED.match(line):
            return f"queued in Slurm{f' (job{job})' if job else ''}"
        if _ENDED.search(line):
            self.last_slurm_line = one_line(line)
        return None

    def problem(self) -> str:
        """Why the job left no result, in Slurm's words: a job that never started, its
        state and reason where Slurm still has the job, else srun's own last error line."""
        self.finish()
        if self.never_started:
            return self.never_started
        state, why = self.host.job(self.job_id) if self.job_id else ("", "")
        # the line is srun's or the job's own: never one naming another job
        named = _NAMED_JOB.search(self.last_slurm_line)
        line = "" if named and named.group(1) != self.job_id else self.last_slurm_line
        if state in ("COMPLETED", "RUNNING", "COMPLETING"):
            return ""  # Slurm saw it run to its end: the node's own exit says the rest
        if state:
            job = f"Slurm job {self.job_id} {state}" + (f" ({why})" if why else "")
            return job + (f": {line}" if line else "")
        return f"Slurm: {line}" if line else ""

    def stop(self) -> None:
        """Cancels this launch's own job: by the name it chose, so a job squeue has not
        shown yet is cancelled too, and never a job some line of the stream named."""
        self._done.set()
        self.host.cancel_named(self.job_name)
