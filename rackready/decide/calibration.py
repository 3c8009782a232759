"""Site calibration: performance floors from the site's own known-good nodes (the
statistics and the overlay file; rackready.steps.calibrate runs the nodes).

`invoke calibrate --inventory SITE --nodes A,B,C` validates those nodes, then for every
profile limit that has a gross-fault line (the performance floors, provisional or
measured) derives a calibrated floor from what the nodes measured:

    median and MAD over every device of every node (MAD x 1.4826 as sigma, at least 1 %
    of the median), floor = median - K sigma (above it for a lower-is-better limit),
    never tighter than the weakest value the nodes showed (their repeats included) and
    never looser than the profile's gross-fault line.

A node that did not pass, or that is an outlier within the set (its median, or one of
its devices, more than K robust deviations on the bad side), is refused by name and no
overlay is written: calibrating on a rack with one bad node cannot absorb its fault.
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
from typing import Any

import yaml

from rackready.errors import UserError
from validation import metrics
from validation.judge import ENTITY_LABELS, MAD_TO_SIGMA, _applies, fleet_outliers
from validation.model import CheckResult, Threshold
from validation.profile import Profile, ProfileError, calibration_thresholds

K = 4.0  # robust deviations: the calibrated floor's distance below the set's median
MIN_NODES = 2  # fewer share no spread to calibrate from
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
    step = 10 ** (math.floor(math.log10(abs(value))) - 2)  # three significant digits
    return (math.floor if down else math.ceil)(value / step) * step


def calibrate_limit(t: Threshold, devices: list[Device], k: float = K
                    ) -> tuple[float | None, dict[str, Any], list[str]]:
    """(floor, statistics, refusals) for one limit from the set's devices."""
    better = metrics.get(t.metric).better
    refusals = []
    by_node: dict[str, list[float]] = defaultdict(list)
    for d in devices:
        by_node[d.node].append(d.value)
    node_medians = {n: statistics.median(v) for n, v in by_node.items()}
    for node in sorted(fleet_outliers(node_medians, k, better)):
        refusals.append(f"{node}: {t.metric}{_where(t)} {node_medians[node]:g} is an outlier "
                        f"among the calibration nodes (median "
                        f"{statistics.median(node_medians.values()):g})")
    pooled = {f"{d.node} {d.entity}": d.value for d in devices}
    for key in sorted(fleet_outliers(pooled, k, better)):
        node, entity = key.split(" ", 1)
        if node not in {r.split(":")[0] for r in refusals}:
            refusals.append(f"{node}: {t.metric}{_where(t)} on {entity} {pooled[key]:g} is an "
                            "outlier among the calibration nodes' devices")
    values = [d.value for d in devices]
    med = statistics.median(values)
    sigma = max(statistics.median(abs(v - med) for v in values) * MAD_TO_SIGMA,
                MIN_SCALE * abs(med))
    line = float(t.gross if t.gross is not None else t.value)
    if better == "lower":
        weakest = max(d.low for d in devices)
        floor = max(med + k * sigma, weakest)
        floor = _round(min(floor, line), down=False)
    else:
        weakest = min(d.low for d in devices)
        floor = min(med - k * sigma, weakest)
        floor = _round(max(floor, line), down=True)
    stats = {"median": round(med, 4), "sigma": round(sigma, 4), "weakest": weakest,
             "devices": len(devices), "nodes": len(by_node), "gross_line": line}
    return floor, stats, refusals


def _where(t: Threshold) -> str:
    return f" ({', '.join(f'{k} {v}' for k, v in t.labels.items())})" if t.labels else ""


def calibrate_profile(profile: Profile, results: dict[str, list[CheckResult]],
                      k: float = K) -> tuple[list[dict[str, Any]], list[str]]:
    """The calibrated limits for one profile's nodes, and the refusals (empty: usable)."""
    limits, refusals = [], []
    for t in profile.thresholds:
        if t.tier not in ("provisional", "measured") or t.gross is None:
            continue
        devices = _devices(t, results)
        if not devices:
            continue  # not measured at this level: the profile's own limit stays
        floor, stats, refused = calibrate_limit(t, devices, k)
        refusals += refused
        limits.append({"metric": t.metric, "op": t.op, "value": floor, "unit": t.unit,
                       **({"labels": dict(t.labels)} if t.labels else {}),
                       "statistics": stats})
    return limits, sorted(set(refusals))


def overlay_document(profile: Profile, limits: list[dict[str, Any]], nodes: list[str],
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
        lim = dict(given)  # the caller's limits stay as they were
        s = lim.pop("statistics")
        lim["provenance"] = (
            f"calibrated {date[:10]} on {who}, level {level}{scope}, run {run_id}: median "
            f"{s['median']:g} over {s['devices']} devices of {s['nodes']} nodes, robust sigma "
            f"{s['sigma']:g}, floor median {'+' if lim['op'] == '<=' else '-'} {k:g} sigma, "
            f"never tighter than the weakest ({s['weakest']:g}) nor looser than the gross "
            f"line ({s['gross_line']:g}); versions "
            + ", ".join(f"{a} {b}" for a, b in sorted(versions.items())))
        thresholds.append(lim)
    return {"profile": profile.name, "source": source, "calibrated": date, "level": level,
            "run": run_id, "k": k, **({"checks": list(checks)} if checks else {}),
            "nodes": [{"name": n, "gpu_serials": serials.get(n, [])} for n in nodes],
            "versions": versions, "thresholds": thresholds}
