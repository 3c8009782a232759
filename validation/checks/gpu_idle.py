"""Idle power and temperature of each GPU against the node's other GPUs.

A GPU drawing far more power or running far hotter than its idle peers (a stuck clock,
a failing fan wall or heat sink, a leaky part) is named even below any absolute limit.
Only GPUs nvidia-smi reports idle are compared; the deviation from the node's median is
the measurement and the profile holds the limit.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from validation.checks.common import gpu_labels, m, smi
from validation.checks.registry import CheckSkipped, Context, check
from validation.model import Measurement
from validation.probes.nvidia_smi import GpuInfo


def idle_deviations(gpus: list[GpuInfo], attr: str) -> dict[int, tuple[float, float]]:
    """{gpu index: (|value - median|, median)} over the idle GPUs that report attr."""
    vals = {g.index: getattr(g, attr) for g in gpus
            if g.clock_events.get("idle") is not False and getattr(g, attr) is not None}
    if len(vals) < 2:
        return {}
    med = statistics.median(vals.values())
    return {i: (round(abs(v - med), 2), med) for i, v in vals.items()}


@check("gpu.idle_peers", emits=("gpu.idle_power_dev_w", "gpu.idle_temp_dev_c"),
       needs=("gpu", "multi-gpu"), timeout_s=60,
       title="idle power and temperature of each GPU against the node's median")
def gpu_idle_peers(ctx: Context) -> Iterator[Measurement]:
    gpus = list(smi(ctx).gpus)
    seen = False
    for metric, attr in (("gpu.idle_power_dev_w", "power_draw_w"),
                         ("gpu.idle_temp_dev_c", "temperature_c")):
        devs = idle_deviations(gpus, attr)
        for g in gpus:
            if g.index in devs:
                seen = True
                dev, med = devs[g.index]
                yield m(metric, dev, {**gpu_labels(g), "node_median": f"{med:g}"})
    if not seen:
        raise CheckSkipped("fewer than two idle GPUs report power and temperature")
