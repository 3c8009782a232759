"""A written threshold checked: known metric, its unit, an op, a provenance, a tier."""

from __future__ import annotations

from typing import Any

from validation import metrics
from validation.model import TIERS, Threshold, Tier
from validation.profile.errors import err

OPS = (">=", "<=", "==", "!=", "in", "~", "ver>=")  # "~": string matches a regular expression
# "ver>=": firmware version at least (dotted numbers, validation.judge.version_key)

# limits a lab variant may tighten but never loosen: they guard health, not speed
HEALTH_PREFIXES = (
    "health.", "gpu.ecc_", "gpu.remapped_", "gpu.retired_", "gpu.xid_", "nvlink.replay",
    "nvlink.recovery", "nvlink.crc", "raid.degraded",
    # host health
    "nvswitch.sxid", "nvme.critical_warning", "nvme.media_errors", "nvme.percentage_used",
    "host.edac_", "host.mce_",
)


def check_threshold(raw: dict[str, Any], where: str) -> Threshold:
    if not isinstance(raw, dict):
        raise err(where, "threshold must be a mapping")
    for key in ("metric", "op", "value", "unit", "provenance"):
        if key not in raw:
            raise err(where, f"threshold {raw.get('metric', '?')} has no {key}")
    extra = set(raw) - {"metric", "op", "value", "unit", "provenance", "outlier_k", "labels",
                        "tier", "gross"}
    if extra:
        raise err(where, f"threshold {raw['metric']} has unknown keys {sorted(extra)}")
    name = raw["metric"]
    if name not in metrics.METRICS:
        raise err(where, f"unknown metric {name!r}")
    metric = metrics.METRICS[name]
    if str(raw["unit"]) != metric.unit:
        raise err(where, f"{name} is measured in {metric.unit or 'no unit'!r}, "
                         f"threshold says {raw['unit']!r}")
    if raw["op"] not in OPS:
        raise err(where, f"{name}: op {raw['op']!r} not one of {' '.join(OPS)}")
    if not str(raw["provenance"]).strip():
        raise err(where, f"{name}: empty provenance")
    k = raw.get("outlier_k")
    if k is not None and (not isinstance(k, (int, float)) or k <= 0):
        raise err(where, f"{name}: outlier_k must be a positive number")
    if raw["op"] in (">=", "<=") and not isinstance(raw["value"], (int, float)):
        raise err(where, f"{name}: {raw['op']} needs a number, got {raw['value']!r}")
    labels = raw.get("labels")
    tier = _tier(raw, where)
    return Threshold(metric=name, op=raw["op"], value=raw["value"], unit=str(raw["unit"]),
                     provenance=str(raw["provenance"]), outlier_k=k,
                     labels={str(a): str(b) for a, b in labels.items()} if labels else None,
                     tier=tier, gross=_gross(raw, tier, where))


def _tier(raw: dict[str, Any], where: str) -> Tier:
    """The threshold's tier: as stated, else 'provisional' when its provenance says so
    (its first word), else 'spec'. A stated tier never contradicts the provenance."""
    said_provisional = str(raw["provenance"]).lstrip().startswith("PROVISIONAL")
    tier = raw.get("tier", "provisional" if said_provisional else "spec")
    if tier not in TIERS:
        raise err(where, f"{raw['metric']}: tier {tier!r} not one of {' '.join(TIERS)}")
    if said_provisional != (tier == "provisional"):
        raise err(where, f"{raw['metric']}: tier {tier} but the provenance "
                         f"{'says' if said_provisional else 'does not say'} PROVISIONAL")
    return tier  # one of TIERS, checked above


def _gross(raw: dict[str, Any], tier: str, where: str) -> float | None:
    """The gross-fault line of a provisional >=/<= limit: on the far side of the limit."""
    gross = raw.get("gross")
    if gross is None:
        return None
    name, op, value = raw["metric"], raw["op"], raw["value"]
    if tier != "provisional" or op not in (">=", "<="):
        raise err(where, f"{name}: gross belongs to a provisional >= or <= limit only")
    if not isinstance(gross, (int, float)) or isinstance(gross, bool):
        raise err(where, f"{name}: gross must be a number, got {gross!r}")
    if (op == ">=" and gross > value) or (op == "<=" and gross < value):
        raise err(where, f"{name}: gross {gross} is stricter than the limit {op} {value}")
    return float(gross)


def looser(base: Threshold, new: Threshold) -> bool:
    """Whether `new` lets through a reading `base` refused (another op counts as looser)."""
    if base.op != new.op:
        return True
    if base.op == "<=":
        return float(new.value) > float(base.value)
    if base.op == ">=":
        return float(new.value) < float(base.value)
    return new.value != base.value
