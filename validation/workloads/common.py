"""What every torchrun worker shares: process group, timing, JSON-lines output."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist


class UsageError(Exception):
    """A person's mistake (bad flag or size): one line on stderr, exit 2."""


@dataclass
class Dist:
    rank: int
    world: int
    local_rank: int
    device: torch.device
    # the launch map's binding this rank runs under (validation.workloads.binding);
    # None where the run has no map
    binding: dict[str, Any] | None = None

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cuda: NCCL, one GPU per process; cpu: gloo with tiny sizes (CI)",
    )
    p.add_argument("--out", required=True, type=Path, help="directory for the JSON-lines results")
    return p


# Set by the worker group (validation.workloads.group), which forms the process group once
# and runs workloads in turn: init() then reuses it and finish() leaves it standing.
_group_owned = False
# init_process_group calls in this process (the worker group reports it per job)
pg_inits = 0


def adopt_group() -> None:
    """The worker group owns the process group from here on (see init/finish)."""
    global _group_owned
    _group_owned = True


# The worker group's binding, applied once by its init (each job's init sees it here).
_bound: dict[str, Any] | None = None


def init(device: str, gpu: int | None = None) -> Dist:
    """The process group, and this rank bound to its place in the launch map before CUDA
    starts (validation.workloads.binding). gpu: the CUDA device to drive where it is not
    the local rank (the rack step: rail r's GPU is the one beside rail r's NIC)."""
    global pg_inits, _bound
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    index = local_rank if gpu is None else gpu
    if dist.is_initialized():  # the worker group's: same ranks, device already set
        want = "nccl" if device == "cuda" else "gloo"
        if dist.get_backend() != want:
            raise UsageError(f"--device {device} in a worker group formed for {dist.get_backend()}")
        dev = torch.device("cuda", index) if device == "cuda" else torch.device("cpu")
        return Dist(dist.get_rank(), dist.get_world_size(), local_rank, dev, _bound)
    if gpu is None:  # a caller with its own GPU choice binds itself (rack_nccl)
        from validation.workloads import binding

        _bound = binding.apply(local_rank)
    if device == "cuda":
        if not torch.cuda.is_available():
            raise UsageError("--device cuda but torch sees no GPU")
        dev = torch.device("cuda", index)
        torch.cuda.set_device(dev)
        backend = "nccl"
    else:
        dev = torch.device("cpu")
        backend = "gloo"
    if "MASTER_ADDR" not in os.environ:  # run without torchrun: a group of one
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    kwargs: dict[str, Any] = {"backend": backend, "rank": rank, "world_size": world}
    if device == "cuda":
        kwargs["device_id"] = dev
    dist.init_process_group(**kwargs)
    pg_inits += 1
    return Dist(rank, world, local_rank, dev, _bound)


def emit_binding(sink: Sink, d: Dist) -> None:
    """This rank's binding as a measurement (launch.rank_binding, informational): the
    workload's result says which GPU, NIC and CPUs each rank ran on."""
    b = d.binding
    if b is None:
        return
    sink.emit("launch.rank_binding",
              f"GPU {b['gpu']} -> {b['nic'] or 'none'} ({b['path']}), CPUs {b['cpus'] or '-'}"
              + ("" if b["cpus_applied"] else " (CPUs not bound)"), "",
              rank=d.rank, local_rank=d.local_rank, gpu=b["gpu"], nic=b["nic"] or "none",
              path=b["path"], numa=b["numa"], cpus=b["cpus"],
              cpus_applied=b["cpus_applied"], note=b["note"])


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def finish() -> None:
    if dist.is_initialized():
        dist.barrier()
        if not _group_owned:  # the worker group tears its group down once, at its end
            dist.destroy_process_group()


class Sink:
    """Appends Measurement-shaped dicts to <out>/<name>.rank<r>.jsonl, flushed per line."""

    def __init__(self, out: Path, name: str, rank: int) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / f"{name}.rank{rank}.jsonl"
        self._f = self.path.open("w", encoding="utf-8")

    def emit(self, name: str, value: Any, unit: str, **labels: Any) -> None:
        rec = {
            "name": name,
            "value": value,
            "unit": unit,
            "labels": {k: str(v) for k, v in labels.items()},
        }
        self._f.write(json.dumps(rec) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def time_region(d: Dist, fn: Callable[[], object], iters: int) -> float:
    """Seconds per call of fn over `iters` back-to-back calls (device events on GPU)."""
    if d.is_cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def median_time(d: Dist, fn: Callable[[], object], *, warmup: int, iters: int, repeats: int
                ) -> float:
    """Median over `repeats` of the mean time per call; warm-up calls are not timed."""
    for _ in range(warmup):
        fn()
    d.sync()
    return statistics.median(time_region(d, fn, iters) for _ in range(repeats))


def best_time(d: Dist, fn: Callable[[], object], *, warmup: int, iters: int, repeats: int) -> float:
    """The fastest of `repeats` mean times per call. For the lab's CPU stand-ins only: a
    copy of a few MiB takes a fraction of a millisecond, a loaded host's descheduling only
    ever adds time, and the figure is a smoke test of the workload, not a hardware rate."""
    for _ in range(warmup):
        fn()
    d.sync()
    return min(time_region(d, fn, iters) for _ in range(repeats))


def exit_process(rc: int) -> NoReturn:
    """End a workload process whose results are written: flush, then os._exit.

    Interpreter teardown after destroy_process_group runs torch's C++ static destructors.
    In the lab's two-node gloo job about one rank in twenty aborted there ("terminate
    called without an active exception", SIGABRT) after its results were written and its
    process group destroyed, so a job that had succeeded exited -6. Nothing is left to do
    by then, so the teardown is skipped. An exception still ends the process as Python
    does (traceback, exit 1), since it never reaches here."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def run_main(fn: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Entry point wrapper: a UsageError is one line and exit 2, never a traceback."""
    try:
        return fn(argv)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
