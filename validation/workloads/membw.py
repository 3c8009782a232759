"""Host memory bandwidth per NUMA node: a STREAM-like triad (a = b + s*c) in numpy.

One thread per physical core of the node, each pinned to its core
(os.sched_setaffinity on the calling thread) and first-touching its own slice of
the three arrays, so every page lives on that node (no numactl needed). numpy's
ufuncs release the GIL, so the threads stream in parallel; the triad runs in
cache-sized blocks, so memory sees STREAM's three streams (read b, read c, write a)
and the bytes are counted as STREAM counts them (3 x 8 B per element, best of the
repetitions). numpy only: it runs where the node venv has numpy, CPU or GPU node alike.

It measures the real machine, never the simulated sysroot: /sys/devices/system here is
the one the kernel gives this process.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

SYS_NODE = Path("/sys/devices/system/node")
SYS_CPU = Path("/sys/devices/system/cpu")
BLOCK = 1 << 17  # elements per block: 1 MiB of float64, stays in L2
MIN_ARRAY_BYTES = 64 << 20
MAX_ARRAY_BYTES = 2 << 30
BARRIER_TIMEOUT_S = 120.0


def parse_cpulist(text: str) -> list[int]:
    """"0-3,8,10-11" -> [0, 1, 2, 3, 8, 10, 11] (the kernel's cpulist format)."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def numa_nodes(sys_node: Path = SYS_NODE) -> dict[int, list[int]]:
    """NUMA node -> CPUs this process may run on; one node when the kernel has no NUMA."""
    allowed = os.sched_getaffinity(0)
    nodes = {}
    for d in sorted(sys_node.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        cpus = [c for c in parse_cpulist((d / "cpulist").read_text()) if c in allowed]
        if cpus:  # memory-only nodes (CXL, HBM) have no CPU to drive them
            nodes[int(d.name[4:])] = cpus
    return nodes or {0: sorted(allowed)}


def one_per_core(cpus: list[int], sys_cpu: Path = SYS_CPU) -> list[int]:
    """The first hardware thread of each core: a sibling adds no memory bandwidth."""
    seen, out = set(), []
    for c in cpus:
        try:
            sib = (sys_cpu / f"cpu{c}/topology/thread_siblings_list").read_text().strip()
        except FileNotFoundError:
            sib = str(c)
        if sib not in seen:
            seen.add(sib)
            out.append(c)
    return out


def _size_bytes(text: str) -> int:
    t = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(t.rstrip("KMG")) * mult


def llc_bytes(cpus: list[int], sys_cpu: Path = SYS_CPU) -> int:
    """Last-level cache the CPUs share, summed over distinct caches (0 when unknown)."""
    seen, total = set(), 0
    for c in cpus:
        caches = sorted((sys_cpu / f"cpu{c}/cache").glob("index[0-9]*"))
        if not caches:
            continue
        top = caches[-1]
        try:
            key = (top / "shared_cpu_list").read_text().strip()
            if key not in seen:
                seen.add(key)
                total += _size_bytes((top / "size").read_text())
        except (FileNotFoundError, ValueError):
            continue
    return total


@dataclass(frozen=True)
class TriadResult:
    node: int
    threads: int
    array_bytes: int  # per array, the node's total
    best_gbs: float  # STREAM convention: 3 x 8 B per element / best time, 1e9 B/s
    times_s: tuple[float, ...]


def triad_node(node: int, cpus: list[int], array_bytes: int, reps: int = 5) -> TriadResult:
    import numpy as np

    cpus = one_per_core(cpus)
    n_threads = len(cpus)
    per = max(BLOCK, array_bytes // 8 // n_threads)
    # a timeout breaks the barriers (BrokenBarrierError) rather than hanging the check
    start = threading.Barrier(n_threads + 1, timeout=BARRIER_TIMEOUT_S)
    done = threading.Barrier(n_threads + 1, timeout=BARRIER_TIMEOUT_S)
    errors: list[BaseException] = []

    def worker(cpu: int) -> None:
        arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        try:
            os.sched_setaffinity(0, {cpu})  # this thread only (Linux: tid 0 = caller)
            # first touch after pinning: the pages land on this node
            arrays = (np.zeros(per), np.full(per, 1.0), np.full(per, 2.0), np.empty(BLOCK))
        except BaseException as exc:  # noqa: BLE001  reported by the caller
            errors.append(exc)
        for _ in range(reps):
            start.wait()
            if arrays is not None and not errors:
                a, b, c, tmp = arrays
                try:
                    for i in range(0, per, BLOCK):
                        j = min(per, i + BLOCK)
                        t = tmp[: j - i]
                        np.multiply(c[i:j], 3.0, out=t)
                        np.add(b[i:j], t, out=a[i:j])
                except BaseException as exc:  # noqa: BLE001  reported by the caller
                    errors.append(exc)
            done.wait()

    threads = [threading.Thread(target=worker, args=(c,), daemon=True) for c in cpus]
    for t in threads:
        t.start()
    times = []
    for _ in range(reps):
        start.wait()
        t0 = time.perf_counter()
        done.wait()
        times.append(time.perf_counter() - t0)
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"triad on NUMA node {node}: {errors[0]}")
    total = per * n_threads
    # the first repetition pays page faults and warm-up: STREAM reports the best
    best = min(times[1:] if len(times) > 1 else times)
    return TriadResult(node, n_threads, total * 8, round(3 * 8 * total / best / 1e9, 3),
                       tuple(round(t, 6) for t in times))


def array_bytes_for(cpus: list[int]) -> int:
    """STREAM's rule: each array at least 4x the last-level cache, within bounds."""
    return min(MAX_ARRAY_BYTES, max(MIN_ARRAY_BYTES, 4 * llc_bytes(cpus)))


def run(reps: int = 5) -> list[TriadResult]:
    """Triad on every NUMA node with CPUs, one node after the other."""
    return [triad_node(n, cpus, array_bytes_for(cpus), reps)
            for n, cpus in numa_nodes().items()]
