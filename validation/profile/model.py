"""The loaded profile: what the customer bought and the limits it must meet."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from validation import metrics
from validation.model import Op, Threshold
from validation.profile.not_applicable import NotApplicable


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    simulated: bool
    requires: frozenset[str]  # needs the node must have; a check needing them must pass
    fabric: str  # default fabric ("ib" | "roce") when the site file does not say
    inventory: dict[str, Any]
    thresholds: tuple[Threshold, ...]
    scope: dict[str, Any] = field(default_factory=dict)  # narrowing applied by scope()
    # NCCL NVLink SHARP (NVLS): on for NVSwitch platforms, the path customers train on;
    # a site's nccl_nvls_enable overrides it (hosts whose operators forbid multicast)
    nvls: bool = False
    # the site's provisional_limits: "strict" fails a below_expected verdict (acceptance
    # against the provisional floors themselves); the default fails only gross faults
    provisional_strict: bool = False
    # where the calibrated limits came from (the site's overlay), "" when none applied
    calibration: str = ""
    # the probe facts that make a limit not applicable on a node (NotApplicable)
    not_applicable: tuple[NotApplicable, ...] = ()

    def thresholds_for(self, metric: str) -> list[Threshold]:
        return [t for t in self.thresholds if t.metric == metric]

    def required_needs(self, site: dict[str, Any] | None = None) -> frozenset[str]:
        """The needs this node must satisfy: the profile's plus the site's fabric."""
        fabric = (site or {}).get("fabric", self.fabric)
        req = set(self.requires)
        if "rdma" in req and "rdma" not in self.scope.get("without", ()):
            req.add(fabric)
        return frozenset(req)

    def gpu(self, key: str, default: Any = None) -> Any:
        return self.inventory.get("gpu", {}).get(key, default)


def limit(metric: str, op: Op, value: Any, prov: str, labels: dict[str, str] | None = None
          ) -> Threshold:
    """A limit derived here (from the inventory or the site), in the metric's own unit."""
    return Threshold(metric=metric, op=op, value=value, unit=metrics.get(metric).unit,
                     provenance=prov, labels=labels)


def threshold_key(t: Threshold) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A limit's identity: its metric and labels (a later one of the same key replaces it)."""
    return t.metric, tuple(sorted((t.labels or {}).items()))
