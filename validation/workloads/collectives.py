"""Collectives over a size sweep, checked for the right answer, then timed.

    torchrun --standalone --nproc-per-node N -m validation.workloads.collectives --out DIR

Per op and size: one call on known inputs checked exactly (small integers
that bf16 holds exactly), then warm-up and timed loops (device events,
median of repeats). busbw uses nccl-tests' factors. Then every ordered GPU
pair sends to each other alone, to find one weak link.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from validation.workloads.busbw import OPS, algbw_gbps, busbw_factor
from validation.workloads.common import (
    Dist,
    Sink,
    UsageError,
    base_parser,
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


class Coll:
    """Buffers and one call of an op at one size (size = nccl-tests' size)."""

    def __init__(self, d: Dist, op: str, size: int) -> None:
        self.d, self.op, n = d, op, d.world
        elem = 2  # bf16
        unit = n * elem
        numel = max(size // unit, 1) * n  # divisible by n for the sharded ops
        self.size = numel * elem
        dev, r = d.device, d.rank
        if op == "all_reduce":
            self.x = _pattern(numel, r, dev)
        elif op == "all_gather":
            self.x, self.y = (
                _pattern(numel // n, r, dev),
                torch.empty(numel, dtype=torch.bfloat16, device=dev),
            )
        elif op == "reduce_scatter":
            self.x, self.y = (
                _pattern(numel, r, dev),
                torch.empty(numel // n, dtype=torch.bfloat16, device=dev),
            )
        elif op == "alltoall":
            self.x, self.y = (
                _pattern(numel, r, dev),
                torch.empty(numel, dtype=torch.bfloat16, device=dev),
            )
        elif op == "broadcast":
            self.x = _pattern(numel, r, dev)
        elif op == "sendrecv":
            self.x, self.y = (
                _pattern(numel, r, dev),
                torch.empty(numel, dtype=torch.bfloat16, device=dev),
            )
        else:
            raise UsageError(f"unknown op {op!r}; choose from {', '.join(OPS)}")
        self.numel = numel

    def __call__(self) -> None:
        d, n = self.d, self.d.world
        if self.op == "all_reduce":
            dist.all_reduce(self.x)
        elif self.op == "all_gather":
            dist.all_gather_into_tensor(self.y, self.x)
        elif self.op == "reduce_scatter":
            dist.reduce_scatter_tensor(self.y, self.x)
        elif self.op == "alltoall":
            dist.all_to_all_single(self.y, self.x)
        elif self.op == "broadcast":
            dist.broadcast(self.x, src=0)
        elif self.op == "sendrecv":  # ring, as nccl-tests' sendrecv_perf
            ops = [
                dist.P2POp(dist.isend, self.x, (d.rank + 1) % n),
                dist.P2POp(dist.irecv, self.y, (d.rank - 1) % n),
            ]
            for w in dist.batch_isend_irecv(ops):
                w.wait()

    def check(self, fault_rank: int = -1) -> bool:
        """One call on fresh inputs; True when every element is exactly right.

        fault_rank: tests corrupt that rank's result to prove a wrong answer is caught.
        """
        n, dev, r = self.d.world, self.d.device, self.d.rank
        self.x.copy_(_pattern(self.x.numel(), r, dev))
        self()
        if r == fault_rank:
            (self.x if self.op in ("all_reduce", "broadcast") else self.y).view(-1)[0] += 1
        i = torch.arange(self.numel, device=dev, dtype=torch.int32) % 7 + 1
        tri = n * (n + 1) // 2
        if self.op == "all_reduce":
            ok = torch.equal(self.x, (i * tri).to(torch.bfloat16))
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
            ok = torch.equal(self.x, (i * 1).to(torch.bfloat16))
        else:
            ok = torch.equal(self.y, (i * ((r - 1) % n + 1)).to(torch.bfloat16))
        flag = torch.tensor([0 if ok else 1], device=dev, dtype=torch.int32)
        dist.all_reduce(flag)  # the check fails everywhere if wrong anywhere
        return int(flag.item()) == 0


def torch_nccl_version(raw: object = None) -> str:
    """torch.cuda.nccl.version() as 'major.minor.patch' (a tuple, or an int in old torch)."""
    v = torch.cuda.nccl.version() if raw is None else raw
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
    sizes = parse_sizes(a.sizes)
    d = init(a.device)
    sink = Sink(a.out, "collectives", d.rank)
    if d.rank == 0 and d.is_cuda:
        # the NCCL this process really runs (PyTorch's own), beside the system libnccl
        sink.emit("nccl.torch_version", torch_nccl_version(), "", source="torch")
    for op in ops:
        for size in sizes:
            c = Coll(d, op, size)
            ok = c.check(a.fault_rank)
            t = median_time(d, c, warmup=a.warmup, iters=a.iters, repeats=a.repeats)
            # each rank's time can differ a little; nccl-tests reports the slowest rank's
            tt = torch.tensor([t], device=d.device, dtype=torch.float64)
            dist.all_reduce(tt, op=dist.ReduceOp.MAX)
            if d.rank == 0:
                alg = algbw_gbps(c.size, float(tt.item()))
                lab = {"op": op, "size_bytes": c.size, "impl": "torch", "ranks": d.world}
                sink.emit("nccl.algbw", round(alg, 3), "GB/s", **lab)
                sink.emit("nccl.busbw", round(alg * busbw_factor(op, d.world), 3), "GB/s", **lab)
                sink.emit("nccl.correct", ok, "", **lab)
            del c
    pair = parse_sizes(a.pair_size)[0] if a.pair_size not in ("0", "") else 0
    if pair and d.world > 1:
        pair_sweep(d, sink, pair, a.warmup, a.iters, a.repeats)
    sink.close()
    finish()
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
