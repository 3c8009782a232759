"""A lab node's load as its BMC sees it: the CPU time its processes use.

A lab node is a systemd-nspawn container on the controller: its processes live in their
own PID namespace, whose init is a descendant of the nspawn process (nodes.boot() writes
that pid to <node dir>/nspawn.pid). The sampler sums utime + stime (and cutime + cstime:
the time of children already reaped, so a worker that came and went between two samples
still counts) of every process in that namespace, once a period, and turns the CPU rate
into a load fraction u in [0, 1]: about half a CPU busy or more is full load (the lab runs
up to three nodes on a two-core machine), an idle node (systemd, sshd, journald) is 0.

Pure parts (stat parsing, CPU seconds of a pid set, rate -> u) take a /proc root, so
tests can run them on their own processes or a fake tree, without root.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

PROC = Path("/proc")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PERIOD_S = 1.0
IDLE_CPU = 0.02  # CPUs busy below which a node counts as idle
FULL_CPU = 0.5  # CPUs busy from which it counts as fully loaded


def parse_stat(text: str) -> tuple[int, int]:
    """(parent pid, clock ticks of the process and its reaped children) of a
    /proc/<pid>/stat line (the command name, in parentheses, may hold spaces)."""
    fields = text.rsplit(")", 1)[1].split()
    # after the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt
    # cmajflt utime stime cutime cstime ...
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return ppid, utime + stime + cutime + cstime


def _stat(pid: int, proc: Path) -> tuple[int, int] | None:
    try:
        return parse_stat((proc / str(pid) / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None  # gone meanwhile, or not readable


def cpu_seconds(pids: Iterable[int], proc: Path = PROC) -> float:
    """CPU seconds used by pids and their reaped children (pids gone meanwhile: 0)."""
    ticks = 0
    for pid in pids:
        st = _stat(pid, proc)
        if st is not None:
            ticks += st[1]
    return ticks / CLK_TCK


def rate_to_load(rate: float, idle: float = IDLE_CPU, full: float = FULL_CPU) -> float:
    """CPUs busy -> load fraction in [0, 1] (linear between idle and full)."""
    return min(1.0, max(0.0, (rate - idle) / (full - idle)))


def all_pids(proc: Path = PROC) -> list[int]:
    return [int(p.name) for p in proc.iterdir() if p.name.isdigit()]


def pid_ns(pid: int, proc: Path = PROC) -> str | None:
    """The PID namespace a process is in ("pid:[4026531836]"), None if gone or hidden."""
    try:
        return os.readlink(proc / str(pid) / "ns" / "pid")
    except OSError:
        return None


def ns_pids(ns: str, proc: Path = PROC) -> list[int]:
    """The processes (thread group leaders) in PID namespace ns."""
    return [pid for pid in all_pids(proc) if pid_ns(pid, proc) == ns]


def container_ns(nspawn_pid: int, proc: Path = PROC) -> str | None:
    """The PID namespace of the container nspawn_pid runs: that of its first descendant
    whose namespace is not nspawn's own (the container's init); None if none yet."""
    own = pid_ns(nspawn_pid, proc)
    if own is None:
        return None
    parents: dict[int, list[int]] = {}
    for pid in all_pids(proc):
        st = _stat(pid, proc)
        if st is not None:
            parents.setdefault(st[0], []).append(pid)
    todo = sorted(parents.get(nspawn_pid, []))
    seen = set()
    while todo:
        pid = todo.pop(0)
        if pid in seen:
            continue
        seen.add(pid)
        ns = pid_ns(pid, proc)
        if ns is not None and ns != own:
            return ns
        todo += sorted(parents.get(pid, []))
    return None


def node_pids(pidfile: Path, proc: Path = PROC) -> Callable[[], list[int]]:
    """A pid source for a lab node: the processes in the PID namespace of the container
    whose nspawn pid is in pidfile (none while the node is down)."""
    cache: dict[str, object] = {"pid": None, "ns": None}

    def pids() -> list[int]:
        try:
            nspawn = int(pidfile.read_text())
        except (OSError, ValueError):
            return []
        if cache["pid"] != nspawn or cache["ns"] is None:  # booted again: a new namespace
            cache["pid"], cache["ns"] = nspawn, container_ns(nspawn, proc)
        ns = cache["ns"]
        return ns_pids(ns, proc) if isinstance(ns, str) else []

    return pids


class LoadSampler:
    """Measures a pid set's CPU rate once a period (a daemon thread); u is the load
    fraction of the last period, rate the CPUs busy."""

    def __init__(self, pids: Callable[[], Iterable[int]], period: float = PERIOD_S,
                 proc: Path = PROC, clock: Callable[[], float] = time.monotonic) -> None:
        self.pids, self.period, self.proc, self.clock = pids, period, proc, clock
        self.u = 0.0
        self.rate = 0.0
        self._last: tuple[float, float, frozenset[int]] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> float:
        """One measurement: the rate since the previous one (the first only starts)."""
        pids = frozenset(self.pids())
        now, seconds = self.clock(), cpu_seconds(pids, self.proc)
        last, self._last = self._last, (now, seconds, pids)
        if not pids:
            self.rate, self.u = 0.0, 0.0
        elif last is not None and now > last[0] and last[2] & pids:
            # a process that went unreaped takes its time with it: never below 0
            self.rate = max(0.0, (seconds - last[1]) / (now - last[0]))
            self.u = rate_to_load(self.rate)
        return self.u

    def start(self) -> LoadSampler:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="bmc-load", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError):  # /proc raced us: measure next period
                self.sample()
            self._stop.wait(self.period)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
