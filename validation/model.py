"""The result types every layer shares: measurements, check results, verdicts.

Measure (probes, workloads) produces Measurement and CheckResult; the judge
produces Verdict; reports only read these. Everything here round-trips
through JSON with to_dict()/from_dict(), stdlib only, because the suite runs
on nodes that have nothing but Python and PyYAML.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

SCHEMA_VERSION = "1.0"

# How a check ran (measure layer). Only "ok" can lead to a pass; the judge
# turns every other status of a required check into a FAIL.
CheckStatus = Literal["ok", "skipped", "error", "timeout"]

# What the judge decided. not_applicable: the profile does not ask for the
# hardware the check needs (stated in the report, never counted as a pass).
# below_expected: short of a provisional limit but above its gross-fault line: shown
# in every report, never a silent pass; a site's provisional_limits: strict fails it.
Outcome = Literal["pass", "fail", "below_expected", "not_applicable"]

# Where a limit comes from (docs/design.md, "Threshold tiers"):
#   spec         the order, a vendor specification or a health/correctness rule: any miss
#                is a fault (GPU count, ECC errors, versions, exact results)
#   measured     a performance floor from named healthy machines (where, when, how many)
#   provisional  a performance floor not yet measured on enough machines: a miss fails
#                only past its gross-fault line (`gross`), else reads below_expected
#   calibrated   a site's own floor from its known-good nodes (invoke calibrate)
Tier = Literal["spec", "measured", "provisional", "calibrated"]
TIERS: tuple[Tier, ...] = ("spec", "measured", "provisional", "calibrated")

# A threshold's comparison (validation.judge.compare): "~" a string matching a regular
# expression, "ver>=" a dotted firmware version at least.
Op = Literal[">=", "<=", "==", "!=", "in", "~", "ver>="]

# A node's overall verdict. incomplete: the run did not finish (node dropped,
# crashed), so whatever was measured can never add up to PASS.
NodeOutcome = Literal["PASS", "FAIL", "INCOMPLETE"]

Value = float | int | str | bool | None


@dataclass(frozen=True)
class Measurement:
    """One number or fact read from the node, with no opinion about it."""

    name: str  # metric name, registered in validation.metrics (e.g. "gpu.count")
    value: Value
    unit: str  # "" for dimensionless facts and strings
    labels: dict[str, str] = field(default_factory=dict)  # {"gpu": "3", "serial": ...}
    artifact: str | None = None  # raw output kept beside the result, relative path

    # to_dict by hand, in field order: dataclasses.asdict walks and copies every value (a
    # third of judging a node's thousands of verdicts)
    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": _copied(self.value), "unit": self.unit,
                "labels": dict(self.labels), "artifact": self.artifact}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        return cls(
            name=d["name"],
            value=d["value"],
            unit=d.get("unit", ""),
            labels=dict(d.get("labels") or {}),
            artifact=d.get("artifact"),
        )


@dataclass(frozen=True)
class CheckResult:
    """What one check did: its measurements and how it ended."""

    check: str
    status: CheckStatus
    duration_s: float
    measurements: tuple[Measurement, ...] = ()
    message: str = ""  # why skipped / the error, in words
    needs: tuple[str, ...] = ()  # hardware/software the check needs: gpu, nvswitch, ib, ...

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "status": self.status,
            "duration_s": round(self.duration_s, 4),
            "measurements": [m.to_dict() for m in self.measurements],
            "message": self.message,
            "needs": list(self.needs),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckResult:
        return cls(
            check=d["check"],
            status=d["status"],
            duration_s=float(d.get("duration_s", 0.0)),
            measurements=tuple(Measurement.from_dict(m) for m in d.get("measurements", ())),
            message=d.get("message", ""),
            needs=tuple(d.get("needs", ())),
        )


@dataclass(frozen=True)
class Threshold:
    """An acceptance limit from a hardware profile: data, never code."""

    metric: str
    op: Op
    value: Any
    unit: str
    provenance: str  # where the number came from: a measured run, a datasheet, a peer tool
    outlier_k: float | None = None  # fleet-relative: fail k robust deviations below peers
    # applies only to measurements carrying these labels (e.g. one NVLink pair);
    # None applies to every measurement of the metric
    labels: dict[str, str] | None = None
    tier: Tier = "spec"
    # provisional >=/<= limits only: past this line a miss is a gross fault (FAIL); between
    # it and `value` the verdict is below_expected. None: any miss fails.
    gross: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "op": self.op, "value": _copied(self.value),
                "unit": self.unit, "provenance": self.provenance, "outlier_k": self.outlier_k,
                "labels": None if self.labels is None else dict(self.labels),
                "tier": self.tier, "gross": self.gross}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Threshold:
        return cls(
            metric=d["metric"],
            op=d["op"],
            value=d["value"],
            unit=d.get("unit", ""),
            provenance=d.get("provenance", ""),
            outlier_k=d.get("outlier_k"),
            labels=dict(d["labels"]) if d.get("labels") else None,
            tier=d.get("tier") or "spec",
            gross=d.get("gross"),
        )


@dataclass(frozen=True)
class Verdict:
    """The judge's decision on one metric (for one device, where labelled)."""

    check: str
    metric: str
    outcome: Outcome
    value: Value
    unit: str
    labels: dict[str, str] = field(default_factory=dict)
    threshold: Threshold | None = None
    message: str = ""  # what was found, in words a technician can act on
    remediation: str = ""  # what to do: reseat, RMA GPU by serial, check cable on port X
    spread: dict[str, float] | None = None  # repeats: {"min":, "max":, "n":}

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "metric": self.metric, "outcome": self.outcome,
                "value": _copied(self.value), "unit": self.unit, "labels": dict(self.labels),
                "threshold": self.threshold.to_dict() if self.threshold else None,
                "message": self.message, "remediation": self.remediation,
                "spread": None if self.spread is None else dict(self.spread)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        t = d.get("threshold")
        return cls(
            check=d["check"],
            metric=d["metric"],
            outcome=d["outcome"],
            value=d.get("value"),
            unit=d.get("unit", ""),
            labels=dict(d.get("labels") or {}),
            threshold=Threshold.from_dict(t) if t else None,
            message=d.get("message", ""),
            remediation=d.get("remediation", ""),
            spread=d.get("spread"),
        )


def _copied(value: Any) -> Any:
    """A value as dataclasses.asdict hands it out: containers copied, scalars as they are."""
    return copy.deepcopy(value) if isinstance(value, dict | list | tuple) else value
