"""GEMM burn-in: every GPU at once, sustained matrix products with telemetry and an SDC screen.

    torchrun --standalone --nproc-per-node N -m validation.workloads.gemm_burnin \\
        --out DIR --duration-s 300

Each interval (about --interval-s) is timed with device events and matched
with NVML samples taken in a thread. Every --sdc-every-s the same seeded
product is computed on every GPU and compared bit for bit across GPUs and
with the GPU's own first result.

Every completed interval is appended durably to DIR/intervals.rank<r>.jsonl
(validation.workloads.burnin_log). With --resume the worker reads those logs,
runs only the time that is left and reports the whole window (earlier
intervals and new ones), so an interrupted burn-in is not started over.
"""

from __future__ import annotations

import bisect
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from validation.workloads import burnin_log
from validation.workloads.burnin_log import IntervalLog, LogBusy, Record
from validation.workloads.common import (
    Dist,
    Sink,
    UsageError,
    base_parser,
    exit_process,
    finish,
    init,
    run_main,
)
from validation.workloads.load_clocks import load_clocks
from validation.workloads.sdc import sdc_blame
from validation.workloads.telemetry import Sample, Sampler, gpu_uuid

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

    def __init__(
        self, d: Dist, n: int, fault_rank: int, carried: tuple[int, int] = (0, 0)
    ) -> None:
        self.d, self.fault_rank = d, fault_rank
        self.a, self.b = _operands(d, n, "bf16", SDC_SEED)
        self.first: torch.Tensor | None = None
        self.repeat_bad = torch.zeros((), dtype=torch.int64, device=d.device)
        self.mismatches = 0  # elements, summed over screens
        self.screens = 0  # in this process
        # (screens, repeat mismatches) of the interrupted segments this run continues
        self.carried_screens, self.carried_bad = carried
        self.bad_seen = 0

    def bad_so_far(self) -> int:
        """Repeat mismatches in this process so far (a local sync: only after a screen)."""
        self.bad_seen = int(self.repeat_bad.item())
        return self.bad_seen

    @property
    def total_screens(self) -> int:
        return self.carried_screens + self.screens

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
        assert self.first is not None  # the run's first screen() set it
        self.repeat_bad += (c != self.first).sum()
        repeat = int(self.repeat_bad.item()) + self.carried_bad
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
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the burn-in whose interval logs are in --out: run only the time "
        "left and report earlier and new intervals together",
    )
    a = p.parse_args(argv)
    if a.duration_s <= 0 or a.interval_s <= 0:
        raise UsageError("--duration-s and --interval-s must be positive")
    dtypes = [t for t in a.dtypes.split(",") if t]
    if any(t not in ("bf16", "fp8") for t in dtypes):
        raise UsageError(f"bad --dtypes {a.dtypes!r}: bf16 and/or fp8")
    # the log is locked before the process group forms: an orphaned worker of the
    # interrupted run still burning into it is a one-line error, not a hang
    log_file = burnin_log.log_path(a.out, int(os.environ.get("RANK", "0")))
    prior = burnin_log.read_intervals(log_file) if a.resume else []
    try:
        ilog = IntervalLog(log_file, fresh=not a.resume)
    except LogBusy as e:
        raise UsageError(str(e)) from None
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
    sdc = SdcScreen(d, a.sdc_n or (4096 if d.is_cuda else 64), a.fault_rank,
                    burnin_log.sdc_carry(prior))
    sdc.screen()
    share = {
        t: (a.fp8_share if t == "fp8" else 1 - a.fp8_share) if len(dtypes) > 1 else 1.0
        for t in dtypes
    }
    seg = Segment(burnin_log.next_segment(prior), burnin_log.burn_clock(prior), time.monotonic())
    for dtype in dtypes:
        earlier = [r for r in prior if r["dtype"] == dtype]
        new = _burn(d, sampler, sdc, dtype, n, a.duration_s * share[dtype], a, ilog, seg,
                    burnin_log.done_s(earlier))
        _report(sink, sampler, d.local_rank, dtype, n, earlier + new)
    ilog.close()
    sdc.cross()
    sink.emit("gemm.sdc_mismatches", sdc.mismatches, "count", gpu=d.local_rank,
              screens=sdc.total_screens)
    if sampler is not None:
        sampler.stop()
    sink.close()
    finish()
    return 0


