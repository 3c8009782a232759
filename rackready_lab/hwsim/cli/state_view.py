"""The stand-ins' read-only view of the simulated node (standard library only): where its
state and the captures are, reading them, and the small lookups over the state that the
tools and the sysroot renderer share. It imports no other hwsim module: the renderer
(sysroot_render, pci, fm_log) builds on it, and common.py builds on both.
"""

from __future__ import annotations

import json
import os
import time
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
