"""Site calibration: performance floors from the site's own known-good nodes (the
statistics and the overlay file; rackready.steps.calibrate runs the nodes).

`invoke calibrate --inventory SITE --nodes A,B,C` validates those nodes, then for every
profile limit that has a gross-fault line (the performance floors, provisional or
measured) derives a calibrated floor from what the nodes measured:

    median and MAD over every device of every node (MAD x 1.4826 as sigma, at least 1 %
    of the median), floor = median - K sigma (above it for a lower-is-better limit),
    never tighter than the weakest value the nodes showed (their repeats included),
    never below the profile's own limit by more than the set's spread (its median less
    its weakest value) and never looser than the profile's gross-fault line.

Calibration can never absorb a fault: a set of fewer than MIN_NODES nodes of a profile
is refused (of two nodes neither can outvote the other, so no outlier can be found); a
node that misses the profile's own limit on a device (a "below expected" the
uncalibrated judge lets pass) or that is an outlier within the set (its median, or one
of its devices, more than K robust deviations on the bad side) is refused by name; and
then no overlay is written.

The overlay, inventories/SITE/calibration/<profile>.yml, names the nodes, their GPU
serials, the date, level and versions; `invoke validate` applies it (profile tier
"calibrated") and every report says so.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import yaml

from rackready.decide.fleet import FLEET_MIN_NODES
from rackready.errors import UserError
from validation import metrics
from validation.judge import ENTITY_LABELS, MAD_TO_SIGMA, _applies, compare, fleet_outliers
from validation.model import CheckResult, Op, Threshold
from validation.profile import Profile, ProfileError, calibration_thresholds

K = 4.0  # robust deviations: the calibrated floor's distance below the set's median
# fewer nodes have no majority to find an outlier by (validation.judge.fleet_outliers)
MIN_NODES = FLEET_MIN_NODES
MIN_SCALE = 0.01  # sigma is at least 1 % of the median (identical devices still get room)


def overlay_path(inventory_dir: Path, profile: str) -> Path:
    return inventory_dir / "calibration" / f"{profile}.yml"


def read_overlay(inventory_dir: Path, profile: str) -> dict[str, Any] | None:
    """The site's overlay for this profile, or None; a malformed one is a one-line error."""
    path = overlay_path(inventory_dir, profile)
    if not path.exists():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UserError(f"{path}: unreadable calibration overlay "
                        f"({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a calibration overlay must be a mapping")
    return data


def check_overlay(path: Path, overlay: dict[str, Any], profile: Profile) -> None:
    """Refuse, at planning, an overlay the judge would refuse (wrong profile, too loose)."""
    try:
        calibration_thresholds(overlay, profile)
    except ProfileError as exc:
        raise UserError(f"{path}: {exc}") from None


class Statistics(TypedDict):
    """What a calibrated floor rests on (calibrate_limit): worded into its provenance."""

    median: float
    sigma: float
    weakest: float
    spread: float
    profile_limit: float
    devices: int
    nodes: int
    gross_line: float


class _Labelled(TypedDict, total=False):
    labels: dict[str, str]  # the profile limit's own labels, where it has any


class CalibratedLimit(_Labelled):
    """One calibrated floor as calibrate_profile derives it, before overlay_document words
    its statistics into a provenance."""

    metric: str
    op: Op
    value: float | None
    unit: str
    statistics: Statistics


@dataclass(frozen=True)
class Device:
    node: str
    entity: str  # "gpu=3" / "nic=mlx5_0": the device within its node
    value: float  # median of its repeats
    low: float  # its weakest repeat on the limit's bad side
    high: float