@dataclass(frozen=True)
class Segment:
    """This process's part of the burn-in: its number and where it starts on the burn clock."""

    number: int
    clock0: float  # burn-in seconds already done before this process
    t0: float  # time.monotonic() when this process started burning


def _burn(
    d: Dist,
    sampler: Sampler | None,
    sdc: SdcScreen,
    dtype: str,
    n: int,
    duration: float,
    a: Any,
    ilog: IntervalLog,
    seg: Segment,
    done: float,
) -> list[Record]:
    """Burn the time left of `duration` (`done` seconds were burnt before); each
    completed interval goes to the log before the next starts."""
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
    remaining = max(0.0, duration - done)
    plan = torch.tensor(
        [
            iters,
            # a fresh burn-in runs at least one interval; a resumed one may have none left
            max(0 if done else 1, round(remaining / (iters * per))),
            max(1, round(a.sdc_every_s / (iters * per))),
        ],
        device=d.device,
    )
    dist.broadcast(plan, 0)  # rank 0's plan everywhere: every rank reaches the last screen
    iters, intervals, sdc_every = (int(v) for v in plan.tolist())
    records: list[Record] = []
    ev0, ev1 = (
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        if d.is_cuda
        else (None, None)
    )
    ramp_end = None
    bad = sdc.bad_seen
    for i in range(intervals):
        h0 = time.monotonic()
        if ramp_end is None:  # each segment ramps up again (the GPUs sat idle meanwhile)
            ramp_end = h0 + a.ramp_s
        if ev0 is not None:
            ev0.record()
        c0 = time.perf_counter()
        for _ in range(iters):
            _product(dtype, x, y, out)
        if ev0 is not None and ev1 is not None:
            ev1.record()
            ev1.synchronize()
            secs = ev0.elapsed_time(ev1) / 1e3
        else:
            secs = time.perf_counter() - c0
        h1 = time.monotonic()
        if (i + 1) % sdc_every == 0:
            sdc.screen()
            bad = sdc.bad_so_far()
        rec: Record = {
            "dtype": dtype,
            "segment": seg.number,
            "i": i,
            "t_s": round(seg.clock0 + h0 - seg.t0, 3),
            "dur_s": round(h1 - h0, 4),
            "tflops": _rate(flop * iters / secs / 1e12),
            "steady": h0 >= ramp_end,
            "plan_intervals": intervals,
            "nominal_s": round(iters * per, 4),
            "n": n,
            **_telemetry(sampler, h0, h1),
            "sdc_screens": sdc.screens,
            "sdc_repeat_bad": bad,
        }
        ilog.append(rec)
        records.append(rec)
    return records


def _window(samples: list[Sample], t0: float, t1: float) -> list[Sample]:
    # bisect: a 4 h burn-in holds ~70k samples, scanned once per interval otherwise
    lo = bisect.bisect_left(samples, t0, key=lambda s: s.t)
    hi = bisect.bisect_left(samples, t1, lo=lo, key=lambda s: s.t)
    return samples[lo:hi]


def _telemetry(sampler: Sampler | None, h0: float, h1: float) -> dict[str, Any]:
    """NVML figures of one interval; None where NVML is absent or gave no sample."""
    w = _window(sampler.samples, h0, h1) if sampler is not None and sampler.available else []
    if not w or sampler is None:
        return dict.fromkeys(("power_w", "sm_mhz", "temp_c", "reasons", "power_limit_w"))
    reasons = 0
    for s in w:
        reasons |= s.reasons
    return {
        "power_w": round(statistics.fmean(s.power_w for s in w), 2),
        "sm_mhz": round(statistics.fmean(s.sm_mhz for s in w)),
        "temp_c": max(s.temp_c for s in w),
        "reasons": reasons,
        "power_limit_w": sampler.power_limit_w,
    }


