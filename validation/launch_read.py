"""Read what the launch map needs from the node (validation/launch_map.py decides).

Used by the check `pcie.launch_map` (through the check's context, so every command's
output is kept as an artifact) and by the workloads that start without a map handed to
them (the rack step's rack_nccl). Everything under the sysroot is read there first, so
the lab's simulated nodes (hwsim renders sysfs under its sysroot) are read as a real
node is; `numactl -H` and `lscpu` read the live kernel and come second.

Where the map comes from, part by part (LaunchMap.sources names the one used):
- GPU <-> NIC paths and the NIC names: `nvidia-smi topo -m`;
- the GPU's NUMA node: sysfs /sys/bus/pci/devices/<bdf>/numa_node, else topo -m;
- each NUMA node's CPUs: /sys/devices/system/node/node<N>/cpulist, else `numactl -H`,
  else lscpu's "NUMA nodeN CPU(s)", else topo -m's CPU Affinity column;
- threads per core: sysfs thread_siblings_list of the node's first CPU, else lscpu.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from validation import launch_map
from validation.probes.nvidia_smi import ParseError, Topology, parse_topo, short_bus_id
from validation.probes.system import parse_lscpu, parse_numactl

Run = Callable[[list[str]], str]  # runs a command, returns stdout, raises on failure

# The environment variable that hands a workload the check's map (validation.workloads
# .launch sets it; validation.workloads.binding reads it).
ENV = "RACKREADY_LAUNCH_MAP"
ARTIFACT = "launch-map.json"


def numa_cpus(sysroot: Path, run: Run | None, topo: Topology | None = None
              ) -> tuple[dict[int, list[int]], str]:
    """NUMA node -> CPUs, and where it came from."""
    base = sysroot / "sys/devices/system/node"
    out: dict[int, list[int]] = {}
    for d in sorted(base.glob("node[0-9]*")) if base.is_dir() else ():
        try:
            out[int(d.name[4:])] = launch_map.parse_cpulist((d / "cpulist").read_text())
        except (OSError, ValueError):
            continue
    if out:
        return out, "sysfs node cpulist"
    if run is not None:
        try:
            return parse_numactl(run(["numactl", "-H"])), "numactl -H"
        except Exception:  # noqa: BLE001  not installed, failed, unparsable: next source
            pass
        try:
            fields = parse_lscpu(run(["lscpu"]))
            key = re.compile(r"NUMA node(\d+) CPU\(s\)")
            found = {int(m.group(1)): launch_map.parse_cpulist(v)
                     for k, v in fields.items() if (m := key.fullmatch(k))}
            if found:
                return found, "lscpu"
        except Exception:  # noqa: BLE001
            pass
    if topo is not None:  # the GPUs' own affinity column: at least their nodes' CPUs
        for g, cpus in topo.cpu_affinity.items():
            node = topo.numa.get(g)
            if cpus and node is not None and node.isdigit():
                out.setdefault(int(node), launch_map.parse_cpulist(cpus))
        if out:
            return out, "nvidia-smi topo -m CPU Affinity"
    return {}, "none"


def threads_per_core(sysroot: Path, cpus: list[int], run: Run | None) -> tuple[int, str]:
    if cpus:
        sib = sysroot / f"sys/devices/system/cpu/cpu{min(cpus)}/topology/thread_siblings_list"
        try:
            return max(1, len(launch_map.parse_cpulist(sib.read_text()))), "sysfs thread_siblings"
        except (OSError, ValueError):
            pass
    if run is not None:
        try:
            return int(parse_lscpu(run(["lscpu"])).get("Thread(s) per core", "1")), "lscpu"
        except Exception:  # noqa: BLE001
            pass
    return 1, "assumed 1"


def gpu_numa(sysroot: Path, bus_ids: dict[int, str]) -> dict[int, int | None]:
    """GPU index -> NUMA node from sysfs (-1, the platform not saying, is None)."""
    out: dict[int, int | None] = {}
    for i, bus in bus_ids.items():
        try:
            n = int((sysroot / "sys/bus/pci/devices" / short_bus_id(bus) / "numa_node")
                    .read_text())
        except (OSError, ValueError):
            continue
        out[i] = n if n >= 0 else None
    return out


def read(run: Run, sysroot: Path = Path("/"), *, compute_nics: set[str] | None = None,
         gpu_ids: dict[int, tuple[str, str]] | None = None,
         topo_text: str | None = None) -> launch_map.LaunchMap:
    """The node's map. gpu_ids: index -> (bus id, serial) where the caller knows them;
    topo_text: `nvidia-smi topo -m` already run (else it is run here)."""
    topo = parse_topo(topo_text if topo_text is not None else run(["nvidia-smi", "topo", "-m"]))
    cpus, cpu_src = numa_cpus(sysroot, run, topo)
    first = cpus[min(cpus)] if cpus else []
    tpc, tpc_src = threads_per_core(sysroot, first, run)
    ids = gpu_ids or {}
    numa = gpu_numa(sysroot, {i: bus for i, (bus, _) in ids.items() if bus})
    return launch_map.build(topo, cpus, compute_nics=compute_nics, threads_per_core=tpc,
                            gpu_ids=ids, gpu_numa=numa,
                            sources={"paths": "nvidia-smi topo -m", "cpus": cpu_src,
                                     "threads_per_core": tpc_src,
                                     "numa": "sysfs numa_node" if numa else "nvidia-smi topo -m"})


def load(path: str | os.PathLike[str] | None = None) -> launch_map.LaunchMap | None:
    """The map a check wrote (path, or $RACKREADY_LAUNCH_MAP); None when there is none or
    it cannot be read (the workload then runs unbound, as before the map existed)."""
    where = path or os.environ.get(ENV)
    if not where:
        return None
    try:
        return launch_map.LaunchMap.from_dict(json.loads(Path(where).read_text()))
    except (OSError, ValueError, TypeError, ParseError):
        return None
