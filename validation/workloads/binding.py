"""Bind one torchrun rank to its place in the launch map (validation/launch_map.py).

The check pcie.launch_map writes the node's map; the workload checks hand its path to
every worker in $RACKREADY_LAUNCH_MAP (validation.workloads.launch). common.init calls
apply() before CUDA starts, so each rank runs as a real job should:
- CUDA_DEVICE_ORDER=PCI_BUS_ID, so CUDA's device numbers are nvidia-smi's (the map's);
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
from validation.launch_map import LaunchMap, RankBinding, cpulist


def apply(local_rank: int, lmap: LaunchMap | None = None, *, binding: RankBinding | None = None
          ) -> dict[str, Any] | None:
    """Bind this process as local rank `local_rank` (or as the given binding); returns
    what was applied, None where there is no map (the workload runs unbound)."""
    lmap = lmap if lmap is not None else launch_read.load()
    b = binding
    if b is None and lmap is not None and local_rank < len(lmap.ranks):
        b = lmap.ranks[local_rank]
    if b is None:
        return None
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if b.nic:
        os.environ["NCCL_IB_HCA"] = f"={b.nic}:1"
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
