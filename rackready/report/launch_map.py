"""The node report's launch map: the table (rank, GPU, NIC, NUMA, CPUs) and the ready
launch snippets, from the measurements of the node's pcie.launch_map check.

The node is untrusted: each rank is read back through validation.launch_map's checked
reader (device names, topo -m words and integers only) before anything is written into
a shell snippet; a malformed map is left out of the report, never half-shown."""

from __future__ import annotations

from typing import Any

from validation.launch_map import LaunchMap, RankBinding, cpulist, slurm_line, torchrun_wrapper
from validation.workloads.common_env import roce_env

CHECK, METRIC = "pcie.launch_map", "launch.rank_binding"


def _binding(labels: dict[str, Any]) -> RankBinding:
    nic = labels.get("nic")
    return RankBinding.from_dict({
        "rank": labels.get("rank"), "gpu": labels.get("gpu"),
        "bus_id": labels.get("bus_id", ""), "serial": labels.get("serial", ""),
        "nic": None if nic in (None, "", "none") else nic, "path": labels.get("path", "none"),
        "numa": labels.get("numa") or None,
        "cpus": [c for part in str(labels.get("cpus") or "").split(",") if part
                 for c in _range(part)],
        "switch_nics": [n for n in str(labels.get("switch_nics") or "").split("+") if n],
        "reason": labels.get("reason", "")})


def _range(part: str) -> list[int]:
    lo, _, hi = part.partition("-")
    if not lo.isdigit() or (hi and not hi.isdigit()) or int(hi or lo) - int(lo) > 4096:
        raise ValueError(f"launch map: CPU range {part!r}")
    return list(range(int(lo), int(hi or lo) + 1))


def from_result(result: dict[str, Any], site: dict[str, Any] | None = None
                ) -> dict[str, Any] | None:
    """{"ranks": [...], "torchrun": str, "slurm": str, "nccl_env": {...}} or None (no map
    measured). site: the controller's site file for the node (the plan's, never the
    node's word): on RoCE the snippets export NCCL_IB_TC and NCCL_IB_GID_INDEX from it."""
    nccl_env = roce_env(site or {})
    rows = [m for c in result.get("checks", []) if c.get("check") == CHECK
            for m in c.get("measurements", []) if m.get("name") == METRIC]
    if not rows:
        return None
    try:
        ranks = sorted((_binding(m.get("labels") or {}) for m in rows), key=lambda b: b.rank)
        lmap = LaunchMap.from_dict({"ranks": [b.to_dict() for b in ranks]})
    except (ValueError, TypeError):
        return None
    return {
        "ranks": [{"rank": b.rank, "gpu": b.gpu, "bus_id": b.bus_id, "serial": b.serial,
                   "nic": b.nic or "", "path": b.path,
                   "numa": "" if b.numa is None else str(b.numa), "cpus": cpulist(b.cpus),
                   "reason": b.reason} for b in lmap.ranks],
        "torchrun": torchrun_wrapper(lmap, nccl_env),
        "slurm": slurm_line(lmap),  # runs bind.sh: the NCCL settings are there
        "nccl_env": nccl_env,
    }
