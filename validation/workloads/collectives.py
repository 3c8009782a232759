"""Collectives over a size sweep, checked for the right answer, then timed.

    torchrun --standalone --nproc-per-node N -m validation.workloads.collectives --out DIR

Per op, size and mode (out of place, in place: nccl-tests' two columns): one
call on known inputs checked exactly (small integers that bf16 holds exactly),
then nccl-tests' timing (warm-up, a loop of calls queued back to back and
waited for once, timed as a whole, the mean over ranks; median of repeats),
optionally as a replayed CUDA graph (--graph). busbw uses nccl-tests' factors.
Buffers come from NCCL's own allocator (ncclMemAlloc) where torch offers it, as
nccl-tests allocates them (--alloc). Then every ordered GPU pair sends to each
other alone, to find one weak link.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from validation.workloads.busbw import OPS, algbw_gbps, busbw_factor
from validation.workloads.common import (
    Dist,
    Sink,
    UsageError,
    base_parser,
    exit_process,
    finish,
    init,
    median_time,
    run_main,
)

MiB = 1 << 20


def parse_sizes(spec: str) -> list[int]:
    """'1M:4G:x4' -> 1 MiB, 4 MiB, ... 4 GiB; or a comma list '64M,1G'."""

    def one(tok: str) -> int:
        mult = {"K": 1 << 10, "M": MiB, "G": 1 << 30}.get(tok[-1].upper(), 1)
        return int(float(tok[:-1] if mult > 1 else tok) * mult)

    try:
        if ":" in spec:
            lo, hi, step = spec.split(":")
            f = int(step.lstrip("x"))
            out, s = [], one(lo)
            while s <= one(hi):
                out.append(s)
                s *= f
            return out
        return [one(t) for t in spec.split(",") if t]
    except (ValueError, IndexError):
        raise UsageError(f"bad --sizes {spec!r}: use 1M:4G:x4 or 64M,1G") from None


def _pattern(numel: int, rank: int, device: torch.device) -> torch.Tensor:
    # (rank+1) * (1..7): exact in bf16 and their sums stay exact up to 8+ ranks
    i = torch.arange(numel, device=device, dtype=torch.int32)
    return ((i % 7 + 1) * (rank + 1)).to(torch.bfloat16)


MODES = ("out_of_place", "in_place")
# torch.distributed's all_reduce and broadcast write into their input: in-place only
TORCH_MODES = {"all_reduce": ("in_place",), "broadcast": ("in_place",)}
# nccl-tests leaves these unchecked in place (N/A): the peer's data overwrites what is being sent
UNCHECKED_IN_PLACE = ("alltoall", "sendrecv")


ALLOCS = ("nccl", "torch")


def nccl_pool(d: Dist) -> torch.cuda.MemPool | None:
    """A pool whose memory comes from NCCL's ncclMemAlloc, as nccl-tests (>= 2.19)
    allocates its buffers, not registered with NCCL (nccl-tests' default): the buffers'
    allocation is then no difference between the two columns. On 2x H200 neither
    allocator was faster across the board (bench/results/h200x2-2026-12-01-issue15.md).
    None where torch or the backend lacks it."""
    world = dist.group.WORLD
    if not d.is_cuda or world is None:
        return None
    try:
        return torch.cuda.MemPool(world._get_backend(d.device).mem_allocator)
    except (AttributeError, RuntimeError, TypeError):
        return None


def allocate(d: Dist, alloc: str, make: Callable[[], Coll]) -> tuple[Coll, str]:
    """make() with its buffers from `alloc`; the allocator really used comes back too.
    The pool lives as long as the buffers (freed together, then empty_cache)."""
    pool = nccl_pool(d) if alloc == "nccl" else None
    if pool is None:
        return make(), "torch"
    with torch.cuda.use_mem_pool(pool, d.device):
        c = make()
    c.pool = pool
    return c, "nccl"


def modes_for(op: str, wanted: list[str]) -> list[str]:
    return [m for m in wanted if m in TORCH_MODES.get(op, MODES)]


class Coll:
    """Buffers and one call of an op at one size (size = nccl-tests' size) in one mode.

    In place as nccl-tests defines it: all_gather sends from the rank's own block of
    the output, reduce_scatter receives into the rank's block of the input, the other
    ops use one buffer for both. Buffers are allocated once; a call allocates nothing.
    """

    def __init__(self, d: Dist, op: str, size: int, mode: str = "out_of_place") -> None:
        if op not in OPS:
            raise UsageError(f"unknown op {op!r}; choose from {', '.join(OPS)}")
        if mode not in modes_for(op, list(MODES)):
            raise UsageError(f"{op} has no {mode} form in torch.distributed")
        self.d, self.op, self.mode, n = d, op, mode, d.world
        self.pool: torch.cuda.MemPool | None = None  # set by allocate()
        elem = 2  # bf16
        numel = max(size // (n * elem), 1) * n  # divisible by n for the sharded ops
        self.size, self.numel = numel * elem, numel
        dev, r, k = d.device, d.rank, numel // n
        ip = mode == "in_place"
        if op in ("all_reduce", "broadcast"):
            self.x = self.y = _pattern(numel, r, dev)
        elif op == "all_gather":
            self.y = torch.empty(numel, dtype=torch.bfloat16, device=dev)
            self.x = self.y[r * k:(r + 1) * k] if ip else torch.empty(k, dtype=torch.bfloat16,
                                                                       device=dev)
        elif op == "reduce_scatter":
            self.x = torch.empty(numel, dtype=torch.bfloat16, device=dev)
            self.y = self.x[r * k:(r + 1) * k] if ip else torch.empty(k, dtype=torch.bfloat16,
                                                                       device=dev)
        else:  # alltoall, sendrecv
            self.x = torch.empty(numel, dtype=torch.bfloat16, device=dev)
            self.y = self.x if ip else torch.empty(numel, dtype=torch.bfloat16, device=dev)
        self._fill()
        if op == "sendrecv":
            self._peers = ((r + 1) % n, (r - 1) % n)  # ring, as nccl-tests' sendrecv_perf

    def _fill(self) -> None:
        self.x.copy_(_pattern(self.x.numel(), self.d.rank, self.d.device))

    def launch(self) -> list[dist.Work]:
        """Queue one call (async_op): on GPU the kernel is queued on NCCL's stream and
        nothing waits for it yet."""
        op = self.op
        if op == "all_reduce":
            w = dist.all_reduce(self.x, async_op=True)
        elif op == "all_gather":
            w = dist.all_gather_into_tensor(self.y, self.x, async_op=True)
        elif op == "reduce_scatter":
            w = dist.reduce_scatter_tensor(self.y, self.x, async_op=True)
        elif op == "alltoall":
            w = dist.all_to_all_single(self.y, self.x, async_op=True)
        elif op == "broadcast":
            w = dist.broadcast(self.x, src=0, async_op=True)
        else:
            return list(dist.batch_isend_irecv([
                dist.P2POp(dist.isend, self.x, self._peers[0]),
                dist.P2POp(dist.irecv, self.y, self._peers[1]),
            ]))
        return [w]

    def __call__(self) -> None:
        """One call, waited for (the current stream waits on NCCL's, as a plain call)."""
        for w in self.launch():
            w.wait()

    def queue(self, n: int) -> None:
        """n calls back to back, then one wait for all: nccl-tests' loop (one stream, no
        wait between calls). A wait after each call puts a cross-stream round trip (NCCL's
        end event, the current stream's wait and its next event) between two kernels;
        how much that costs on two GPUs is what bench/profile_collective.py measures (not
        yet run there)."""
        works = [w for _ in range(n) for w in self.launch()]
        for w in works:
            w.wait()

    @property
    def checkable(self) -> bool:
        return not (self.mode == "in_place" and self.op in UNCHECKED_IN_PLACE)

    def check(self, fault_rank: int = -1) -> bool:
        """One call on fresh inputs; True when every element is exactly right.

        fault_rank: tests corrupt that rank's result to prove a wrong answer is caught.
        """
        n, dev, r = self.d.world, self.d.device, self.d.rank
        self._fill()
        self()
        if r == fault_rank:
            self.y.view(-1)[0] += 1
        i = torch.arange(self.numel, device=dev, dtype=torch.int32) % 7 + 1
        tri = n * (n + 1) // 2
        if self.op == "all_reduce":
            ok = torch.equal(self.y, (i * tri).to(torch.bfloat16))
        elif self.op == "all_gather":
            k = self.numel // n
            j = torch.arange(self.numel, device=dev, dtype=torch.int32)
            ok = torch.equal(self.y, ((j % k % 7 + 1) * (j // k + 1)).to(torch.bfloat16))
        elif self.op == "reduce_scatter":
            ok = torch.equal(self.y, (i.view(n, -1)[r] * tri).to(torch.bfloat16))
        elif self.op == "alltoall":  # block s of my output is block r of rank s's input
            k = self.numel // n
            blk = i.view(n, k)[r]
            ok = torch.equal(
                self.y.view(n, k),
                torch.stack([(blk * (s + 1)) for s in range(n)]).to(torch.bfloat16),
            )
        elif self.op == "broadcast":
            ok = torch.equal(self.y, (i * 1).to(torch.bfloat16))
        else:
            ok = torch.equal(self.y, (i * ((r - 1) % n + 1)).to(torch.bfloat16))
        flag = torch.tensor([0 if ok else 1], device=dev, dtype=torch.int32)
        dist.all_reduce(flag)  # the check fails everywhere if wrong anywhere
        return int(flag.item()) == 0


def loop_time(d: Dist, c: Coll, *, warmup: int, iters: int, repeats: int,
              graph: bool = False) -> float:
    """nccl-tests' method: warm-up calls, then `iters` calls back to back on one stream
    (Coll.queue), timed around the whole loop (device events on GPU), seconds per call;
    the median of `repeats` such loops. graph: the loop is captured once as a CUDA graph
    and replayed, so torch's per-call host cost is out of the measured time (nccl-tests'
    -G)."""
    fn: Callable[[], None] = c
    c.queue(warmup)
    d.sync()
    run: Callable[[], None]
    if graph and d.is_cuda:
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream(d.device)
        s.wait_stream(torch.cuda.current_stream(d.device))
        with torch.cuda.stream(s):
            fn()  # a call on the capture stream before capture (torch's graph recipe)
        torch.cuda.current_stream(d.device).wait_stream(s)
        d.sync()
        with torch.cuda.graph(g):
            for _ in range(iters):
                fn()
        g.replay()  # the first replay uploads the graph; not timed
        d.sync()
        run = g.replay
    else:
        def run() -> None:
            c.queue(iters)
    times = []
    for _ in range(repeats):
        if d.is_cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / iters)
        else:
            t0 = time.perf_counter()
            run()
            times.append((time.perf_counter() - t0) / iters)
    return statistics.median(times)


def mean_over_ranks(d: Dist, t: float) -> float:
    """nccl-tests' default (-a 1): the time reported is the mean over ranks."""
    tt = torch.tensor([t], device=d.device, dtype=torch.float64)
    dist.all_reduce(tt)
    return float(tt.item()) / d.world


def torch_nccl_version(raw: tuple[int, ...] | int | None = None) -> str:
    """torch.cuda.nccl.version() as 'major.minor.patch' (a tuple, or an int in old torch)."""
    v: tuple[int, ...] | int = torch.cuda.nccl.version() if raw is None else raw
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v[:3])
    n = int(v)  # 2.x encodes major*10000 + minor*100 + patch (NCCL_VERSION_CODE)
    return f"{n // 10000}.{n // 100 % 100}.{n % 100}"


def pair_sweep(d: Dist, sink: Sink, size: int, warmup: int, iters: int, repeats: int) -> None:
    """src -> dst alone for every ordered pair; the others wait."""
    n = d.world
    numel = size // 2
    buf = _pattern(numel, d.rank, d.device)
    for src in range(n):
        for dst in range(n):
            if src == dst:
                continue
            dist.barrier()
            if d.rank not in (src, dst):
                continue

            def step(src: int = src, dst: int = dst) -> None:
                if d.rank == src:
                    dist.send(buf, dst)
                else:
                    dist.recv(buf, src)

            t = median_time(d, step, warmup=warmup, iters=iters, repeats=repeats)
            if d.rank == src:
                sink.emit(
                    "nccl.pair_busbw",
                    round(algbw_gbps(numel * 2, t), 3),
                    "GB/s",
                    src=src,
                    dst=dst,
                    size_bytes=numel * 2,
                )
    dist.barrier()


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--ops", default=",".join(OPS), help="comma list of collectives")
    p.add_argument(
        "--sizes", default="1M:4G:x4", help="nccl-tests' size per op: 1M:4G:x4 or 64M,1G"
    )
    p.add_argument(
        "--modes", default=",".join(MODES),
        help="out_of_place,in_place (nccl-tests' two columns; an op runs those torch has)",
    )
    p.add_argument(
        "--graph", choices=("off", "on", "both"), default="off",
        help="time the loop as a captured CUDA graph too (GPU only; label launch)",
    )
    p.add_argument(
        "--alloc", choices=ALLOCS, default="nccl",
        help="buffers from NCCL's allocator as nccl-tests (default) or torch's caching "
        "allocator; --graph runs always use torch's",
    )
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pair-size", default="256M", help="bytes per pairwise sendrecv (0: skip)")
    p.add_argument(
        "--fault-rank", type=int, default=-1, help="testing: corrupt this rank's checked result"
    )
    a = p.parse_args(argv)
    ops = [o for o in a.ops.split(",") if o]
    bad = [o for o in ops if o not in OPS]
    if bad:
        raise UsageError(f"unknown op(s) {','.join(bad)}; choose from {', '.join(OPS)}")
    modes = [m for m in a.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        raise UsageError(f"bad --modes {a.modes!r}: a comma list of {', '.join(MODES)}")
    if a.iters < 1 or a.repeats < 1 or a.warmup < 0:
        raise UsageError("--iters and --repeats must be positive, --warmup not negative")
    sizes = parse_sizes(a.sizes)
    d = init(a.device)
    launches = {"off": ["eager"], "on": ["graph"], "both": ["eager", "graph"]}[a.graph]
    if not d.is_cuda:
        launches = ["eager"]  # CUDA graphs need a GPU
    # A captured collective registers its buffers with NCCL (NCCL_GRAPH_REGISTER); on
    # 2x H200 a capture after an earlier op's NCCL-pool buffers were freed hit an illegal
    # memory access. Graph runs therefore keep torch's allocator.
    alloc = "torch" if "graph" in launches else a.alloc
    sink = Sink(a.out, "collectives", d.rank)
    if d.rank == 0 and d.is_cuda:
        # the NCCL this process really runs (PyTorch's own), beside the system libnccl
        sink.emit("nccl.torch_version", torch_nccl_version(), "", source="torch")
    for op in ops:
        for size in sizes:
            for mode in modes_for(op, modes):
                c, used = allocate(d, alloc, functools.partial(Coll, d, op, size, mode))
                ok = c.check(a.fault_rank) if c.checkable else None
                lab = {"op": op, "size_bytes": c.size, "impl": "torch", "ranks": d.world,
                       "mode": mode, "alloc": used}
                for launch in list(launches):
                    try:
                        t = loop_time(d, c, warmup=a.warmup, iters=a.iters, repeats=a.repeats,
                                      graph=launch == "graph")
                    except RuntimeError as e:
                        if launch != "graph":
                            raise
                        # a torch/NCCL that cannot capture this op: say so, keep eager numbers
                        print(f"collectives: no CUDA graph for {op} ({e}); eager only",
                              file=sys.stderr)
                        launches.remove("graph")
                        continue
                    t = mean_over_ranks(d, t)
                    if d.rank == 0:
                        alg = algbw_gbps(c.size, t)
                        ll = {**lab, "launch": launch}
                        sink.emit("nccl.algbw", round(alg, 3), "GB/s", **ll)
                        sink.emit("nccl.busbw", round(alg * busbw_factor(op, d.world), 3),
                                  "GB/s", **ll)
                if d.rank == 0 and ok is not None:
                    sink.emit("nccl.correct", ok, "", **lab)
                del c
                if d.is_cuda:
                    torch.cuda.empty_cache()  # 4 GiB buffers per mode: give them back
    pair = parse_sizes(a.pair_size)[0] if a.pair_size not in ("0", "") else 0
    if pair and d.world > 1:
        pair_sweep(d, sink, pair, a.warmup, a.iters, a.repeats)
    sink.close()
    finish()
    return 0


if __name__ == "__main__":
    exit_process(run_main(main))
