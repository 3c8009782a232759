"""Drain or resume this node in Slurm through `scontrol`, as NHC does.

Unhealthy: `scontrol update nodename=<node> state=drain reason="rackready: ..."`. Healthy
and drained with a reason of ours (it starts "rackready:"): `state=resume`. A node drained
by anyone else is left as it is, healthy or not: their reason stands. The node's name is
SLURMD_NODENAME (slurmd sets it for a prolog; a wrapper may export it), else
`hostname -s`; scontrol is found on PATH.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass

PREFIX = "rackready:"
REASON_MAX = 128  # Slurm keeps longer reasons, but sinfo -R and NHC stay around this


class DrainError(RuntimeError):
    """scontrol missing, failing or timing out; the message is one line."""


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def sanitize(text: str, limit: int = REASON_MAX) -> str:
    """One line of printable ASCII without quotes, at most `limit` characters."""
    flat = " ".join(re.sub(r"[^\x20-\x7e]", " ", text).replace('"', "'").split())
    return flat if len(flat) <= limit else flat[:limit - 3].rstrip() + "..."


def reason(words: str) -> str:
    return sanitize(f"{PREFIX} {words}")


@dataclass(frozen=True)
class NodeState:
    state: str  # IDLE+DRAIN, MIXED, DOWN+DRAIN+NOT_RESPONDING, ...
    reason: str  # without Slurm's trailing [user@time]; "" when none

    @property
    def drained(self) -> bool:  # draining (jobs still running) or drained
        return "DRAIN" in self.state.upper().split("+")

    @property
    def ours(self) -> bool:
        return self.reason.startswith(PREFIX)


def parse_show_node(text: str) -> NodeState:
    """State= and Reason= of `scontrol show node NAME` (one record, multi-line or -o)."""
    state = re.search(r"(?:^|\s)State=(\S+)", text)
    if state is None:
        raise DrainError("scontrol show node: no State= in its output")
    why = re.search(r"(?:^|\s)Reason=(.*)$", text, re.MULTILINE)
    text_reason = why.group(1).strip() if why else ""
    # Slurm appends who set it and when: "... [root@2026-12-02T09:41:20]"
    text_reason = re.sub(r"\s*\[[^\]\s]*@[^\]\s]*\]$", "", text_reason)
    return NodeState(state.group(1), "" if text_reason in ("", "(null)", "None") else text_reason)


class Scontrol:
    def __init__(self, node: str | None = None, timeout_s: float = 5.0) -> None:
        self.node = node or node_name()
        self.timeout_s = timeout_s
        self.path = shutil.which("scontrol")

    def _run(self, *args: str) -> str:
        if self.path is None:
            raise DrainError("scontrol not found on PATH")
        try:
            p = subprocess.run([self.path, *args], capture_output=True, text=True,
                               timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise DrainError(f"scontrol {args[0]} ran past {self.timeout_s:g} s") from None
        except OSError as exc:
            raise DrainError(f"scontrol: {exc.strerror}") from None
        if p.returncode != 0:
            err = (p.stderr or p.stdout).strip().splitlines()
            raise DrainError(f"scontrol {args[0]} exited {p.returncode}: "
                             f"{sanitize(err[-1]) if err else 'no output'}")
        return p.stdout

    def show(self) -> NodeState:
        return parse_show_node(self._run("show", "node", self.node))

    def drain(self, why: str) -> None:
        self._run("update", f"nodename={self.node}", "state=drain", f"reason={why}")

    def resume(self) -> None:
        self._run("update", f"nodename={self.node}", "state=resume")


def apply(healthy: bool, why: str, sc: Scontrol | None = None) -> tuple[bool, str]:
    """Drain (unhealthy) or resume (healthy, drained by us); (ok, what was done in words).

    ok is False when an unhealthy node could not be drained, or scontrol is missing: then
    the gate itself has failed and says so."""
    sc = sc or Scontrol()
    if sc.path is None:
        return False, f"scontrol not found on PATH: --drain cannot drain or resume {sc.node}"
    try:
        current = sc.show()
    except DrainError as exc:
        if healthy:  # nothing to undo that we know of; a healthy node stays healthy
            return True, f"could not read {sc.node}'s state ({exc})"
        current = None
    try:
        if healthy:
            assert current is not None
            if current.drained and current.ours:
                sc.resume()
                return True, f"resumed {sc.node} (drained by rackready)"
            return True, ""
        if current is not None and current.drained and not current.ours:
            return True, (f"{sc.node} already drained by someone else "
                          f"({sanitize(current.reason, 60) or 'no reason'}): left as it is")
        sc.drain(why)
        return True, f"drained {sc.node}"
    except DrainError as exc:
        return False, f"{'resume' if healthy else 'drain'} of {sc.node} failed: {exc}"
