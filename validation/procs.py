"""Process sessions the running checks started, so a check that times out takes them along.

Every workload runs in its own session (torchrun with start_new_session): its workers and
their children share one process group whose id is the leader's pid. Killing that group is
the only way to free the GPUs when a check is abandoned; the runner does it before the next
check starts (runner.run_check), and waits until /proc shows none of the group left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path


class NotRun(RuntimeError):
    """A check that could not start: an earlier failure took what it needs, or its plan
    found the node cannot hold its job.

    The runner records it as status 'error' with this message alone (no class name)."""


class TimedOut(RuntimeError):
    """A workload ran past its deadline and was killed; the runner records 'timeout'."""


_lock = threading.Lock()
_sessions: dict[int, str] = {}  # pgid -> what it runs
_on_kill: dict[int, Callable[[str], None]] = {}  # told why, when kill_all takes it


def register(pgid: int, label: str, on_kill: Callable[[str], None] | None = None) -> None:
    with _lock:
        _sessions[pgid] = label
        if on_kill is not None:
            _on_kill[pgid] = on_kill


def unregister(pgid: int) -> None:
    with _lock:
        _sessions.pop(pgid, None)
        _on_kill.pop(pgid, None)


def registered() -> dict[int, str]:
    with _lock:
        return dict(_sessions)


def _scan(proc: Path = Path("/proc")) -> list[tuple[int, int, int, int]]:
    """(pid, ppid, pgrp, session) of every live process (zombies hold nothing: left out)."""
    rows = []
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        # fields after the parenthesised command: state ppid pgrp session ...
        f = stat.rsplit(")", 1)[1].split()
        if f[0] != "Z":
            rows.append((int(d.name), int(f[1]), int(f[2]), int(f[3])))
    return rows


def group_members(pgid: int, proc: Path = Path("/proc")) -> list[int]:
    """Live pids whose process group is pgid."""
    return [pid for pid, _, pgrp, _ in _scan(proc) if pgrp == pgid]


def _tree(root: int, rows: list[tuple[int, int, int, int]]) -> set[int]:
    kids: dict[int, list[int]] = {}
    for pid, ppid, _, _ in rows:
        kids.setdefault(ppid, []).append(pid)
    out, todo = {root}, [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def kill_group(leader: int, wait_s: float = 30.0) -> list[int]:
    """SIGKILL a session leader's whole tree and wait until none of it is left; returns
    survivors (none unless a process hangs in the kernel, e.g. in a GPU driver call).

    torchrun starts each worker in a session of its own, so killing torchrun's process
    group alone leaves the workers (and what they started) running: the tree is walked
    while torchrun still holds it, and every session found in it is killed, so a process
    that was reparented or double-forked within those sessions goes too."""
    unregister(leader)
    sessions = {leader}
    end = time.monotonic() + wait_s
    while True:
        rows = _scan()
        tree = _tree(leader, rows) & {r[0] for r in rows}
        sessions |= {sid for pid, _, _, sid in rows if pid in tree and sid != 0}
        sessions.discard(os.getsid(0))  # never our own session (the leader's tree is below us)
        left = [pid for pid, _, pgrp, sid in rows
                if pid in tree or sid in sessions or pgrp in sessions]
        if not left or time.monotonic() > end:
            return left
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def kill_all(why: str, wait_s: float = 30.0) -> dict[str, list[int]]:
    """Kill every registered session (telling its owner why); what survived, by label
    (empty when all are gone)."""
    survivors = {}
    for pgid, label in registered().items():
        with _lock:
            tell = _on_kill.get(pgid)
        if tell is not None:
            tell(why)
        left = kill_group(pgid, wait_s)
        if left:
            survivors[label] = left
    return survivors


def descendants(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """Live descendants of pid (its children's children too), from /proc's ppid fields."""
    children: dict[int, list[int]] = {}
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_descendants(wait_s: float = 30.0) -> list[int]:
    """SIGKILL every process this one started (a probe command an abandoned check left
    running); returns those still alive after wait_s."""
    end = time.monotonic() + wait_s
    while True:
        left = descendants(os.getpid())
        if not left or time.monotonic() > end:
            return left
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
