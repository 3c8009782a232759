"""One metric's definition: its name, unit, which way is better, whether it is judged.

A module of its own so that the core list (validation/metrics.py) and the workloads'
list (validation/workloads/metrics.py) both build on it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Better = Literal["higher", "lower", "equal"]


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str  # "" for dimensionless counts, flags and strings
    description: str
    better: Better
    # informational metrics are recorded (inventory, temperatures) but need no
    # threshold; every judged metric without a threshold fails the node.
    judged: bool = True


def metric(name: str, unit: str, description: str, better: Better,
           judged: bool = True) -> Metric:
    """A Metric, positionally (the metric lists stay one line per metric)."""
    return Metric(name, unit, description, better, judged)
