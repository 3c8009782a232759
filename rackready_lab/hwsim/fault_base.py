"""What every fault module shares: a fault function's type, its error, the GPU a target
names. faults.py registers the fault modules (FAULTS); they import this, never faults.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FaultFn = Callable[[dict[str, Any], str | None], dict[str, Any]]


class FaultError(ValueError):
    """Unknown fault kind or target; the message is one line."""


def target_gpu(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    """Target by index, serial, UUID or bus id; GPU 0 when none is given."""
    gpus = [g for g in state["gpus"] if g.get("present", True)]
    if target is None:
        return gpus[0]
    for g in gpus:
        if target in (str(g["index"]), g["serial"], g["uuid"], g["bdf"]):
            return g
    raise FaultError(f"no GPU {target!r} on {state['node']} (index, serial, UUID or bus id)")


def gpu_component(g: dict[str, Any]) -> dict[str, Any]:
    return {"type": "gpu", "index": g["index"], "serial": g["serial"], "uuid": g["uuid"],
            "bus_id": g["bdf"]}
