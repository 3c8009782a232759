"""Host transfers per GPU (pinned H2D, D2H, both at once) and P2P copy bandwidth per pair.

    torchrun --standalone --nproc-per-node N -m validation.workloads.transfers --out DIR

Each GPU is measured alone (the others wait), with its process bound to the
CPUs of the NUMA node the GPU hangs off, so the pinned buffer is allocated
there (first touch). P2P runs from rank 0, which sees every GPU, one
ordered pair at a time.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch
import torch.distributed as dist

from validation.workloads.common import (
    Dist,
    Sink,
    base_parser,
    best_time,
    exit_process,
    finish,
    init,
    median_time,
    run_main,
)


def parse_cpulist(text: str) -> set[int]:
    """'0-15,32-47' -> {0..15, 32..47} (the kernel's cpulist format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def gpu_numa_node(d: Dist, sysroot: Path = Path("/")) -> int:
    """NUMA node of the GPU's PCI function; -1 where unknown (CPU mode, one node, VM)."""
    if not d.is_cuda:
        return -1
    pr = torch.cuda.get_device_properties(d.device)
    # torch's stub of _CudaDeviceProperties omits the pci_* fields its binding has
    ids = (pr.pci_domain_id, pr.pci_bus_id, pr.pci_device_id)  # type: ignore[attr-defined]
    bus = "{:04x}:{:02x}:{:02x}.0".format(*ids)
    try:
        return int((sysroot / "sys/bus/pci/devices" / bus / "numa_node").read_text())
    except (OSError, ValueError):
        return -1


def bind_to_node(node: int, sysroot: Path = Path("/")) -> bool:
    if node < 0:
        return False
    try:
        cpus = parse_cpulist((sysroot / f"sys/devices/system/node/node{node}/cpulist").read_text())
        os.sched_setaffinity(0, cpus)
        return True
    except (OSError, ValueError):
        return False


def host_bw(d: Dist, nbytes: int, iters: int, repeats: int) -> dict[str, float]:
    pin = d.is_cuda
    h = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin).fill_(1)
    h2 = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
    dev = torch.empty(nbytes, dtype=torch.uint8, device=d.device).fill_(2)
    dev2 = torch.empty(nbytes, dtype=torch.uint8, device=d.device)
    timed = median_time if d.is_cuda else best_time
    out = {
        "h2d": nbytes
        / timed(
            d, lambda: dev2.copy_(h, non_blocking=True), warmup=2, iters=iters, repeats=repeats
        ),
        "d2h": nbytes
        / timed(
            d, lambda: h2.copy_(dev, non_blocking=True), warmup=2, iters=iters, repeats=repeats
        ),
    }
    if d.is_cuda:
        s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

        def both() -> None:  # one copy each way on its own stream, joined back
            cur = torch.cuda.current_stream()
            s1.wait_stream(cur)
            s2.wait_stream(cur)
            with torch.cuda.stream(s1):
                dev2.copy_(h, non_blocking=True)
            with torch.cuda.stream(s2):
                h2.copy_(dev, non_blocking=True)
            cur.wait_stream(s1)
            cur.wait_stream(s2)

        out["bidir"] = 2 * nbytes / timed(d, both, warmup=2, iters=iters, repeats=repeats)
    else:
        out["bidir"] = (
            2
            * nbytes
            / timed(
                d, lambda: (dev2.copy_(h), h2.copy_(dev)), warmup=1, iters=iters, repeats=repeats
            )
        )
    return {k: v / 1e9 for k, v in out.items()}


def p2p_bw(
    devices: list[torch.device], nbytes: int, iters: int, repeats: int, d: Dist
) -> dict[tuple[int, int], float]:
    out = {}
    for i, si in enumerate(devices):
        src = torch.empty(nbytes, dtype=torch.uint8, device=si).fill_(3)
        for j, dj in enumerate(devices):
            if i == j:
                continue
            dst = torch.empty(nbytes, dtype=torch.uint8, device=dj)
            t = (
                median_time(
                    d,
                    functools.partial(dst.copy_, src, non_blocking=True),
                    warmup=2,
                    iters=iters,
                    repeats=repeats,
                )
                if not d.is_cuda
                else _p2p_time(src, dst, iters, repeats)
            )
            if not torch.equal(dst[:4096].cpu(), src[:4096].cpu()):
                t = float("inf")  # a copy that lands wrong has no bandwidth
            out[(i, j)] = nbytes / t / 1e9
    return out


def _p2p_time(src: torch.Tensor, dst: torch.Tensor, iters: int, repeats: int) -> float:
    import statistics

    with torch.cuda.device(src.device):
        for _ in range(2):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(src.device)
        times = []
        for _ in range(repeats):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(iters):
                dst.copy_(src, non_blocking=True)
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) / 1e3 / iters)
    torch.cuda.synchronize(dst.device)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--host-bytes", type=int, default=0, help="default 1 GiB GPU, 4 MiB CPU")
    p.add_argument(
        "--p2p-bytes",
        type=int,
        default=0,
        help="default 1 GiB GPU, 4 MiB CPU (0 and --no-p2p: skip)",
    )
    p.add_argument("--no-p2p", action="store_true")
    a = p.parse_args(argv)
    d = init(a.device)
    sink = Sink(a.out, "transfers", d.rank)
    node = gpu_numa_node(d)
    bound = bind_to_node(node)
    hb = a.host_bytes or ((1 << 30) if d.is_cuda else 4 << 20)
    # CPU (the lab): a 4 MiB copy takes ~0.2 ms, so one descheduling on a loaded host
    # swamps a repeat; host_bw takes the best of 7 there
    iters, reps = (10, 5) if d.is_cuda else (3, 7)
    for r in range(d.world):  # one GPU at a time: each measured alone
        if r == d.rank:
            for kind, v in host_bw(d, hb, iters, reps).items():
                sink.emit(
                    f"host.{kind}_bandwidth",
                    round(v, 2),
                    "GB/s",
                    gpu=d.local_rank,
                    numa=node,
                    bound=bound,
                )
        dist.barrier()
    if not a.no_p2p and d.rank == 0:
        n = torch.cuda.device_count() if d.is_cuda else max(2, d.world)
        devs = [torch.device("cuda", i) if d.is_cuda else torch.device("cpu") for i in range(n)]
        pb = a.p2p_bytes or ((1 << 30) if d.is_cuda else 4 << 20)
        for (i, j), v in p2p_bw(devs, pb, iters, reps, d).items():
            sink.emit("p2p.bandwidth", round(v, 2), "GB/s", src=i, dst=j)
    sink.close()
    finish()
    return 0


if __name__ == "__main__":
    exit_process(run_main(main))
