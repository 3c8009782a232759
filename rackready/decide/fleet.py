"""The fleet: the reference job's loss curves of the nodes of one profile compared step
by step (its other comparisons: validation.judge.judge_fleet, in rackready.decide.judge)."""

from __future__ import annotations

from collections import defaultdict

from rackready.decide.outcome import component_words
from rackready.decide.records import ThresholdRecord, VerdictRecord, threshold_record
from validation.model import CheckResult
from validation.profile import Profile
from validation.workloads.golden import (
    compare_rack,
    curve_from_measurements,
    run_config,
)

# Fewer nodes than this share no robust majority to compare with.
FLEET_MIN_NODES = 3

# --- the rack's reference-job curves compared with each other ---
RACK_CURVE_METRIC = "fsdp.loss_rack_deviation"


def _curve_key(results: list[CheckResult]) -> tuple[str, ...] | None:
    """What must be equal for two nodes' curves to be comparable: shape, world, dtype, config."""
    cfg = run_config([m for r in results for m in r.measurements])
    if not cfg:
        return None
    return tuple(str(cfg.get(k, "")) for k in ("shape", "world", "dtype", "seq", "steps", "seed",
                                               "batch", "lr", "warmup", "max_norm"))


def rack_curve_threshold(profile: Profile) -> ThresholdRecord | None:
    """The profile's limit for the rack comparison, else its golden-curve limit, as the
    threshold a verdict carries: the rack metric, with the limit's unit and provenance."""
    for metric in (RACK_CURVE_METRIC, "fsdp.loss_deviation"):
        for t in profile.thresholds_for(metric):
            if t.op in ("<=", "<") and not t.labels:
                return {**threshold_record(t), "metric": RACK_CURVE_METRIC, "op": "<=",
                        "value": float(t.value), "outlier_k": None}
    return None


def rack_curve_verdicts(group: dict[str, list[CheckResult]], profile: Profile
                        ) -> dict[str, list[VerdictRecord]]:
    """Per node: the verdict of its loss curve against the rack's per-step median.

    Nodes of one profile that ran the reference job with the same config and seed
    must give the same curve within the tolerance; a node that does not is named.
    Two nodes cannot outvote each other: a disagreement between two names both."""
    limit = rack_curve_threshold(profile)
    by_key: dict[tuple[str, ...], dict[str, dict[int, float]]] = defaultdict(dict)
    for name, results in group.items():
        key = _curve_key(results)
        curve = curve_from_measurements([m for r in results for m in r.measurements])
        if key is not None and curve:
            by_key[key][name] = curve
    out: dict[str, list[VerdictRecord]] = defaultdict(list)
    if limit is None:
        return out
    tol = limit["value"]
    for key, curves in by_key.items():
        for name, cmp in compare_rack(curves, tol).items():
            ok = cmp.within(tol)
            others = sorted(n for n in curves if n != name)
            where = (f"step {cmp.worst_step} missing" if cmp.missing
                     else f"largest |loss - rack median| {cmp.deviation:.4g} at step "
                          f"{cmp.worst_step}")
            out[name].append({
                "check": "fleet", "metric": RACK_CURVE_METRIC,
                "outcome": "pass" if ok else "fail",
                "value": cmp.deviation if not cmp.missing else "missing", "unit": "",
                "labels": {"shape": key[0], "world": key[1], "seed": key[5],
                           **({"step": str(cmp.worst_step)} if cmp.worst_step else {})},
                "threshold": limit, "spread": None, "scope": "fleet",
                "component": component_words({}, None),  # node-wide: "node"
                "message": (f"reference-job loss curve of {name} "
                            f"{'agrees with' if ok else 'deviates from'} the rack "
                            f"({len(curves)} nodes, same profile and seed): {where}, "
                            f"tolerance {tol}" + ("" if ok or len(curves) > 2 else
                                                  f"; two nodes: {name} or {others[0]}")),
                "remediation": "" if ok else (
                    "same job, same seed, different numbers: re-run the reference job on "
                    "this node; a repeat deviation is silent data corruption or a failing "
                    "GPU (run the SDC screen and burn-in)"),
            })
    return out