def _devices(t: Threshold, results: dict[str, list[CheckResult]]) -> list[Device]:
    """Every device's value of the limit's metric on each node (repeats -> median)."""
    better = metrics.get(t.metric).better
    out = []
    for node, checks in sorted(results.items()):
        per: dict[str, list[float]] = defaultdict(list)
        for r in checks:
            for m in r.measurements:
                if (m.name != t.metric or not _applies(t, m.labels)
                        or not isinstance(m.value, (int, float)) or isinstance(m.value, bool)):
                    continue
                entity = ",".join(f"{k}={m.labels[k]}" for k in sorted(m.labels)
                                  if k in ENTITY_LABELS or k in ("nic", "link", "rail"))
                per[entity or "node"].append(float(m.value))
        for entity, vals in per.items():
            worst, best = (min(vals), max(vals)) if better != "lower" else (max(vals), min(vals))
            out.append(Device(node, entity, statistics.median(vals), worst, best))
    return out


def _round(value: float, down: bool) -> float:
    if value == 0:
        return 0.0
    # three significant digits; an int power of 10 (not 10.0 **) for steps >= 1, so a
    # rounded limit is written as the int the overlay has always held
    step: float = 10 ** (math.floor(math.log10(abs(value))) - 2)
    return (math.floor if down else math.ceil)(value / step) * step


def too_small(profile: str, nodes: list[str], given: str = "the set has") -> str | None:
    """The refusal of a set too small to find an outlier in, or None."""
    if len(nodes) >= MIN_NODES:
        return None
    return (f"profile {profile}: calibration needs at least {MIN_NODES} known-good nodes "
            f"(fewer cannot find an outlier among them: of two, neither outvotes the "
            f"other); {given} {len(nodes)}" + (f" ({', '.join(nodes)})" if nodes else ""))


def calibrate_limit(t: Threshold, devices: list[Device], k: float = K
                    ) -> tuple[float | None, Statistics, list[str]]:
    """(floor, statistics, refusals) for one limit from the set's devices; at most one
    refusal a node: its miss of the profile's own limit, else its outlier."""
    better = metrics.get(t.metric).better
    by_node: dict[str, list[float]] = defaultdict(list)
    for d in devices:
        by_node[d.node].append(d.value)
    refused: dict[str, str] = {}
    if len(by_node) < MIN_NODES:
        refused[""] = (f"{t.metric}{_where(t)}: measured on {len(by_node)} node(s) "
                       f"({', '.join(sorted(by_node))}): fewer than {MIN_NODES} cannot find an "
                       "outlier")
    # every reference first passes the uncalibrated profile: a "below expected" is a miss
    for d in sorted(devices, key=lambda d: (d.node, d.low if better != "lower" else -d.low)):
        if d.node not in refused and not compare(t.op, d.low, t.value):
            refused[d.node] = (f"{d.node}: {t.metric}{_where(t)} on {d.entity} {d.low:g}"
                               f"{_unit(t)} misses the profile's own limit ({t.op} "
                               f"{t.value:g}{_unit(t)}): a reference must pass the "
                               "uncalibrated profile")
    node_medians = {n: statistics.median(v) for n, v in by_node.items()}
    for node in sorted(fleet_outliers(node_medians, k, better)):
        refused.setdefault(node, f"{node}: {t.metric}{_where(t)} {node_medians[node]:g} is an "
                           f"outlier among the calibration nodes (median "
                           f"{statistics.median(node_medians.values()):g})")
    pooled = {f"{d.node} {d.entity}": d.value for d in devices}
    for key in sorted(fleet_outliers(pooled, k, better)):
        node, entity = key.split(" ", 1)
        refused.setdefault(node, f"{node}: {t.metric}{_where(t)} on {entity} {pooled[key]:g} "
                           "is an outlier among the calibration nodes' devices")
    values = [d.value for d in devices]
    med = statistics.median(values)
    sigma = max(statistics.median(abs(v - med) for v in values) * MAD_TO_SIGMA,
                MIN_SCALE * abs(med))
    line = float(t.gross if t.gross is not None else t.value)
    limit = float(t.value)
    if better == "lower":
        weakest = max(d.low for d in devices)
        spread = weakest - med
        floor = min(med + k * sigma, weakest)
        floor = min(_round(floor, down=False), _round(limit + spread, down=True), line)
    else:
        weakest = min(d.low for d in devices)
        spread = med - weakest
        floor = min(med - k * sigma, weakest)
        floor = max(_round(floor, down=True), _round(limit - spread, down=False), line)
    stats: Statistics = {"median": round(med, 4), "sigma": round(sigma, 4), "weakest": weakest,
                         "spread": round(spread, 4), "profile_limit": limit,
                         "devices": len(devices), "nodes": len(by_node), "gross_line": line}
    return floor, stats, [refused[n] for n in sorted(refused)]


