"""Slurm from the controller: commands on the site's submit host over SSH.

A node's suite runs as a Slurm job of its own: `srun` on the submit host, exclusive on
that node, so its stdout (the event stream) comes back through the same pump as over
SSH; the bundle is shipped to the node and the results fetched from it as before.
Drain and resume go through scontrol there, with validation.drain's rule (a node drained
by anyone else is left as it is). Everything a Slurm command prints is untrusted text:
one sanitized line where it reaches a problem.
"""

from __future__ import annotations

import contextlib
import math
import re
import shlex
from dataclasses import dataclass

import paramiko

from rackready.remote import ssh
from rackready.remote.runner import run_command
from rackready.sanitize import one_line
from rackready.site.slurm import SlurmSite
from validation.drain import DrainError, NodeState, Scontrol, parse_show_node

JOB_MARK = "rackready-slurm-job"  # the job's first stderr line: "<mark> <job id>"
_JOB_LINE = re.compile(rf"^{JOB_MARK} (\d+)$")
_QUEUED = re.compile(r"^srun: job (\d+) queued and waiting for resources")
# Slurm's own words for a job that ended without finishing (slurmstepd/srun on stderr)
_ENDED = re.compile(r"\*\*\* (?:JOB|STEP) [\d.]+ ON \S+ CANCELLED AT \S+(?: DUE TO ([A-Z ]+))?"
                    r"|srun: error: (.+)|srun: (Force Terminated job.*|Job step aborted.*)")
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
    """How one node's suite goes through Slurm (rackready.remote.session uses it)."""

    host: SubmitHost
    node: str
    deadline_s: float
    reservation: str = ""
    job_id: str = ""
    last_slurm_line: str = ""

    def command(self, inner: str) -> str:
        """srun on the submit host: one task, the whole node, the run's time limit; the
        job first names itself on stderr, then runs the session's command as given."""
        opts = ["srun", "--job-name=rackready-validate", f"--nodelist={self.node}",
                "--nodes=1", "--ntasks=1", "--exclusive", "--export=NONE", "--unbuffered",
                f"--time={max(1, math.ceil(self.deadline_s / 60)) + 1}"]
        if self.host.site.partition:
            opts.append(f"--partition={self.host.site.partition}")
        if self.reservation:
            opts.append(f"--reservation={self.reservation}")
        script = (f'export PATH={PATH}; printf "{JOB_MARK} %s\\n" "$SLURM_JOB_ID" >&2; '
                  'exec /bin/sh -c "$1"')
        return " ".join(shlex.quote(a) for a in [*opts, "/bin/sh", "-c", script,
                                                   "rackready", inner])

    def stderr_line(self, line: str) -> str | None:
        """Notes a line of srun's stderr; returns a status for the board, if any."""
        job = _JOB_LINE.match(line)
        if job:
            self.job_id = job.group(1)
            return f"running as Slurm job {self.job_id}"
        queued = _QUEUED.match(line)
        if queued:
            self.job_id = queued.group(1)
            return f"queued in Slurm (job {self.job_id})"
        if _ENDED.search(line):
            self.last_slurm_line = one_line(line)
        return None

    def problem(self) -> str:
        """Why the job left no result, in Slurm's words: its state and reason where Slurm
        still has the job, else srun's own last error line."""
        state, why = self.host.job(self.job_id) if self.job_id else ("", "")
        if state and state not in ("COMPLETED", "RUNNING", "COMPLETING"):
            job = f"Slurm job {self.job_id} {state}" + (f" ({why})" if why else "")
            return job + (f": {self.last_slurm_line}" if self.last_slurm_line else "")
        if self.last_slurm_line:
            return f"Slurm: {self.last_slurm_line}"
        return ""

    def stop(self) -> None:
        if self.job_id:
            self.host.cancel(self.job_id)
