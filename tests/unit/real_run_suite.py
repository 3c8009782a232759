"""The real 2x H200 quick run (tests/fixtures/h200x2-quick-result.json.gz, 2026-11-30) judged
as its own suite knew it: the checks it ran and the metrics its checks emitted then.

The controller requires every check of its own suite and a measurement (or a probe fact
that explains its absence) for every limit of those checks. Checks added since, and metrics
(or facts) today's checks emit that the suite of that day did not, were never the run's to
report: judged against its own suite, the report shows the run's true failures, not
INCOMPLETE or "not measured" for what the run could not know."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "h200x2-quick-result.json.gz"

# emitted by today's checks, not by the suite of 2026-11-30 (nor the probe fact that
# explains the retired pages an H200 does not report)
NOT_YET_EMITTED = frozenset({
    "nccl.torch_version", "gemm.load_clock_event", "gemm.load_sm_clock_mhz",
    "gemm.slowdown_margin_c", "fsdp.loss_window_rise", "health.delta.mce_uncorrected",
    "gpu.retired_pages", "gpu.retired_pages_pending",
})


def result() -> dict[str, Any]:
    return json.loads(gzip.decompress(FIXTURE.read_bytes()))


def judge_as_its_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's judging narrowed to the run's own suite (see the module doc)."""
    from rackready.decide import node as judging

    ran = [c["check"] for c in result()["checks"]]
    monkeypatch.setattr(judging, "expected_checks", lambda level, only: list(only or ran))
    load = judging.load_judging_profile

    def as_then(*args: Any, **kw: Any) -> Any:
        p = load(*args, **kw)
        return replace(p, thresholds=tuple(t for t in p.thresholds
                                           if t.metric not in NOT_YET_EMITTED))

    monkeypatch.setattr(judging, "load_judging_profile", as_then)