def _where(t: Threshold) -> str:
    return f" ({', '.join(f'{k} {v}' for k, v in t.labels.items())})" if t.labels else ""


def _unit(t: Threshold) -> str:
    return f" {t.unit}" if t.unit else ""


def calibrate_profile(profile: Profile, results: dict[str, list[CheckResult]],
                      k: float = K) -> tuple[list[CalibratedLimit], list[str]]:
    """The calibrated limits for one profile's nodes, and the refusals (empty: usable)."""
    small = too_small(profile.name, sorted(results))
    if small:
        return [], [small]
    limits: list[CalibratedLimit] = []
    refusals: list[str] = []
    for t in profile.thresholds:
        if t.tier not in ("provisional", "measured") or t.gross is None:
            continue
        devices = _devices(t, results)
        if not devices:
            continue  # not measured at this level: the profile's own limit stays
        floor, stats, refused = calibrate_limit(t, devices, k)
        refusals += refused
        labelled: _Labelled = {"labels": dict(t.labels)} if t.labels else {}
        limits.append({"metric": t.metric, "op": t.op, "value": floor, "unit": t.unit,
                       **labelled, "statistics": stats})
    return limits, sorted(set(refusals))


def overlay_document(profile: Profile, limits: list[CalibratedLimit], nodes: list[str],
                     serials: dict[str, list[str]], level: str, run_id: str, date: str,
                     versions: dict[str, str], k: float = K,
                     checks: list[str] | None = None) -> dict[str, Any]:
    """checks: the run was narrowed to these (`--only`); said in the source and limits."""
    who = ", ".join(f"{n} (GPU serials {', '.join(serials.get(n) or ['unknown'])})"
                    for n in nodes)
    scope = "" if not checks else f" ({checks[0]} only)" if len(checks) == 1 else \
        f" ({len(checks)} checks only)"
    source = f"site calibration {date[:10]} on {', '.join(nodes)}, level {level}{scope}"
    thresholds = []
    for given in limits:
        # a copy without its statistics, in its own key order: the caller's limits stay
        lim: dict[str, object] = {key: v for key, v in given.items() if key != "statistics"}
        s = given["statistics"]
        lim["provenance"] = (
            f"calibrated {date[:10]} on {who}, level {level}{scope}, run {run_id}: median "
            f"{s['median']:g} over {s['devices']} devices of {s['nodes']} nodes, robust sigma "
            f"{s['sigma']:g}, floor median {'+' if lim['op'] == '<=' else '-'} {k:g} sigma, "
            f"never tighter than the weakest ({s['weakest']:g}), nor past the profile's "
            f"limit ({s['profile_limit']:g}) by more than the set's spread "
            f"({s['spread']:g}), nor looser than the gross line ({s['gross_line']:g}); "
            "versions "
            + ", ".join(f"{a} {b}" for a, b in sorted(versions.items())))
        thresholds.append(lim)
    return {"profile": profile.name, "source": source, "calibrated": date, "level": level,
            "run": run_id, "k": k, **({"checks": list(checks)} if checks else {}),
            "nodes": [{"name": n, "gpu_serials": serials.get(n, [])} for n in nodes],
            "versions": versions, "thresholds": thresholds}
