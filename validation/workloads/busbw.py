"""Bus-bandwidth factors and the nccl-tests output parser (pure, no torch).

busbw = algbw * factor, with nccl-tests' factors (its doc/PERFORMANCE.md), so
our numbers and nccl-tests' compare one to one. `size` is nccl-tests' size:
the larger of the two buffers (the gathered output, the scattered input).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv")


def busbw_factor(op: str, n: int) -> float:
    if n < 1:
        raise ValueError("need at least one rank")
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    if op in ("broadcast", "sendrecv", "reduce"):
        return 1.0
    raise ValueError(f"unknown collective {op!r}")


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    return size_bytes / seconds / 1e9


@dataclass(frozen=True)
class NcclTestsRow:
    op: str
    size_bytes: int
    dtype: str
    oop_time_us: float
    oop_algbw: float
    oop_busbw: float
    oop_wrong: int | None  # None where nccl-tests ran without validation ("N/A")
    ip_time_us: float
    ip_algbw: float
    ip_busbw: float
    ip_wrong: int | None


_HEADER = re.compile(r"^# Collective test starting: (\w+)_perf")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\S+)\s+(-?\d+)\s+(.*)$")


def _wrong(tok: str) -> int | None:
    return None if tok == "N/A" else int(tok)


def parse_nccl_tests(text: str, op: str | None = None) -> list[NcclTestsRow]:
    """Rows of a `<coll>_perf` log; op from its banner unless given."""
    rows: list[NcclTestsRow] = []
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            op = m.group(1)
            continue
        if line.startswith("#"):
            continue
        m = _ROW.match(line)
        if not m:
            continue
        rest = m.group(6).split()
        if len(rest) != 8:
            continue
        if op is None:
            raise ValueError("nccl-tests log without a 'Collective test starting' banner")
        rows.append(
            NcclTestsRow(
                op=op,
                size_bytes=int(m.group(1)),
                dtype=m.group(3),
                oop_time_us=float(rest[0]),
                oop_algbw=float(rest[1]),
                oop_busbw=float(rest[2]),
                oop_wrong=_wrong(rest[3]),
                ip_time_us=float(rest[4]),
                ip_algbw=float(rest[5]),
                ip_busbw=float(rest[6]),
                ip_wrong=_wrong(rest[7]),
            )
        )
    return rows
