"""Bind one torchrun rank to its place in the launch map (validation/launch_map.py).

The check pcie.launch_map writes the node's map; the workload checks hand its path to
every worker in $RACKREADY_LAUNCH_MAP (validation.workloads.launch). common.init calls
apply() before CUDA starts, so each rank runs as a real job should, with the environment
the report's bind.sh gives a customer's ranks (launch_map.env_for, one function for both):
- every GPU visible in the map's rank order, numbered in PCI bus order
  (CUDA_DEVICE_ORDER=PCI_BUS_ID), so CUDA device LOCAL_RANK is this rank's mapped GPU;
- NCCL_IB_HCA=<its NIC>:1, so NCCL's traffic off the node leaves through the NIC beside
  its GPU (a rank on NIC r's far side would cross the socket interconnect);
- its CPU share (os.sched_setaffinity), so its host threads and pinned buffers sit on
  the GPU's NUMA node.
A CPU share this process may not use (a cgroup-limited job, the lab's simulated CPUs) is
not applied, and the log says so: a partial binding is worse than none.
No torch here: the rack step and the tests import it without a GPU.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from validation import launch_read
from validation.launch_map import LaunchMap, RankBinding, cpulist, env_for


def apply(local_rank: int, lmap: LaunchMap | None = None) -> dict[str, Any] | None:
    """Bind this process as local rank `local_rank` of the map (the given one, else the
    check's in $RACKREADY_LAUNCH_MAP); returns what was applied, None where there is no
    map or no such rank (the workload runs unbound). CUDA device `local_rank` is then the
    rank's GPU."""
    lmap = lmap if lmap is not None else launch_read.load()
    if lmap is None or local_rank >= len(lmap.ranks):
        return None
    b: RankBinding = lmap.ranks[local_rank]
    os.environ.update(env_for(lmap, local_rank))
    cpus_applied = False
    note = ""
    if b.cpus and hasattr(os, "sched_setaffinity"):
        allowed = os.sched_getaffinity(0)
        if set(b.cpus) <= allowed:
            os.sched_setaffinity(0, set(b.cpus))
            cpus_applied = True
        else:
            note = "CPU share not applied: not all of its CPUs are this process's to use"
    rec = {"rank": local_rank, "gpu": b.gpu, "nic": b.nic or "", "path": b.path,
           "numa": "" if b.numa is None else str(b.numa), "cpus": cpulist(b.cpus),
           "cpus_applied": cpus_applied, "note": note}
    print(f"binding: local rank {local_rank} GPU {b.gpu} NIC {b.nic or 'none'} ({b.path}) "
          f"NUMA {rec['numa'] or '-'} CPUs {rec['cpus'] or '-'}"
          + ("" if cpus_applied else f" [{note or 'no CPU share'}]"), file=sys.stderr)
    return rec
