"""not_applicable rules: the probe facts that make a limit not applicable on a node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from validation import metrics
from validation.profile.errors import err


@dataclass(frozen=True)
class NotApplicable:
    """A probe fact that makes limits not applicable on a node: where every measurement of
    `fact` equals `value`, a limit on one of `metrics` (with `labels`, where given) that
    no check measured reads not applicable, saying `reason`. Anything else not measured
    fails (validation.judge): silence is never a pass."""

    metrics: tuple[str, ...]
    fact: str
    value: Any
    reason: str
    labels: dict[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"metrics": list(self.metrics), "fact": self.fact, "value": self.value,
                "reason": self.reason, "labels": self.labels}


def check_not_applicable(raw: Any, where: str) -> NotApplicable:
    if not isinstance(raw, dict) or set(raw) - {"metrics", "fact", "value", "reason",
                                                 "labels"}:
        raise err(where, "a not_applicable rule is a mapping of metrics, fact, value, "
                         "reason (and labels)")
    names = raw.get("metrics")
    if not isinstance(names, list) or not names:
        raise err(where, "a not_applicable rule needs a list of metrics")
    for name in [*names, raw.get("fact")]:
        if name not in metrics.METRICS:
            raise err(where, f"not_applicable: unknown metric {name!r}")
    if metrics.METRICS[str(raw["fact"])].judged:
        raise err(where, f"not_applicable: fact {raw['fact']} is a judged metric, not a "
                         "probe fact")
    if "value" not in raw or not str(raw.get("reason") or "").strip():
        raise err(where, f"not_applicable rule on {raw['fact']} needs a value and a reason")
    labels = raw.get("labels")
    return NotApplicable(tuple(str(n) for n in names), str(raw["fact"]), raw["value"],
                         " ".join(str(raw["reason"]).split()),
                         {str(a): str(b) for a, b in labels.items()} if labels else None)

