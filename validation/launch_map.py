"""The launch map: for each local rank, its GPU, its NIC, its NUMA node and CPU set.

Pure logic, no I/O (validation/launch_read.py reads the node). Inputs are what the node
measured: `nvidia-smi topo -m` (GPU <-> NIC path through PCIe: PIX, PXB, PHB, NODE, SYS),
the compute NICs (ibstat, the site's rdma_devices), each NUMA node's CPUs (sysfs,
numactl -H or lscpu) and the threads per core.

The rules, in the order they apply:
- local rank r drives GPU r (nvidia-smi's order, which is PCI bus order); every rank
  sees every GPU, listed in rank order with CUDA_DEVICE_ORDER=PCI_BUS_ID (env_for), so
  CUDA device r, a trainer's `cuda:LOCAL_RANK`, is rank r's GPU: bind.sh and the suite's
  workloads run with the same environment;
- its NIC is the compute NIC closest to that GPU: one behind the same PCIe switch (PIX,
  then PXB), else one on the same NUMA node (PHB, NODE), else none, with the reason.
  Among equally close NICs the one fewer ranks already use wins (a DL380a-like node with
  one NIC per two GPUs gives each its own where it can), then the lower NIC number;
- its CPUs are its NUMA node's, split fairly among the ranks on that node, without
  overlap, keeping the hyper-threads of one core together (see split_cpus).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from validation.probes.nvidia_smi import Topology

# topo -m's words for a GPU-NIC path, closest first. PIX/PXB: behind the same PCIe
# switch (one or several bridges, never the host bridge); PHB/NODE: same NUMA node,
# through the CPU's root complex; SYS: across the socket interconnect.
PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")
SWITCH_PATHS = ("PIX", "PXB")
NUMA_PATHS = ("PIX", "PXB", "PHB", "NODE")

# What a NIC name may look like before it goes into an environment variable or a shell
# line (the node is untrusted input for the controller too).
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


@dataclass(frozen=True)
class RankBinding:
    """One local rank's place on the node."""

    rank: int
    gpu: int  # nvidia-smi index
    bus_id: str = ""  # the GPU's PCI address (0000:19:00.0), "" when not known
    serial: str = ""  # the GPU's board serial, "" when not known
    nic: str | None = None  # RDMA device name (mlx5_3); None: no compute NIC near it
    path: str = "none"  # topo -m's word for GPU -> NIC, "none" without a NIC
    numa: int | None = None  # the GPU's NUMA node; None where the platform has one domain
    cpus: tuple[int, ...] = ()  # this rank's share of its NUMA node's CPUs
    # compute NICs behind this GPU's own PCIe switch (PIX/PXB): one on an XE9680, none on
    # a node whose NICs hang off the CPU
    switch_nics: tuple[str, ...] = ()
    reason: str = ""  # why nic is None, or why the NIC is not behind the GPU's switch

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cpus"] = list(self.cpus)
        d["switch_nics"] = list(self.switch_nics)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankBinding:
        """Read back (the workloads read the check's artifact; the controller a node's
        result): every field checked, a malformed entry raises ValueError."""
        nic = d.get("nic")
        if nic is not None and not _SAFE_NAME.match(str(nic)):
            raise ValueError(f"launch map: NIC name {nic!r} is not a device name")
        switch = tuple(str(n) for n in d.get("switch_nics") or ())
        if any(not _SAFE_NAME.match(n) for n in switch):
            raise ValueError("launch map: a switch NIC name is not a device name")
        path = str(d.get("path", "none"))
        if path not in (*PATHS, "none"):
            raise ValueError(f"launch map: path {path!r} is not a topo -m word")
        numa = d.get("numa")
        return cls(rank=_nonneg(d.get("rank")), gpu=_nonneg(d.get("gpu")),
                   bus_id=str(d.get("bus_id") or ""), serial=str(d.get("serial") or ""),
                   nic=None if nic is None else str(nic), path=path,
                   numa=None if numa is None else _nonneg(numa),
                   cpus=tuple(_nonneg(c) for c in d.get("cpus") or ()),
                   switch_nics=switch, reason=str(d.get("reason") or ""))


