"""GEMM burn-in: every GPU at once, sustained matrix products with telemetry and an SDC screen.

    torchrun --standalone --nproc-per-node N -m validation.workloads.gemm_burnin \\
        --out DIR --duration-s 300

Each interval (about --interval-s) is timed with device events and matched
with NVML samples taken in a thread. Every --sdc-every-s the same seeded
product is computed on every GPU and compared bit for bit across GPUs and
with the GPU's own first result.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from validation.workloads.common import Dist, Sink, UsageError, base_parser, finish, init, run_main
from validation.workloads.sdc import sdc_blame
from validation.workloads.telemetry import Sampler, gpu_uuid, window

SDC_SEED = 20261130


def _operands(d: Dist, n: int, dtype: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    # generated on the host so every GPU (and the CPU run) gets identical bits
    a = torch.randn(n, n, generator=g).to(torch.bfloat16).to(d.device)
    b = torch.randn(n, n, generator=g).to(torch.bfloat16).to(d.device)
    if dtype == "fp8":
        a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()  # column-major B
    return a, b


def _product(
    dtype: str, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None
) -> torch.Tensor:
    if dtype == "fp8":
        one = torch.ones((), device=a.device, dtype=torch.float32)
        return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return torch.matmul(a, b, out=out)


def fp8_supported(d: Dist) -> bool:
    return d.is_cuda and torch.cuda.get_device_capability(d.device) >= (8, 9)


class SdcScreen:
    """Repeats compare on the GPU itself with no sync (a faster GPU never waits for a
    slower one mid-burn, which would dip its power); GPUs compare with each other
    only at the first and last screen."""

    def __init__(self, d: Dist, n: int, fault_rank: int) -> None:
        self.d, self.fault_rank = d, fault_rank
        self.a, self.b = _operands(d, n, "bf16", SDC_SEED)
        self.first: torch.Tensor | None = None
        self.repeat_bad = torch.zeros((), dtype=torch.int64, device=d.device)
        self.mismatches = 0  # elements, summed over screens
        self.screens = 0

    def _product(self) -> torch.Tensor:
        c = torch.matmul(self.a, self.b)
        if self.d.rank == self.fault_rank and self.screens > 0:  # testing: one flipped bit
            c.view(torch.int16).view(-1)[7] ^= 1
        self.screens += 1
        return c

    def screen(self) -> None:
        """A repeat on this GPU, compared with its first result on the device (no sync)."""
        c = self._product()
        if self.first is None:
            self.first = c.clone()
        else:
            self.repeat_bad += (c != self.first).sum()

    def cross(self) -> None:
        """A last repeat, then every GPU's result against the others' (collective)."""
        d = self.d
        c = self._product()
        self.repeat_bad += (c != self.first).sum()
        repeat = int(self.repeat_bad.item())
        flat = c.contiguous().view(torch.int16).view(-1)
        if flat.numel() % 2:
            raise UsageError("--sdc-n must make an even element count")
        mine = flat.view(torch.int32)
        gathered = [torch.empty_like(mine) for _ in range(d.world)]
        dist.all_gather(gathered, mine)
        rep = torch.tensor([repeat], device=d.device, dtype=torch.int64)
        reps = [torch.empty_like(rep) for _ in range(d.world)]
        dist.all_gather(reps, rep)
        stable = [int(t.item()) == 0 for t in reps]
        cross = sdc_blame([g.view(torch.int16) for g in gathered], stable)[d.rank]
        self.mismatches = max(repeat, cross)


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument(
        "--duration-s", type=float, default=30.0, help="burn-in time for all dtypes together"
    )
    p.add_argument(
        "--side", type=int, default=0, help="matrix side (default 16384 on GPU, 256 on CPU)"
    )
    p.add_argument(
        "--dtypes", default="bf16,fp8", help="bf16 and/or fp8 (fp8 where the GPU has it)"
    )
    p.add_argument("--fp8-share", type=float, default=0.2, help="fraction of the time given to fp8")
    p.add_argument("--interval-s", type=float, default=1.0)
    p.add_argument("--ramp-s", type=float, default=5.0, help="excluded from sustained figures")
    p.add_argument(
        "--sdc-n", type=int, default=0, help="SDC product side (default 4096 GPU, 64 CPU)"
    )
    p.add_argument("--sdc-every-s", type=float, default=10.0)
    p.add_argument(
        "--fault-rank", type=int, default=-1, help="testing: flip a bit in this rank's SDC result"
    )
    a = p.parse_args(argv)
    if a.duration_s <= 0 or a.interval_s <= 0:
        raise UsageError("--duration-s and --interval-s must be positive")
    dtypes = [t for t in a.dtypes.split(",") if t]
    if any(t not in ("bf16", "fp8") for t in dtypes):
        raise UsageError(f"bad --dtypes {a.dtypes!r}: bf16 and/or fp8")
    d = init(a.device)
    n = a.side or (16384 if d.is_cuda else 256)
    sink = Sink(a.out, "gemm_burnin", d.rank)
    if "fp8" in dtypes and not fp8_supported(d):
        sink.emit("gemm.fp8_supported", False, "", gpu=d.local_rank)
        dtypes.remove("fp8")
    if not dtypes:
        raise UsageError("no dtype left to run")
    sampler = Sampler(gpu_uuid(d.local_rank), d.local_rank).start() if d.is_cuda else None
    if sampler is not None:
        sink.emit("gemm.telemetry_ok", sampler.available, "", gpu=d.local_rank)
    sdc = SdcScreen(d, a.sdc_n or (4096 if d.is_cuda else 64), a.fault_rank)
    sdc.screen()
    share = {
        t: (a.fp8_share if t == "fp8" else 1 - a.fp8_share) if len(dtypes) > 1 else 1.0
        for t in dtypes
    }
    t_start = time.monotonic()
    for dtype in dtypes:
        _burn(d, sink, sampler, sdc, dtype, n, a.duration_s * share[dtype], a, t_start)
    sdc.cross()
    sink.emit("gemm.sdc_mismatches", sdc.mismatches, "count", gpu=d.local_rank, screens=sdc.screens)
    if sampler is not None:
        sampler.stop()
    sink.close()
    finish()
    return 0


def _burn(
    d: Dist,
    sink: Sink,
    sampler: Sampler | None,
    sdc: SdcScreen,
    dtype: str,
    n: int,
    duration: float,
    a,
    t_run0: float,
) -> None:
    x, y = _operands(d, n, dtype, 1000 + d.rank)
    out = torch.empty(n, n, dtype=torch.bfloat16, device=d.device) if dtype == "bf16" else None
    flop = 2.0 * n**3
    for _ in range(3):  # warm-up: cuBLAS handle, heuristics, clocks up
        _product(dtype, x, y, out)
    d.sync()
    t0 = time.perf_counter()
    _product(dtype, x, y, out)
    d.sync()
    per = max(time.perf_counter() - t0, 1e-6)
    iters = max(1, int(a.interval_s / per))
    plan = torch.tensor(
        [
            iters,
            max(1, round(duration / (iters * per))),
            max(1, round(a.sdc_every_s / (iters * per))),
        ],
        device=d.device,
    )
    dist.broadcast(plan, 0)  # rank 0's plan everywhere: the SDC screens' collectives line up
    iters, intervals, sdc_every = (int(v) for v in plan.tolist())
    rows = []  # (host start, host end, tflops)
    ev0, ev1 = (
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        if d.is_cuda
        else (None, None)
    )
    for i in range(intervals):
        h0 = time.monotonic()
        if ev0 is not None:
            ev0.record()
        c0 = time.perf_counter()
        for _ in range(iters):
            _product(dtype, x, y, out)
        if ev1 is not None:
            ev1.record()
            ev1.synchronize()
            secs = ev0.elapsed_time(ev1) / 1e3
        else:
            secs = time.perf_counter() - c0
        h1 = time.monotonic()
        rows.append((h0, h1, flop * iters / secs / 1e12))
        if (i + 1) % sdc_every == 0:
            sdc.screen()
    g = d.local_rank
    ramp_end = rows[0][0] + a.ramp_s
    steady = [r for r in rows if r[0] >= ramp_end] or rows[len(rows) // 2 :]
    sink.emit(
        "gemm.tflops",
        round(statistics.median(r[2] for r in steady), 2),
        "TFLOP/s",
        gpu=g,
        dtype=dtype,
        n=n,
    )
    fractions, reasons = [], 0
    for h0, h1, tf in rows:
        ts = round(h0 - t_run0, 2)
        sink.emit("gemm.interval_tflops", round(tf, 2), "TFLOP/s", gpu=g, dtype=dtype, t_s=ts)
        if sampler is None or not sampler.available:
            continue
        w = window(sampler.samples, h0, h1)
        if not w:
            continue
        pw = statistics.fmean(s.power_w for s in w)
        sink.emit("gemm.interval_power_w", round(pw, 1), "W", gpu=g, dtype=dtype, t_s=ts)
        sink.emit(
            "gemm.interval_sm_clock_mhz",
            round(statistics.fmean(s.sm_mhz for s in w)),
            "MHz",
            gpu=g,
            dtype=dtype,
            t_s=ts,
        )
        sink.emit("gemm.interval_temp_c", max(s.temp_c for s in w), "C", gpu=g, dtype=dtype, t_s=ts)
        for s in w:
            reasons |= s.reasons
        if h0 >= ramp_end and sampler.power_limit_w:
            fractions.append(pw / sampler.power_limit_w)
    if sampler is not None and sampler.available:
        if fractions:
            # the weakest interval after ramp-up: a burn-in holds the limit the whole time
            sink.emit("gemm.power_fraction", round(min(fractions), 4), "", gpu=g, dtype=dtype)
            sink.emit(
                "gemm.power_fraction_median",
                round(statistics.median(fractions), 4),
                "",
                gpu=g,
                dtype=dtype,
            )
        sink.emit("gemm.power_limit_w", sampler.power_limit_w, "W", gpu=g)
        sink.emit("gemm.clock_event_reasons", reasons, "", gpu=g, dtype=dtype)


if __name__ == "__main__":
    raise SystemExit(run_main(main))
