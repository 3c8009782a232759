"""One BMC's state file: read-modify-write under a lock, replaced atomically.

The BMC process and the lab's controller-side entry points (fault, heal,
reboot) both change the file; the lock keeps their updates from overwriting
each other, and every access lets time pass first (jobs finish on their own).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .resources import advance


def write(path: Path, state: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(state, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[dict[str, Any]]:
    """The state to change in place; written back when the block ends without error."""
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = json.loads(path.read_text())
        before = json.dumps(state, sort_keys=True)
        advance(state)
        yield state
        if json.dumps(state, sort_keys=True) != before:
            write(path, state)


def read(path: Path) -> dict[str, Any]:
    with locked(path) as state:
        return state