def _nonneg(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int | str) or not str(v).isdigit():
        raise ValueError(f"launch map: {v!r} is not a non-negative integer")
    return int(v)


@dataclass(frozen=True)
class LaunchMap:
    ranks: tuple[RankBinding, ...]
    sources: dict[str, str] = field(default_factory=dict)  # what each part was read from

    def to_dict(self) -> dict[str, Any]:
        return {"ranks": [r.to_dict() for r in self.ranks], "sources": dict(self.sources)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LaunchMap:
        ranks = tuple(RankBinding.from_dict(r) for r in d.get("ranks") or ())
        if [r.rank for r in ranks] != list(range(len(ranks))):
            raise ValueError("launch map: ranks are not 0..n-1 in order")
        return cls(ranks, {str(k): str(v) for k, v in (d.get("sources") or {}).items()})

    def for_nic(self, nic: str) -> RankBinding | None:
        """The rank that drives this NIC (the GPUDirect test and the rack step start from
        the NIC); where several share it, the closest, then the lowest rank."""
        users = [r for r in self.ranks if r.nic == nic]
        return min(users, key=lambda r: (PATHS.index(r.path), r.rank)) if users else None


def cpulist(cpus: list[int] | tuple[int, ...] | set[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (the kernel's cpulist format, what numactl and taskset take)."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def parse_cpulist(text: str) -> list[int]:
    """'0-55,112-167' -> [0..55, 112..167]; '' -> []."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part.strip():
            continue
        lo, _, hi = part.strip().partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def split_cpus(cpus: list[int], parts: int, threads_per_core: int = 1) -> list[list[int]]:
    """A NUMA node's CPUs in `parts` fair shares (sizes differ by at most one core), no
    CPU in two shares.

    Linux numbers the first hyper-thread of every core before the second ones (node 0 of
    a 2x56-core Xeon: 0-55 then 112-167, CPU 112 the sibling of CPU 0), so the node's
    list is cut into `threads_per_core` equal runs and each share takes the same slice
    of every run: rank 0 gets cores 0-13 with their siblings 112-125, never a sibling
    that another rank's core owns. Where the list does not divide that way, it is split
    as one run."""
    cpus = sorted(set(cpus))
    if parts <= 0:
        return []
    runs = [cpus]
    if threads_per_core > 1 and len(cpus) % threads_per_core == 0:
        n = len(cpus) // threads_per_core
        runs = [cpus[i * n:(i + 1) * n] for i in range(threads_per_core)]
    shares: list[list[int]] = [[] for _ in range(parts)]
    for run in runs:
        base, extra = divmod(len(run), parts)
        at = 0
        for p in range(parts):
            size = base + (1 if p < extra else 0)
            shares[p].extend(run[at:at + size])
            at += size
    return shares


def _numa_of(topo: Topology, gpu: str, numa_override: dict[int, int | None]) -> int | None:
    idx = int(gpu[3:])
    if idx in numa_override:
        return numa_override[idx]
    v = topo.numa.get(gpu)
    return int(v) if v is not None and v.isdigit() else None


def build(topo: Topology, numa_cpus: dict[int, list[int]], *,
          compute_nics: set[str] | None = None, threads_per_core: int = 1,
          gpu_ids: dict[int, tuple[str, str]] | None = None,
          gpu_numa: dict[int, int | None] | None = None,
          sources: dict[str, str] | None = None) -> LaunchMap:
    """The map from what the node measured.

    compute_nics: RDMA names of the compute fabric's NICs (None: every NIC topo -m lists);
    gpu_ids: index -> (bus id, serial), to name the GPU in a verdict;
    gpu_numa: index -> NUMA node from sysfs, over topo -m's NUMA column where given;
    numa_cpus: NUMA node -> CPUs; a GPU with no NUMA node (one domain) gets every CPU."""
    gpu_ids = gpu_ids or {}
    gpu_numa = gpu_numa or {}
    names = [(col, name) for col, name in topo.nics.items()
             if compute_nics is None or name in compute_nics]
    order = [n for _, n in names]
    gpus = sorted(topo.gpus, key=lambda g: int(g[3:]))
    paths = {g: {n: topo.matrix.get((g, col), "SYS").upper() for col, n in names}
             for g in gpus}
    # GPUs with a NIC behind their own switch choose first, so a GPU that has only a
    # NUMA-local NIC never takes the one another GPU's switch holds before that GPU does
    first = [g for g in gpus if any(p in SWITCH_PATHS for p in paths[g].values())]
    users: dict[str, int] = {}
    chosen: dict[str, str | None] = {}
    for gpu in first + [g for g in gpus if g not in first]:
        near = [n for n, p in paths[gpu].items() if p in NUMA_PATHS]
        # closest path first, then the NIC fewer ranks use so far, then topo -m's order
        near.sort(key=lambda n: (PATHS.index(paths[gpu][n]), users.get(n, 0), order.index(n)))
        chosen[gpu] = near[0] if near else None
        if near:
            users[near[0]] = users.get(near[0], 0) + 1
    picks: list[tuple[str, int | None, str | None, str, tuple[str, ...], str]] = []
    for gpu in gpus:
        numa = _numa_of(topo, gpu, gpu_numa)
        nic = chosen[gpu]
        path = paths[gpu][nic] if nic else "none"
        switch = tuple(n for n, p in paths[gpu].items() if p in SWITCH_PATHS)
        why = ""
        if nic is None:
            why = ("no compute NIC listed by nvidia-smi topo -m" if not names else
                   f"no compute NIC on NUMA node {numa} (every one is across the socket "
                   "interconnect: SYS)")
        elif path not in SWITCH_PATHS:
            why = f"no compute NIC behind this GPU's PCIe switch; {nic} is {path}"
        picks.append((gpu, numa, nic, path, switch, why))

    # CPU shares: the ranks of one NUMA node split its CPUs; a GPU without a NUMA node
    # (one domain, a VM) shares every CPU with the others like it
    all_cpus = sorted({c for cs in numa_cpus.values() for c in cs})
    by_node: dict[int | None, list[str]] = {}
    for gpu, numa, *_ in picks:
        by_node.setdefault(numa if numa in numa_cpus else None, []).append(gpu)
    share: dict[str, tuple[int, ...]] = {}
    for node, gpus in by_node.items():
        pool = numa_cpus[node] if node is not None else all_cpus
        for gpu, cpus in zip(gpus, split_cpus(pool, len(gpus), threads_per_core),
                             strict=True):
            share[gpu] = tuple(cpus)

    ranks = []
    for rank, (gpu, numa, nic, path, switch, why) in enumerate(picks):
        bus, serial = gpu_ids.get(int(gpu[3:]), ("", ""))
        ranks.append(RankBinding(rank=rank, gpu=int(gpu[3:]), bus_id=bus, serial=serial,
                                 nic=nic, path=path, numa=numa, cpus=share[gpu],
                                 switch_nics=switch, reason=why))
    return LaunchMap(tuple(ranks), dict(sources or {}))


def visible_devices(m: LaunchMap) -> str:
    """CUDA_VISIBLE_DEVICES for every rank of the node: all the map's GPUs, in rank order.
    CUDA device r is then local rank r's GPU, so a trainer that drives `cuda:LOCAL_RANK`
    (torchtitan's, the suite's workloads) drives the mapped one; one GPU per rank would
    leave `cuda:1` and above missing on every rank but the first."""
    return ",".join(str(r.gpu) for r in m.ranks)


def env_for(m: LaunchMap, rank: int) -> dict[str, str]:
    """The environment local rank `rank` runs with, in bind.sh and in the suite's workloads
    alike (validation.workloads.binding): every GPU in map order, PCI bus numbering, and
    its NIC only."""
    b = m.ranks[rank]
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": visible_devices(m)}
    if b.nic:
        env["NCCL_IB_HCA"] = f"={b.nic}:1"  # exact name, port 1 (not a prefix match)
    return env


def _exports(nccl_env: dict[str, str] | None) -> str:
    """`NCCL_IB_TC=104 NCCL_IB_GID_INDEX=3` for an `export` (common_env.roce_env); only
    NCCL_ names and integer values reach a shell line."""
    env = dict(sorted((nccl_env or {}).items()))
    for k, v in env.items():
        if not re.fullmatch(r"NCCL_[A-Z0-9_]+", k) or not re.fullmatch(r"\d{1,5}", str(v)):
            raise ValueError(f"launch snippet: refusing {k}={v!r}")
    return " ".join(f"{k}={v}" for k, v in env.items())


# bind.sh's CPU step: the rank's share through taskset, only where every CPU of it is this
# process's to use (a job given fewer CPUs, a cgroup) -- else it runs on the CPUs it has
# and says so on stderr, as the workloads do: a partial share is worse than none. Memory
# follows the CPUs (Linux allocates on the running CPU's NUMA node by default).
_BIND_CPUS = r"""cpus() { local p; for p in ${1//,/ }; do seq "${p%-*}" "${p#*-}"; done; }
share=${CPUS[$r]}
[ "$share" = - ] && exec "$@"
mine=" $(cpus "$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)" | tr '\n' ' ')"
for c in $(cpus "$share"); do
  if [[ $mine != *" $c "* ]]; then
    echo "bind.sh: local rank $r runs without its CPU share $share (CPU $c is not ours)" >&2
    exec "$@"
  fi
done"""


def torchrun_wrapper(m: LaunchMap, nccl_env: dict[str, str] | None = None) -> str:
    """bind.sh, for `torchrun --nproc-per-node N --no-python ./bind.sh python train.py`
    (and slurm_line's srun): each local rank gets the environment env_for gives it (every
    GPU visible in map order, so `cuda:LOCAL_RANK` is its GPU; its NIC) and its CPUs
    before the training process starts; on RoCE, nccl_env (NCCL_IB_TC, NCCL_IB_GID_INDEX
    from the site's role values) too."""
    exports = _exports(nccl_env)
    n = len(m.ranks)
    nics = " ".join(r.nic or "-" for r in m.ranks)
    cpus = " ".join(cpulist(r.cpus) or "-" for r in m.ranks)
    return "\n".join([
        "#!/bin/bash",
        f"# bind.sh: torchrun --nproc-per-node {n} --no-python ./bind.sh python train.py ...",
        "# Every GPU stays visible, in the map's rank order: cuda:LOCAL_RANK is this rank's GPU.",
        f"NICS=({nics})",
        f"CPUS=({cpus})",
        "r=${LOCAL_RANK:?torchrun sets LOCAL_RANK}",
        f'[[ $r =~ ^[0-9]+$ ]] && [ "$r" -lt {n} ] || '
        f'{{ echo "bind.sh: LOCAL_RANK $r: the map has local ranks 0-{n - 1}" >&2; exit 2; }}',
        f"export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={visible_devices(m)}",
        *([f"export {exports}  # RoCE: traffic class of the lossless priority, GID index"]
          if exports else []),
        '[ "${NICS[$r]}" != - ] && export NCCL_IB_HCA="=${NICS[$r]}:1"',
        _BIND_CPUS,
        'exec taskset -c "$share" "$@"',
    ]) + "\n"


def slurm_line(m: LaunchMap) -> str:
    """The same binding through Slurm: one task per GPU on a node of its own, the node's
    GPUs requested, and each task run through bind.sh as local rank SLURM_LOCALID. No
    --gpu-bind: Slurm then gives every task all the step's GPUs, as under torchrun
    (Slurm 22.05 in the lab: --gpu-bind=none left a task of two an empty
    CUDA_VISIBLE_DEVICES, map_gpu one GPU each)."""
    n = len(m.ranks)
    return (f"srun --exclusive --ntasks-per-node={n} --gpus-per-node={n} "
            "--cpu-bind=none bash -c 'export LOCAL_RANK=$SLURM_LOCALID RANK=$SLURM_PROCID "
            "WORLD_SIZE=$SLURM_NTASKS; exec ./bind.sh python train.py'")
