"""The GEMM burn-in's interval log: one JSON line per completed interval, per rank.

Each line is flushed and fsync'ed as the interval ends, so a node that reboots
or a worker that is killed loses at most the interval it was in; a resumed
burn-in reads the log back and runs only what is left. No torch here: the
check that starts the worker reads the log too (for its progress estimate).

A record (keys the resumed worker and the tests rely on):
    dtype, segment (0 = first run, 1 = first resume, ...), i (interval in its segment),
    t_s (start on the burn-in clock: time spent burning, interruptions left out),
    dur_s (host wall time of the interval), tflops, steady (after the segment's ramp),
    plan_intervals, nominal_s (the segment's plan: how many intervals of what length),
    n (matrix side), power_w, sm_mhz, temp_c, reasons, power_limit_w (None without NVML),
    sdc_screens, sdc_repeat_bad (SDC screens and repeat mismatches so far in the segment)
"""

from __future__ import annotations

import fcntl
import json
import os
import statistics
from pathlib import Path
from typing import Any, TextIO

Record = dict[str, Any]


class LogBusy(RuntimeError):
    """Another burn-in still holds the log (an orphaned worker of the interrupted run)."""


def log_path(out: Path, rank: int) -> Path:
    # not "<module>.rank*.jsonl": the launcher reads those as measurements
    return out / f"intervals.rank{rank}.jsonl"


class IntervalLog:
    """Appends records durably; holds an exclusive lock so two burn-ins never share a log."""

    def __init__(self, path: Path, fresh: bool) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._f: TextIO = path.open("a", encoding="utf-8")
        try:
            fcntl.flock(self._f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._f.close()
            raise LogBusy(f"{path} is held by a burn-in that is still running; "
                          "stop it before resuming") from None
        # truncate only once the lock is ours: all of it for a fresh burn-in; for a
        # resumed one the torn tail of the interrupted write, or the next record joins it
        self._f.truncate(0 if fresh else _complete_length(path))

    def append(self, rec: Record) -> None:
        self._f.write(json.dumps(rec) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()  # closing releases the lock


def _complete_length(path: Path) -> int:
    """Bytes up to and including the last newline."""
    data = path.read_bytes()
    return data.rfind(b"\n") + 1


def read_intervals(path: Path) -> list[Record]:
    """Every complete record; a line torn by the interruption (the last one) is dropped."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and {"dtype", "dur_s", "tflops"} <= rec.keys():
            out.append(rec)
    return out


def done_s(records: list[Record], dtype: str | None = None) -> float:
    """Seconds already burnt (for one dtype, or all)."""
    return sum(float(r["dur_s"]) for r in records if dtype is None or r["dtype"] == dtype)


def next_segment(records: list[Record]) -> int:
    return max((int(r.get("segment", 0)) for r in records), default=-1) + 1


def burn_clock(records: list[Record]) -> float:
    """Where the burn-in clock stands: the end of the last completed interval."""
    return max((float(r["t_s"]) + float(r["dur_s"]) for r in records), default=0.0)


def sdc_carry(records: list[Record]) -> tuple[int, int]:
    """(screens, repeat mismatches) of earlier segments; the counts are cumulative per
    segment, so each segment's last record holds its total."""
    last: dict[int, Record] = {}
    for r in records:
        last[int(r.get("segment", 0))] = r  # records are in the order they were written
    return (sum(int(r.get("sdc_screens", 0)) for r in last.values()),
            sum(int(r.get("sdc_repeat_bad", 0)) for r in last.values()))


def summarize(records: list[Record]) -> dict[str, Any]:
    """Whole-window figures of one dtype's intervals (all segments together).

    tflops: median over steady intervals (after each segment's ramp), else the later
    half; power fractions: over steady intervals with NVML readings; reasons: OR.
    """
    if not records:
        return {"tflops": None, "power_fraction": None, "power_fraction_median": None,
                "reasons": None}
    steady = [r for r in records if r.get("steady")] or records[len(records) // 2:]
    fractions = [float(r["power_w"]) / float(r["power_limit_w"]) for r in records
                 if r.get("steady") and r.get("power_w") is not None and r.get("power_limit_w")]
    reasons = [int(r["reasons"]) for r in records if r.get("reasons") is not None]
    acc = 0
    for x in reasons:
        acc |= x
    return {
        "tflops": statistics.median(float(r["tflops"]) for r in steady),
        # the weakest interval after ramp-up: a burn-in holds the limit the whole time
        "power_fraction": min(fractions) if fractions else None,
        "power_fraction_median": statistics.median(fractions) if fractions else None,
        "reasons": acc if reasons else None,
    }
