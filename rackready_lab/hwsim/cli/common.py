"""Shared helpers of the node-side stand-in tools (standard library only).

The tools run on the lab nodes' system python3, so nothing here may import
rackready or any third-party package. State lives in one JSON file; the tools
that change hardware settings (mlxconfig set, mlnx_qos, modprobe, services)
rewrite it under a lock and re-render the simulated sysroot beside it. The read-only
helpers live in state_view.py (which the renderer imports); the tools take them from here.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .state_view import (
    DEFAULT_STATE,
    SPEED_OF_GEN,
    ToolError,
    captures_dir,
    fault_active,
    load_state,
    lost_gpus,
    module_loaded,
    pcie_gen_of_speed,
    present,
    read_capture,
    smi_bus_id,
    smi_timestamp,
    state_path,
    sysroot_path,
    visible_gpus,
)

# the tools' one import: the read-only helpers (state_view) and the writes and run below
__all__ = [
    "DEFAULT_STATE", "SPEED_OF_GEN", "ToolError", "captures_dir", "fault_active", "load_state",
    "lost_gpus", "module_loaded", "pcie_gen_of_speed", "present", "read_capture", "smi_bus_id",
    "smi_timestamp", "state_path", "sysroot_path", "visible_gpus", "advance_faults", "harvest",
    "locked_state", "run", "save_state",
]


@contextlib.contextmanager
def locked_state(prune: bool = True) -> Iterator[dict[str, Any]]:
    """Read-modify-write of state.json; the sysroot is re-rendered on exit (prune: as
    save_state)."""
    path = state_path()
    lock_path = path.with_name(path.name + ".lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = load_state()
        seen = harvest(state)
        yield state
        save_state(state, prune, seen)


def harvest(state: dict[str, Any]) -> dict[Path, str] | None:
    """Writes into the sysroot's writable sysfs files (ECN enables) into the state first;
    what was read, for the render (sysroot_render.render_sysroot's `seen`)."""
    from . import sysroot_render  # local import: keeps read-only tools light

    root = sysroot_path()
    return sysroot_render.harvest_writes(state, root) if root.is_dir() else None


def save_state(state: dict[str, Any], prune: bool = True,
               seen: dict[Path, str] | None = None) -> None:
    from . import sysroot_render  # local import: keeps read-only tools light

    path = state_path()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    root = sysroot_path()
    if root.is_dir():
        sysroot_render.render_sysroot(state, root, prune, seen)


def advance_faults() -> None:
    """Faults in progress (an AER storm, a flapping link) raise their counters once per tool
    call: the calls are the simulated node's clock, so counters read at the start and at the
    end of a run differ, as on hardware whose error source is live. Each fault record lists
    its `ticks` ({"path": [...], "add": n}); nodes without such a fault pay one read. A fault's
    Fabric Manager log entries are written with the time of the first call after it."""
    from . import fm_log  # local import: keeps read-only tools light

    try:
        current = load_state()
    except ToolError:
        return  # no state: the tool itself says so
    if not (any(f.get("ticks") for f in current.get("faults", [])) or fm_log.pending(current)):
        return
    # ticks only raise counters: nothing the sysroot shows goes, so it is rendered in place
    with locked_state(prune=False) as state:
        fm_log.stamp(state)  # errors a fault recorded are logged now (fm_log's docstring)
        for fault in state.get("faults", []):
            for tick in fault.get("ticks", []):
                *parents, leaf = tick["path"]
                node: Any = state
                for key in parents:
                    node = node[key] if isinstance(node, list) else node.setdefault(key, {})
                node[leaf] = node.get(leaf, 0) + tick["add"]


def run(main: Callable[[list[str]], int], argv: list[str] | None = None) -> int:
    """Run a tool's main: ToolError -> one line on stderr, never a traceback."""
    try:
        advance_faults()
        return main(sys.argv[1:] if argv is None else argv)
    except ToolError as exc:
        print(str(exc), file=sys.stderr)
        return exc.code
    except BrokenPipeError:
        return 0
