"""HBM: copy bandwidth and a pattern test over most of free memory, per GPU.

    torchrun --standalone --nproc-per-node N -m validation.workloads.hbm --out DIR

Bandwidth counts bytes read plus bytes written of a large device copy.
Patterns (walking ones, walking zeros, seeded random) are written to chunks
covering --fill of free memory, then read back and compared on the device;
the count of wrong 64-bit words names the GPU.
"""

from __future__ import annotations

import torch

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

GiB = 1 << 30


def bandwidth(d: Dist, nbytes: int, iters: int, repeats: int) -> float:
    src = torch.randint(-(2**31), 2**31 - 1, (nbytes // 4,), dtype=torch.int32, device=d.device)
    dst = torch.empty_like(src)
    t = median_time(d, lambda: dst.copy_(src), warmup=3, iters=iters, repeats=repeats)
    return 2 * src.numel() * 4 / t / 1e9


def walking_patterns(bits: list[int]) -> list[tuple[str, int]]:
    """(name, 64-bit word) for walking ones then walking zeros at those bit positions."""
    out = []
    for b in bits:
        one = 1 << b
        out.append((f"walk1_{b}", one - (1 << 64) if b == 63 else one))  # int64 two's complement
    for b in bits:
        zero = ~(1 << b) & ((1 << 64) - 1)
        out.append((f"walk0_{b}", zero - (1 << 64) if zero >= 1 << 63 else zero))
    return out


def pattern_test(
    d: Dist, total: int, chunk: int, bits: list[int], random_passes: int, fault: bool
) -> dict[str, int]:
    """Wrong words per pattern over `total` bytes in `chunk`-byte tensors."""
    words = chunk // 8
    chunks = [
        torch.empty(words, dtype=torch.int64, device=d.device)
        for _ in range(max(1, total // chunk))
    ]
    errors: dict[str, int] = {}
    for name, word in walking_patterns(bits):
        for c in chunks:
            c.fill_(word)
        if fault:  # testing: one stuck bit in the last chunk
            chunks[-1][words // 2] ^= 1 << 5
        errors[name] = int(sum(int((c != word).sum()) for c in chunks))
    for p in range(random_passes):
        gen = torch.Generator(device=d.device)
        for i, c in enumerate(chunks):
            gen.manual_seed(7919 * (p + 1) + i)
            c.random_(generator=gen)
        if fault:
            chunks[-1][words // 3] ^= 1 << 9
        bad = 0
        for i, c in enumerate(chunks):  # regenerate the same stream to verify
            gen.manual_seed(7919 * (p + 1) + i)
            bad += int((c != torch.empty_like(c).random_(generator=gen)).sum())
        errors[f"random_{p}"] = bad
    del chunks
    return errors


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument(
        "--bw-bytes", type=int, default=0, help="copy size (default 4 GiB GPU, 8 MiB CPU)"
    )
    p.add_argument(
        "--fill", type=float, default=0.9, help="fraction of free memory the pattern test covers"
    )
    p.add_argument(
        "--pattern-bytes", type=int, default=0, help="CPU: bytes to test (GPU: from --fill)"
    )
    p.add_argument("--bits", default="0:64", help="walking bit positions, start:stop[:step]")
    p.add_argument("--random-passes", type=int, default=2)
    p.add_argument(
        "--fault-rank", type=int, default=-1, help="testing: inject a stuck bit on this rank"
    )
    a = p.parse_args(argv)
    try:
        parts = [int(x) for x in a.bits.split(":")]
        bits = list(range(*parts))
    except (ValueError, TypeError):
        raise UsageError(f"bad --bits {a.bits!r}: use start:stop[:step]") from None
    if not bits or min(bits) < 0 or max(bits) > 63 or not 0 < a.fill < 1:
        raise UsageError("--bits must lie in 0..63 and --fill in (0, 1)")
    d = init(a.device)
    sink = Sink(a.out, "hbm", d.rank)
    g = d.local_rank
    bw = bandwidth(
        d,
        a.bw_bytes or (4 * GiB if d.is_cuda else 8 << 20),
        10 if d.is_cuda else 3,
        5 if d.is_cuda else 2,
    )
    sink.emit("hbm.bandwidth", round(bw, 1), "GB/s", gpu=g)
    if d.is_cuda:
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info(d.device)
        total, chunk = int(free * a.fill), GiB
    else:
        total = a.pattern_bytes or (16 << 20)
        chunk = min(total, 4 << 20)
    errs = pattern_test(d, total, chunk, bits, a.random_passes, d.rank == a.fault_rank)
    tested = (total // chunk) * chunk
    sink.emit("hbm.pattern_bytes", tested, "B", gpu=g)
    sink.emit(
        "hbm.pattern_errors",
        sum(errs.values()),
        "count",
        gpu=g,
        patterns=len(errs),
        failing=",".join(k for k, v in errs.items() if v),
    )
    sink.close()
    finish()
    return 0


if __name__ == "__main__":
    exit_process(run_main(main))
