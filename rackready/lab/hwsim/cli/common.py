"""Shared helpers of the node-side stand-in tools (standard library only).

The tools run on the lab nodes' system python3, so nothing here may import
rackready or any third-party package. State lives in one JSON file; the tools
that change hardware settings (mlxconfig set, mlnx_qos, modprobe, services)
rewrite it under a lock and re-render the simulated sysroot beside it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

DEFAULT_STATE = "/var/lib/hwsim/state.json"


class ToolError(Exception):
    """A user-facing failure: one line on stderr and a given exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def state_path() -> Path:
    return Path(os.environ.get("HWSIM_STATE", DEFAULT_STATE))


def sysroot_path() -> Path:
    # The rendered sysroot sits beside state.json (/var/lib/hwsim/root).
    return Path(os.environ.get("HWSIM_ROOT", str(state_path().parent / "root")))


def captures_dir() -> Path:
    env = os.environ.get("HWSIM_CAPTURES")
    if env:
        return Path(env)
    # In the repo and in the packages the captures sit one level above cli/.
    return Path(__file__).resolve().parent.parent / "captures"


def read_capture(name: str) -> str:
    path = captures_dir() / name
    try:
        return path.read_text()
    except OSError as exc:
        raise ToolError(f"hwsim: capture {path} unreadable: {exc.strerror}") from exc


def load_state() -> dict[str, Any]:
    path = state_path()
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ToolError(f"hwsim: no simulated hardware state at {path}") from exc
    except (OSError, ValueError) as exc:
        raise ToolError(f"hwsim: cannot read hardware state {path}: {exc}") from exc


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


def smi_timestamp() -> str:
    # nvidia-smi style: "Mon Nov 30 00:52:26 2026"
    return time.strftime("%a %b %d %H:%M:%S %Y")


def smi_bus_id(bdf: str) -> str:
    """0000:19:00.0 -> 00000000:19:00.0 (nvidia-smi pads the domain to 8)."""
    domain, rest = bdf.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


def visible_gpus(state: dict[str, Any]) -> list[dict[str, Any]]:
    """GPUs the driver enumerates: present on the bus and not fallen off it."""
    return [g for g in state.get("gpus", []) if g.get("present", True) and not g.get("lost")]


def lost_gpus(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [g for g in state.get("gpus", []) if g.get("present", True) and g.get("lost")]


def present(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in items if i.get("present", True)]


def module_loaded(state: dict[str, Any], name: str) -> bool:
    return name in state.get("modules", [])


def fault_active(state: dict[str, Any], kind: str) -> bool:
    return any(f.get("kind") == kind for f in state.get("faults", []))


def pcie_gen_of_speed(speed: str) -> int:
    """sysfs link speed text -> PCIe generation."""
    table = {"2.5": 1, "5.0": 2, "8.0": 3, "16.0": 4, "32.0": 5, "64.0": 6}
    return table.get(speed.split()[0], 0)


SPEED_OF_GEN = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe",
                4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}
