"""A run whose node reports numbers at the edge of what JSON and a float hold: the
real 2x H200 quick result (tests/unit/real_run_suite.py) with message-size
labels "0", "-4096" and "nan", every GEMM rate 1.7e308 (its fleet median overflowed to
infinity), and burn-in intervals of -0.0 and 1e-320. Judged by the real controller and
reported by the real loader and renderers; shared by the unit tier (HTML, JUnit) and the
browser tier (PDF)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.unit.real_run_suite import result

SIZE_LABELS = ("0", "-4096", "nan")
GEMM_RATE = 1.7e308
INTERVALS = (-0.0, 1e-320)


def extreme_result() -> dict[str, Any]:
    res = result()
    ms = [m for c in res["checks"] for m in c.get("measurements", [])]
    busbw = [m for m in ms if m["name"] == "nccl.busbw"]
    for m, size in zip(busbw, SIZE_LABELS, strict=False):
        m["labels"]["size_bytes"] = size
    for m in ms:
        if m["name"] == "gemm.tflops":
            m["value"] = GEMM_RATE
    intervals = [m for m in ms if m["name"] == "gemm.interval_tflops"]
    for m, value in zip(intervals, INTERVALS, strict=False):
        m["value"] = value
    return res


def write_extreme_run(root: Path) -> Path:
    """A bare node folder (python -m validation run --out DIR) under root: the run."""
    node = root / "run" / "h200x2"
    node.mkdir(parents=True)
    (node / "result.json").write_text(json.dumps(extreme_result()))
    return root / "run"
