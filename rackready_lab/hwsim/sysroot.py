"""Write a node's simulated hardware (controller side).

The rendering itself lives in cli/sysroot_render.py (standard library only)
because node-side tools re-render after they change the state.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .cli.sysroot_render import harvest_writes, render_sysroot

__all__ = ["locked_node_state", "read_node_state", "render_sysroot", "write_node_state"]

STATE_REL = Path("var/lib/hwsim/state.json")
ROOT_REL = Path("var/lib/hwsim/root")


def write_node_state(state: dict[str, Any], node_root: Path,
                     seen: dict[Path, str] | None = None) -> None:
    """node_root/var/lib/hwsim/state.json plus the rendered sysroot beside it (seen: as
    render_sysroot's)."""
    path = Path(node_root) / STATE_REL
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)  # tools on the node never see a half-written file
    root = Path(node_root) / ROOT_REL
    root.mkdir(parents=True, exist_ok=True)
    render_sysroot(state, root, seen=seen)


def read_node_state(node_root: Path) -> dict[str, Any]:
    """The node's current state, with what its tools changed (modules, NIC settings)."""
    return json.loads((Path(node_root) / STATE_REL).read_text())


@contextlib.contextmanager
def locked_node_state(node_root: Path) -> Iterator[dict[str, Any]]:
    """Read-modify-write of a running node's state from the controller.

    Takes the same lock as the node's own tools (cli/common.locked_state): the
    node's daemons rewrite the state while it runs, and an unlocked fault or heal
    could be overwritten by, or overwrite, one of their updates.
    """
    path = Path(node_root) / STATE_REL
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = read_node_state(node_root)
        root = Path(node_root) / ROOT_REL
        # what the node wrote into sysfs since (ECN) stays
        seen = harvest_writes(state, root) if root.is_dir() else None
        yield state
        write_node_state(state, node_root, seen)
