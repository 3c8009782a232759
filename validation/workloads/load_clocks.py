"""Clocks held under load: SM clock and hardware slowdown reasons over the steady part of
the GEMM burn-in (after each segment's ramp), from the NVML telemetry intervals."""

from __future__ import annotations

import statistics
from typing import Any

# NVML nvmlClocksEventReason* bits that mean the hardware pulled the clocks down
HW_REASONS = {"hw_slowdown": 0x8, "hw_thermal": 0x40, "hw_power_brake": 0x80}


def load_clocks(records: list[dict[str, Any]]) -> tuple[float | None, dict[str, bool]]:
    """(median SM clock of the steady intervals, {reason: seen}) ; (None, {}) without NVML."""
    steady = [r for r in records if r.get("steady") and r.get("sm_mhz") is not None]
    if not steady:
        return None, {}
    acc = 0
    for r in steady:
        acc |= int(r.get("reasons") or 0)
    return (float(statistics.median(float(r["sm_mhz"]) for r in steady)),
            {name: bool(acc & bit) for name, bit in HW_REASONS.items()})
