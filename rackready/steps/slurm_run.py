"""`invoke validate --via slurm [--drain]`: the run's Slurm side around the node sessions.

Before: each node's state in Slurm. A node drained by anyone else is left out (INCOMPLETE
with their reason; it is never touched). A node rackready drained is left out too unless
--drain, which resumes it inside a maintenance reservation of the run (so no other job
lands on it before its verdict). After the controller has judged: with --drain a FAIL or
INCOMPLETE node is drained with one line naming what failed, a node rackready drained that
now passes is resumed (validation.drain's rule), and the reservation is removed.

Draining is for what a node itself failed. A node Slurm cannot run a job on (unknown to it,
DOWN, NOT_RESPONDING, FUTURE) and a node whose job never started (pending with squeue's
reason, cancelled; rackready.remote.slurm) are the scheduler's state: INCOMPLETE with
Slurm's words and never drained by the run (`scheduler`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import paramiko

from rackready.errors import UserError
from rackready.remote.slurm import (
    RemoteScontrol,
    SlurmError,
    SlurmLaunch,
    SubmitHost,
    step_command,
)
from rackready.sanitize import one_line
from rackready.site import slurm as site_slurm
from rackready.site.inventory import Node
from validation.drain import apply, reason

# (node, command) -> (the SSH client to run it on, the command as a task of the allocation)
StepLauncher = Callable[[str, str], tuple[paramiko.SSHClient, str]]


@dataclass
class SlurmRun:
    host: SubmitHost
    drain: bool
    deadline_s: float
    reservation: str = ""
    left_out: dict[str, str] = field(default_factory=dict)  # node -> why (INCOMPLETE)
    actions: dict[str, str] = field(default_factory=dict)  # node -> what Slurm was told
    jobs: dict[str, str] = field(default_factory=dict)  # node -> its job's id
    rack_jobs: list[str] = field(default_factory=list)  # the rack step's allocations
    scheduler: dict[str, str] = field(default_factory=dict)  # node -> Slurm's state: no drain

    @classmethod
    def open(cls, nodes: list[Node], *, partition: str | None, drain: bool, run_id: str,
             deadline_s: float) -> SlurmRun:
        site = site_slurm.settings(nodes, partition)
        try:
            host = SubmitHost(site)
        except UserError as exc:
            raise UserError(f"--via slurm: {exc}") from None
        sr = cls(host, drain, deadline_s)
        try:
            sr._prepare(nodes, run_id)
        except SlurmError as exc:
            sr.close()
            raise UserError(f"--via slurm: {exc}") from None
        return sr

    def _prepare(self, nodes: list[Node], run_id: str) -> None:
        ours = []
        for n in nodes:
            try:
                state = self.host.node_state(n.name)
            except SlurmError as exc:
                self.left_out[n.name] = self.scheduler[n.name] = f"not usable in Slurm: {exc}"
                continue
            flags = set(state.state.upper().split("+"))
            down = sorted(flags & _CANNOT_RUN)
            if down and not state.drained:  # a drained node follows the drain rule below
                why = f" ({one_line(state.reason)})" if state.reason else ""
                self.left_out[n.name] = self.scheduler[n.name] = (
                    f"Slurm cannot run a job on it: State={one_line(state.state)}{why}")
                continue
            if not state.drained:
                continue
            why = one_line(state.reason) or "no reason"
            if not state.ours:
                self.left_out[n.name] = f"drained in Slurm by someone else ({why}): left as it is"
            elif not self.drain:
                self.left_out[n.name] = (f"drained in Slurm by rackready ({why}): --drain "
                                         "resumes it for the run")
            else:
                ours.append(n.name)
        if self.drain:
            usable = [n.name for n in nodes if n.name not in self.left_out]
            if usable:
                self.reservation = _reservation_name(run_id)
                self.host.reserve(self.reservation, usable,
                                  max(1, math.ceil(self.deadline_s / 60)) + 10)
            for name in ours:  # inside the reservation: only the run's jobs land there
                self.host.run(["scontrol", "update", f"nodename={name}", "state=resume"],
                              admin=True)
                self.actions[name] = "resumed for the run (drained by rackready)"

    def launch(self, node: str) -> SlurmLaunch:
        return SlurmLaunch(self.host, node, self.deadline_s, reservation=self.reservation,
                           pending_s=self.host.site.pending_s)

    @contextmanager
    def allocation(self, members: list[str], timeout_s: float) -> Iterator[StepLauncher]:
        """The rack step's nodes in one Slurm allocation; yields how a command becomes one
        of its tasks on a node (run on the submit host); the allocation ends after."""
        job = self.host.allocate(members, max(1, math.ceil(timeout_s / 60)) + 1,
                                 self.reservation)
        self.rack_jobs.append(job)
        try:
            yield lambda node, command: (self.host.client, step_command(job, node, command))
        finally:
            self.host.cancel(job)

    def ran(self, launch: SlurmLaunch) -> None:
        """After the node's session: its job as squeue named it, and whether it never ran."""
        launch.finish()
        self.jobs[launch.node] = launch.job_id
        if launch.never_started:
            self.scheduler[launch.node] = launch.never_started

    def settle(self, outcomes: dict[str, tuple[str, str]]) -> None:
        """--drain: each node's outcome and reason, as decided, to Slurm."""
        if not self.drain:
            return
        for name, (outcome, why) in outcomes.items():
            if name in self.scheduler:  # Slurm's state, not a failure of the node
                self.actions[name] = f"not drained: {self.scheduler[name]} (Slurm's state)"
                continue
            healthy = outcome == "PASS"
            words = why if outcome == "FAIL" else f"{outcome}: {why}"
            ok, done = apply(healthy, reason(words), RemoteScontrol(self.host, name))
            if done or not ok:
                self.actions[name] = done if ok else f"not done: {done}"
            elif healthy and name in self.actions:
                self.actions[name] = "resumed (passed)"

    def close(self) -> None:
        try:
            if self.reservation:
                self.host.unreserve(self.reservation)
        except SlurmError as exc:
            print(f"Slurm: could not delete reservation {self.reservation}: {exc}")
        finally:
            self.host.close()


# scontrol's state flags of a node no job can start on now (drained nodes are judged by
# validation.drain's rule instead)
_CANNOT_RUN = {"DOWN", "NOT_RESPONDING", "FUTURE"}


def _reservation_name(run_id: str) -> str:
    return "rackready-" + re.sub(r"[^A-Za-z0-9_-]", "-", run_id)[:48]
