"""Where a collective's time goes between calls: the NCCL kernel or the gap between kernels
(GPU only, under torchrun).

    torchrun --standalone --nproc-per-node 2 bench/profile_collective.py OUT \
        [--ops alltoall,all_reduce,sendrecv] [--size 64M] [--modes in_place,out_of_place]

Per op and mode, two loops of the same calls (validation.workloads.collectives' buffers
and allocator): "wait each", every call waited for before the next (a plain torch call),
and "queued", every call queued, then one wait (the check's loop, as nccl-tests'). Each
loop is timed unprofiled (busbw as the check reports it), then run under torch.profiler.
From the trace, on rank 0: each NCCL kernel's duration and the idle gap from one
kernel's end to the next one's start, medians over the loop. If the kernels alone give
nccl-tests' figure, the shortfall is the gap (torch's per-call work), not NCCL. Writes
OUT/profile.md and one Chrome trace per op, mode and loop (OUT/trace-<op>-<mode>-<loop>.json).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from validation.workloads.busbw import algbw_gbps, busbw_factor  # noqa: E402
from validation.workloads.collectives import (  # noqa: E402
    Coll,
    allocate,
    mean_over_ranks,
    modes_for,
    parse_sizes,
    torch_nccl_version,
)
from validation.workloads.common import exit_process, init, time_region  # noqa: E402


def kernel_spans(prof: profile) -> list[tuple[float, float]]:
    """(start, end) in microseconds of every NCCL kernel in the trace, in time order."""
    spans = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and "nccl" in e.name.lower():
            spans.append((e.time_range.start, e.time_range.end))
    return sorted(spans)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--ops", default="alltoall,all_reduce,sendrecv")
    p.add_argument("--size", default="64M")
    p.add_argument("--modes", default="in_place,out_of_place")
    p.add_argument("--alloc", default="nccl", choices=("nccl", "torch"))
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu: gloo, to try the program without a GPU (no kernels to find)")
    a = p.parse_args()
    d = init(a.device)
    size = parse_sizes(a.size)[0]
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for op in a.ops.split(","):
        for mode in modes_for(op, a.modes.split(",")):
            c, used = allocate(d, a.alloc, functools.partial(Coll, d, op, size, mode))
            c.queue(5)  # warm-up
            loops = {"wait each": lambda c=c: [c() for _ in range(a.iters)],
                     "queued": lambda c=c: c.queue(a.iters)}
            for name, loop in loops.items():
                t = mean_over_ranks(d, statistics.median(
                    time_region(d, loop, 1) for _ in range(3)) / a.iters)
                busbw = algbw_gbps(c.size, t) * busbw_factor(op, d.world)
                d.sync()
                dist.barrier()
                acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if d.is_cuda else [])
                with profile(activities=acts) as prof:
                    loop()
                    d.sync()
                if d.rank == 0:
                    tag = name.replace(" ", "_")
                    prof.export_chrome_trace(str(a.out / f"trace-{op}-{mode}-{tag}.json"))
                    spans = kernel_spans(prof)
                    durs = [e - s for s, e in spans]
                    gaps = [s2 - e1 for (_, e1), (s2, _) in zip(spans, spans[1:], strict=False)]
                    kern = statistics.median(durs) if durs else float("nan")
                    gap = statistics.median(gaps) if gaps else float("nan")
                    rows.append((op, mode, name, used, len(spans), t * 1e6, busbw, kern, gap,
                                 algbw_gbps(c.size, kern / 1e6) * busbw_factor(op, d.world)))
            del c
            if d.is_cuda:
                torch.cuda.empty_cache()
    if d.rank == 0:
        lines = [
            f"torch {torch.__version__}, NCCL {torch_nccl_version() if d.is_cuda else '-'}, "
            f"{d.world}x {torch.cuda.get_device_name() if d.is_cuda else 'CPU'}, "
            f"size {a.size}, {a.iters} calls a loop",
            "",
            "| op | mode | loop | alloc | kernels | us per call (unprofiled) | busbw GB/s | "
            "kernel us (median) | gap us (median) | busbw of the kernel alone |",
            "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        lines += [f"| {o} | {m} | {lp} | {u} | {n} | {t:.1f} | {b:.1f} | {k:.1f} | {g:.1f} | "
                  f"{kb:.1f} |" for o, m, lp, u, n, t, b, k, g, kb in rows]
        (a.out / "profile.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_process(main())