# The plotted series in the result: at most this many points per GPU and dtype (a 4 h
# burn-in at 1 s intervals has 14,400; every interval stays in the interval log). Judged
# figures are computed from every interval, never from these points.
SERIES_POINTS = 600


def series_points(records: list[Record], most: int = SERIES_POINTS) -> list[Record]:
    """The intervals as at most `most` points, each standing for a run of consecutive
    intervals by its worst: the lowest rate and clock, the highest power and temperature,
    so a short dip or spike still shows."""
    if len(records) <= most:
        return records
    size = -(-len(records) // most)
    out: list[Record] = []
    for i in range(0, len(records), size):
        run = records[i:i + size]
        point = dict(run[0])
        point["tflops"] = min(r["tflops"] for r in run)
        if all(r.get("power_w") is not None for r in run):
            point.update(power_w=max(r["power_w"] for r in run),
                         sm_mhz=min(r["sm_mhz"] for r in run),
                         temp_c=max(r["temp_c"] for r in run))
        out.append(point)
    return out


def _rate(tflops: float) -> float:
    """Five significant digits: a GPU's hundreds of TFLOP/s keep two decimals, and a CPU
    without fast bf16 (a lab controller: a few GFLOP/s) does not round to zero."""
    return float(f"{tflops:.5g}")


def _report(
    sink: Sink, sampler: Sampler | None, g: int, dtype: str, n: int, records: list[Record]
) -> None:
    """Measurements of the whole window of one dtype: earlier segments and this one."""
    summ = burnin_log.summarize(records)
    sink.emit("gemm.tflops", _rate(summ["tflops"]), "TFLOP/s", gpu=g, dtype=dtype, n=n)
    for r in series_points(records):
        ts = round(float(r["t_s"]), 2)
        sink.emit("gemm.interval_tflops", _rate(r["tflops"]), "TFLOP/s", gpu=g, dtype=dtype,
                  t_s=ts)
        if r.get("power_w") is None:
            continue
        sink.emit("gemm.interval_power_w", round(r["power_w"], 1), "W", gpu=g, dtype=dtype, t_s=ts)
        sink.emit("gemm.interval_sm_clock_mhz", r["sm_mhz"], "MHz", gpu=g, dtype=dtype, t_s=ts)
        sink.emit("gemm.interval_temp_c", r["temp_c"], "C", gpu=g, dtype=dtype, t_s=ts)
    if sampler is not None and sampler.available:
        if summ["power_fraction"] is not None:
            sink.emit("gemm.power_fraction", round(summ["power_fraction"], 4), "", gpu=g,
                      dtype=dtype)
            sink.emit("gemm.power_fraction_median", round(summ["power_fraction_median"], 4), "",
                      gpu=g, dtype=dtype)
        sink.emit("gemm.power_limit_w", sampler.power_limit_w, "W", gpu=g)
        temps = [r["temp_c"] for r in records if r.get("temp_c") is not None]
        if sampler.slowdown_c is not None and temps:
            # the headroom the hottest interval left to the driver's slowdown temperature
            sink.emit("gemm.slowdown_margin_c", round(sampler.slowdown_c - max(temps), 1), "C",
                      gpu=g, dtype=dtype)
        sink.emit("gemm.clock_event_reasons", summ["reasons"] or 0, "", gpu=g, dtype=dtype)
        # clocks held under load (steady intervals), judged against the profile
        clock, reasons = load_clocks(records)
        if clock is not None:
            sink.emit("gemm.load_sm_clock_mhz", clock, "MHz", gpu=g, dtype=dtype)
            for reason, seen in reasons.items():
                sink.emit("gemm.load_clock_event", seen, "", gpu=g, dtype=dtype, reason=reason)


if __name__ == "__main__":
    exit_process(run_main(main))
