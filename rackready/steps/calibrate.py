"""`invoke calibrate`: validate the nodes a site declares known-good, then write one
calibrated overlay per profile (rackready.decide.calibration) -- or refuse, naming the node.

A set too small to find an outlier in is refused before any node is reached (a mistake in
what was asked: exit 2); a node that does not pass the uncalibrated profile, "below
expected" included, or is an outlier is refused after the run (exit 1)."""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from rackready.decide.calibration import (
    calibrate_profile,
    overlay_document,
    overlay_path,
    too_small,
)
from rackready.decide.node import load_judging_profile, parse_checks
from rackready.errors import UserError
from rackready.run.rundir import RunDir, new_run_id, now_iso
from rackready.sanitize import one_line
from rackready.site import inventory
from rackready.steps import validate
from validation.model import CheckResult


def run_calibration(inv: str, nodes: str, level: str = "standard",
                    out: str | None = None, only: str | None = None) -> int:
    """Validate the nodes (only: just those checks), then write one overlay per profile,
    or refuse; returns the exit code (0 written, 1 refused)."""
    names = list(dict.fromkeys(n.strip() for n in (nodes or "").split(",") if n.strip()))
    if not names:
        raise UserError("--nodes needs the known-good nodes to calibrate on (A,B,C)")
    targets = [inventory.find(n, inv) for n in names]
    by_profile: dict[str, list[str]] = defaultdict(list)
    for t in targets:
        by_profile[t.profile].append(t.name)
    small = [r for p, members in by_profile.items()
             if (r := too_small(p, members, given="--nodes gives"))]
    if small:
        raise UserError("; ".join(small))
    run_path = Path(out) if out else validate.PROJECT_ROOT / "runs" / (
        "calibrate-" + new_run_id(inv))
    validate.run_validation(None, inv, level, str(run_path), formats="json,html",
                            nodes=names, calibrating=True, only=only)
    run = RunDir.open(run_path)
    checks = list(run.plan.only or []) if run.plan else []
    refusals, results, facts = _judged(run, names, narrowed=bool(checks))
    overlays = {}
    for profile, members in by_profile.items():
        node = next(t for t in targets if t.name == members[0])
        prof = load_judging_profile(profile, tuple(node.validation_without), None,
                                    validate._site(node))
        limits, refused = calibrate_profile(prof, {n: results[n] for n in members
                                                   if n in results})
        refusals += refused
        if not limits:
            refusals.append(f"profile {profile}: the {level} level"
                            + (f" ({len(checks)} checks only)" if checks else "")
                            + " measured no performance floor to calibrate")
        overlays[profile] = (prof, limits, members)
    if refusals:
        for r in refusals:
            print(f"calibrate: refused: {one_line(r)}")
        print(f"calibrate: no overlay written (run directory: {run_path})")
        return 1
    folder = inventory.inventory_path(inv).parent
    for profile, (prof, limits, members) in overlays.items():
        doc = overlay_document(prof, limits, members,
                               {n: facts[n]["serials"] for n in members}, level,
                               run.plan.run_id if run.plan else run_path.name, now_iso(),
                               _versions([facts[n] for n in members]), checks=checks)
        path = overlay_path(folder, profile)
        _write_atomic(path, yaml.safe_dump(doc, sort_keys=False, width=100))
        print(f"calibrate: {profile}: {len(limits)} calibrated limit(s) from "
              f"{', '.join(members)} -> {path}")
    return 0


def _judged(run: RunDir, names: list[str], narrowed: bool = False
            ) -> tuple[list[str], dict[str, list[CheckResult]], dict[str, dict[str, Any]]]:
    """Refusals for nodes that did not pass; every passing node's checks and facts.
    narrowed (--only): a node passes when every check that ran passed (PARTIAL)."""
    refusals, results, facts = [], {}, {}
    passing = ("PASS", "PARTIAL") if narrowed else ("PASS",)
    for n in names:
        j = run.read_judgement(n) or {}
        if j.get("outcome") not in passing:
            refusals.append(f"{n}: {j.get('outcome') or 'no judgement'}"
                            f" ({j.get('outcome_reason') or 'did not report'}): a node that "
                            "does not pass is no reference")
            continue
        below = [v for key in ("verdicts", "fleet_verdicts", "rack_verdicts")
                 for v in j.get(key) or [] if v.get("outcome") == "below_expected"]
        if below:  # passed on the gross lines only: the profile's own floors it missed
            refusals.append(f"{n}: {len(below)} verdict(s) below expected (first: "
                            f"{below[0].get('metric')} on {below[0].get('component') or 'node'}"
                            "): a reference must pass the uncalibrated profile's own limits")
            continue
        result = run.read_result(n).result or {}
        results[n] = parse_checks(result, [])
        inv = given if isinstance(given := result.get("inventory"), dict) else {}
        gpus = inv.get("gpus")
        rows = gpus.values() if isinstance(gpus, dict) else gpus if isinstance(gpus, list) else []
        facts[n] = {"serials": [str(g.get("serial")) for g in rows
                                if isinstance(g, dict) and g.get("serial")],
                    "versions": {k: str(v) for k, v in
                                 {**(result.get("tool_versions") or {}),
                                  **{k: inv.get(k) for k in ("driver", "cuda", "nccl")}}.items()
                                 if v is not None}}
    return refusals, results, facts


def _versions(facts: list[dict[str, Any]]) -> dict[str, str]:
    """The versions the calibration ran with; a version that differs between the nodes is
    listed with every value it had."""
    seen: dict[str, set[str]] = defaultdict(set)
    for f in facts:
        for k, v in f["versions"].items():
            seen[k].add(v)
    return {k: " / ".join(sorted(v)) for k, v in sorted(seen.items())}


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
