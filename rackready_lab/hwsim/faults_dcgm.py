"""DCGM fault kinds: what DCGM's host engine sees and its health watches report.

Same contract as faults.py: each function edits the state copy it is given and returns
the record (the component it hits, in the words a technician uses) for state["faults"].
"""

from __future__ import annotations

from typing import Any

from .fault_base import FaultFn
from .fault_base import gpu_component as _component
from .fault_base import target_gpu as _gpu


def _dcgm_health_fail(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    # a double-bit ECC error the driver counted before any XID was logged: DCGM's memory
    # watch reports it as a Memory system Failure on that GPU (GPU 0 unless targeted)
    g = _gpu(state, target)
    g["ecc"]["volatile"]["dram_uncorrectable"] += 1
    g["ecc"]["aggregate"]["dram_uncorrectable"] += 1
    return {"component": _component(g) | {"system": "Memory system"},
            "description": f"GPU {g['index']} serial {g['serial']}: DCGM health watch Memory "
                           "system Failure (volatile double-bit ECC error)"}


def _dcgm_gpu_unseen(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    # the driver lists the GPU, DCGM's host engine does not attach to it (the last GPU
    # unless targeted): one GPU fewer in dcgmi discovery -l and in DCGM's groups
    gpus = [g for g in state["gpus"] if g.get("present", True) and not g.get("lost")]
    g = gpus[-1] if target is None else _gpu(state, target)
    g["dcgm_unseen"] = True
    return {"component": _component(g),
            "description": f"GPU {g['index']} serial {g['serial']} ({g['bdf']}): listed by the "
                           "driver, not by DCGM's host engine"}


DCGM_FAULTS: dict[str, FaultFn] = {
    "dcgm-health-fail": _dcgm_health_fail,
    "dcgm-gpu-unseen": _dcgm_gpu_unseen,
}
