"""The controller judges: every node's measurements against the profile the plan names.

The node's own verdicts and outcome are advisory (recorded, never copied). The
controller loads its own copy of the profile (hash recorded), applies the
site settings it shipped, requires the level's complete set of checks, and
decides once per node:

    INCOMPLETE  no usable result, a result for another node/profile/level/bundle,
                an INCOMPLETE finding (rackready.integrity: the session did not end
                normally, evidence missing or altered, a replayed result, another
                machine's or a GPU seen twice), or checks of the planned set that
                never reported
    FAIL        a FAIL finding (the node's own evidence shows a fault) or any
                verdict failed (node, fleet or rack)
    PARTIAL     a narrowed run (--only, a GPU subset): never an acceptance
    PASS        everything planned was measured and every verdict passed

The decision, its one-line reason and each failing part's wording are written to
<node>/judgement.json (rackready.rundir) and carried into every report.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from typing import Any

from rackready import integrity as trust
from rackready.integrity import replay_findings, session_findings
from rackready.result_shape import MALFORMED
from rackready.rundir import NodeResult, PlannedNode, RunDir, now_iso
from validation.judge import component, judge, judge_fleet
from validation.model import CheckResult, Verdict
from validation.profile import Profile, ProfileError, load_profile, scope, with_site
from validation.workloads.golden import (
    GoldenError,
    compare_rack,
    curve_from_measurements,
    load_golden,
    run_config,
)

OUTCOMES = ("PASS", "FAIL", "INCOMPLETE", "PARTIAL")
# Fewer nodes than this share no robust majority to compare with.
FLEET_MIN_NODES = 3


def expected_checks(level: str, only: list[str] | None) -> list[str]:
    """The checks a run of this level (narrowed by --only) must report."""
    from validation.runner import select_checks

    try:
        return [c.name for c in select_checks(level, only)]
    except ValueError:  # an --only name this controller does not know: expect it anyway
        return list(only or [])


def profile_sha256(profile: Profile) -> str:
    """Hash of the profile as judged (thresholds, inventory, needs, scope)."""
    body = {
        "name": profile.name, "requires": sorted(profile.requires), "fabric": profile.fabric,
        "inventory": profile.inventory, "scope": profile.scope,
        "thresholds": [t.to_dict() for t in profile.thresholds],
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def component_words(labels: dict[str, Any], inventory: dict[str, Any] | None) -> str:
    """The failing part in words, with the GPU's serial from the node's inventory."""
    labels = {str(k): str(v) for k, v in (labels or {}).items()}
    gpus = (inventory or {}).get("gpus")
    if isinstance(gpus, list):  # [{"index": i, "serial": ...}] as some inventories list them
        gpus = {str(g.get("index", i)): g for i, g in enumerate(gpus) if isinstance(g, dict)}
    if "gpu" in labels and "serial" not in labels and isinstance(gpus, dict):
        entry = gpus.get(labels["gpu"])
        if isinstance(entry, dict) and entry.get("serial"):
            labels["serial"] = str(entry["serial"])
            if entry.get("bus_id") and "bus_id" not in labels:
                labels["bus_id"] = str(entry["bus_id"])
    return component(labels)


def _verdict_dict(v: Verdict, scope_name: str, inventory: dict[str, Any]) -> dict[str, Any]:
    d = v.to_dict()
    d["scope"] = scope_name
    d["component"] = component_words(v.labels, inventory)
    return d


def load_judging_profile(name: str, without: tuple[str, ...], gpus: int | None,
                         site: dict[str, Any]) -> Profile:
    """The controller's own copy of a profile, narrowed and sited as the node was asked."""
    prof = load_profile(name)
    if gpus is not None or without:
        prof = scope(prof, gpus, without)
    return with_site(prof, site)


def controller_profile(planned: PlannedNode) -> Profile | None:
    try:
        return load_judging_profile(planned.profile, tuple(planned.without), None,
                                    dict(planned.site))
    except (ProfileError, OSError, ValueError):
        return None


class _Context:
    """What one node is judged against, from the plan (or, without one, the node's claim)."""

    def __init__(self, name: str, planned: PlannedNode | None, level: str,
                 only: list[str] | None, result: dict[str, Any] | None) -> None:
        self.name = name
        self.planned = planned
        self.problems: list[str] = []
        claimed_scope = (result or {}).get("scope") or {}
        if planned is not None:
            self.profile_name = planned.profile
            self.level, self.only = level, only
            self.without = tuple(planned.without)
            self.gpus = None
            self.site = dict(planned.site)
            self.waivers_from = "inventory"
        else:  # a bare node folder: only the node's word, stated as such
            r = result or {}
            self.profile_name = str(r.get("profile") or "")
            self.level = str(r.get("level") or level)
            self.only = [str(c) for c in r["only"]] if isinstance(r.get("only"), list) else None
            self.without = tuple(str(w) for w in claimed_scope.get("without") or ())
            gpus = claimed_scope.get("gpus")
            self.gpus = gpus if isinstance(gpus, int) and not isinstance(gpus, bool) else None
            self.site = {}
            self.waivers_from = "node (no controller plan)"
        self.profile: Profile | None = None
        self.profile_hash: str | None = None
        if self.profile_name:
            try:
                self.profile = load_judging_profile(self.profile_name, self.without,
                                                    self.gpus, self.site)
                self.profile_hash = profile_sha256(self.profile)
            except (ProfileError, OSError, ValueError) as exc:
                self.problems.append(f"profile {self.profile_name!r} cannot be loaded on the "
                                     f"controller: {exc}")
        else:
            self.problems.append("no profile named for this node")

    @property
    def partial(self) -> bool:
        return bool(self.only) or self.gpus is not None

    def scope_record(self, missing: list[str]) -> dict[str, Any]:
        return {"partial": self.partial, "only": self.only, "gpus": self.gpus,
                "without": list(self.without), "waivers_from": self.waivers_from,
                "level": self.level, "missing_checks": missing}


def parse_checks(result: dict[str, Any], problems: list[str]) -> list[CheckResult]:
    out = []
    bad = 0
    raw = result.get("checks")
    if not isinstance(raw, list):
        problems.append("result.json has no list of checks")
        return []
    for c in raw:
        try:
            cr = CheckResult.from_dict(c)
            if not isinstance(cr.check, str) or not isinstance(cr.status, str):
                raise TypeError("check and status must be strings")
            for m in cr.measurements:
                if not isinstance(m.name, str) or not isinstance(m.labels, dict):
                    raise TypeError("measurement name/labels")
            out.append(cr)
        except (KeyError, TypeError, ValueError, AttributeError):
            bad += 1
    if bad:
        problems.append(f"{bad} malformed check entr{'y' if bad == 1 else 'ies'} in result.json")
    return out


def _identity_problems(ctx: _Context, result: dict[str, Any]) -> list[str]:
    """A result for another node, profile or level is not this node's result."""
    out = []
    if ctx.planned is None:
        return out
    for key, want in (("node", ctx.name), ("profile", ctx.profile_name), ("level", ctx.level)):
        got = result.get(key)
        if got is not None and str(got) != str(want):
            out.append(f"result.json is for {key} {got!r}, the plan says {want!r}")
    return out  # the bundle and this run's nonce: rackready.integrity.replay_findings


def judge_node(name: str, planned: PlannedNode | None, level: str, only: list[str] | None,
               node_result: NodeResult, events_result: dict[str, Any] | None = None,
               session_problem: str = "", bundle_sha256: str | None = None,
               bmc: dict[str, Any] | None = None,
               findings: list[dict[str, str]] | None = None,
               ) -> tuple[dict[str, Any], list[CheckResult], Profile | None]:
    """One node's judgement (see the module doc), its check results and the profile used.

    `findings` (rackready.integrity) are what the session, the evidence, the run's nonce
    and the node's identity say; a session problem is one of them."""
    result = node_result.result
    source = result if result is not None else events_result
    ctx = _Context(name, planned, level, only, source)
    problems = [*node_result.problems, *ctx.problems]
    if session_problem:
        problems.insert(0, session_problem)
    integrity = session_findings(session_problem, {}) + list(findings or [])
    if result is not None and findings is None:  # a caller without a run directory
        integrity += replay_findings(result, None, bundle_sha256)
    problems += [f["problem"] for f in integrity if f["problem"] not in problems]
    results: list[CheckResult] = []
    inventory: dict[str, Any] = {}
    if source is not None:
        results = parse_checks(source, problems)
        inv = source.get("inventory")
        inventory = inv if isinstance(inv, dict) else {}
    if result is not None:
        problems += _identity_problems(ctx, result)
    oob_check = _bmc_check(planned, bmc, problems)
    if oob_check is not None:
        results.append(oob_check)
    verdicts = judge(results, ctx.profile) if ctx.profile is not None else []
    reported = {r.check for r in results if r.status != "interrupted"}
    missing = [c for c in expected_checks(ctx.level, ctx.only) if c not in reported]
    verdict_dicts = [_verdict_dict(v, "node", inventory) for v in verdicts]
    for c in missing:
        verdict_dicts.append({
            "check": c, "metric": "check.status", "outcome": "fail", "value": "missing",
            "unit": "", "labels": {}, "threshold": None, "spread": None, "scope": "node",
            "component": "node",
            "message": f"check {c} of the {ctx.level} level did not report",
            "remediation": "re-run the validation; a check that did not report is never a pass",
        })
    claimed = (result or {}).get("outcome")
    judgement = {
        "node": name, "by": "controller", "judged": now_iso(),
        "profile": ctx.profile_name or None, "profile_sha256": ctx.profile_hash,
        "level": ctx.level, "scope": ctx.scope_record(missing),
        "complete": result is not None,
        "node_claimed_outcome": claimed if isinstance(claimed, str) else None,
        "verdicts": verdict_dicts, "fleet_verdicts": [],
        "thresholds": [t.to_dict() for t in ctx.profile.thresholds] if ctx.profile else [],
        "golden_loss": _golden_loss(results, ctx.profile),
        "problems": problems,
        "integrity": integrity,
        "bmc": _bmc_record(bmc, oob_check),
        "limits": {"provisional_limits": "strict" if ctx.profile is not None
                   and ctx.profile.provisional_strict else "gross",
                   "calibration": ctx.profile.calibration if ctx.profile is not None else ""},
    }
    _decide(judgement)
    return judgement, results, ctx.profile


# ---------------------------------------------------------------- out of band (issue 17)

def _bmc_check(planned: PlannedNode | None, bmc: dict[str, Any] | None,
               problems: list[str]) -> CheckResult | None:
    """The controller's BMC reading (rackready.oob) as the check `bmc`; for a planned node
    without one, the check as 'not run', so the profile decides (requires: [bmc] fails)."""
    from rackready.oob import not_run

    if bmc and isinstance(bmc.get("check"), dict):
        try:
            return CheckResult.from_dict(bmc["check"])
        except (KeyError, TypeError, ValueError, AttributeError):
            problems.append("bmc.json holds no usable check")
            return not_run("the out-of-band record is unreadable")
    if planned is None:
        return None
    return not_run("the out-of-band step did not run for this node")


def _bmc_record(bmc: dict[str, Any] | None, check: CheckResult | None) -> dict[str, Any]:
    """What the report shows of the BMC: identity, log excerpt, and why it was not read."""
    bmc = bmc or {}
    return {"address": bmc.get("address"), "status": check.status if check else None,
            "problem": bmc.get("problem") or (check.message if check else ""),
            "since": bmc.get("since"), "since_source": bmc.get("since_source", ""),
            "identity": bmc.get("identity") or {}, "log_excerpt": bmc.get("log_excerpt") or [],
            "check": check.to_dict() if check else None}


def _golden_loss(results: list[CheckResult], profile: Profile | None) -> list[dict[str, float]]:
    """The golden loss curve for the reference job that ran: the stored curve of its shape,
    world size, dtype and config (validation/golden), else the profile's inventory curve."""
    if profile is None:
        return []
    ms = [m for r in results for m in r.measurements if m.name.startswith("fsdp.")]
    points: dict[Any, Any] = {}
    try:
        cfg = run_config(ms)
        g = (load_golden(str(cfg["shape"]), int(cfg["world"]), cfg, str(cfg.get("dtype", "bf16")))
             if cfg.get("shape") and cfg.get("world") else None)
        points = dict(g.loss) if g else {}
    except (GoldenError, ValueError):
        points = {}
    if not points:
        shapes = [m.labels.get("shape") for m in ms if m.labels.get("shape")]
        golden = (profile.inventory.get("fsdp_golden") or {}).get(shapes[0] if shapes else "")
        points = (golden or {}).get("loss") or {}
    out = []
    for step, loss in points.items():
        try:
            out.append({"step": float(step), "loss": float(loss)})
        except (TypeError, ValueError):
            continue
    return sorted(out, key=lambda p: p["step"])


# --- the rack's reference-job curves compared with each other (issue 15) ---
RACK_CURVE_METRIC = "fsdp.loss_rack_deviation"


def _curve_key(results: list[CheckResult]) -> tuple[str, ...] | None:
    """What must be equal for two nodes' curves to be comparable: shape, world, dtype, config."""
    cfg = run_config([m for r in results for m in r.measurements])
    if not cfg:
        return None
    return tuple(str(cfg.get(k, "")) for k in ("shape", "world", "dtype", "seq", "steps", "seed",
                                               "batch", "lr", "warmup", "max_norm"))


def rack_curve_threshold(profile: Profile) -> dict[str, Any] | None:
    """The profile's limit for the rack comparison, else its golden-curve limit, as the
    threshold a verdict carries: the rack metric, with the limit's unit and provenance."""
    for metric in (RACK_CURVE_METRIC, "fsdp.loss_deviation"):
        for t in profile.thresholds_for(metric):
            if t.op in ("<=", "<") and not t.labels:
                return {**t.to_dict(), "metric": RACK_CURVE_METRIC, "op": "<=",
                        "value": float(t.value), "outlier_k": None}
    return None


def rack_curve_verdicts(group: dict[str, list[CheckResult]], profile: Profile
                        ) -> dict[str, list[dict[str, Any]]]:
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
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
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
                "component": "node",
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


def _decide(j: dict[str, Any]) -> None:
    """Outcome and its one-line reason: decided here and nowhere else."""
    failing = [v for v in j["verdicts"] + j["fleet_verdicts"] + j.get("rack_verdicts", [])
               if v["outcome"] == "fail"]
    missing = j["scope"]["missing_checks"]
    wrong = ("result.json is for", MALFORMED)
    # the session, the evidence, this run's nonce, the node's identity (rackready.integrity)
    held = [f for f in j.get("integrity", []) if f["outcome"] == "INCOMPLETE"]
    faults = [f for f in j.get("integrity", []) if f["outcome"] == "FAIL"]
    if (not j["complete"] or j["profile_sha256"] is None
            or any(p.startswith(wrong) for p in j["problems"])):
        outcome = "INCOMPLETE"
        reason = j["problems"][0] if j["problems"] else "no result from the node"
    elif held:
        outcome, reason = "INCOMPLETE", held[0]["problem"]
    elif missing:
        outcome = "INCOMPLETE"
        reason = (f"{len(missing)} check(s) of the {j['level']} level did not report: "
                  f"{', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}")
    elif faults:
        outcome, reason = "FAIL", faults[0]["problem"]
    elif failing:
        outcome = "FAIL"
        first = failing[0]
        reason = (f"{len(failing)} verdict(s) failed; first: {first['metric']} on "
                  f"{first.get('component') or 'node'}")
    elif j["scope"]["partial"]:
        outcome = "PARTIAL"
        only = j["scope"]["only"]
        what = (f"only {', '.join(only)}" if only and len(only) <= 3
                else f"only {len(only)} checks" if only
                else f"{j['scope']['gpus']} GPU(s) of the profile")
        reason = f"narrowed run ({what}): not an acceptance"
    elif not j["verdicts"]:
        outcome, reason = "INCOMPLETE", "the result carries no measurements to judge"
    else:
        outcome, reason = "PASS", ""
    j["limits"] = _limits_record(j)
    below = [v for v in j["verdicts"] + j["fleet_verdicts"] + j.get("rack_verdicts", [])
             if v["outcome"] == "below_expected"]
    if below and outcome in ("PASS", "PARTIAL"):
        first = below[0]
        reason = "; ".join(filter(None, [reason, (
            f"{len(below)} verdict(s) below expected on provisional limits, none a gross "
            f"fault; first: {first['metric']} on {first.get('component') or 'node'}")]))
    claimed = j["node_claimed_outcome"]
    j["problems"] = [p for p in j["problems"] if not p.startswith("the node claimed ")]
    if claimed and claimed != outcome and j["complete"]:
        j["problems"].append(f"the node claimed {claimed}; the controller judged {outcome}")
    j["outcome"], j["outcome_reason"] = outcome, reason


def _limits_record(j: dict[str, Any]) -> dict[str, Any]:
    """How many of the node's judged verdicts rest on each tier of limit, how many read
    below expected, and the site's choices: carried into every report as decided here."""
    previous = j.get("limits") or {}
    tiers = {"spec": 0, "measured": 0, "provisional": 0, "calibrated": 0}
    below = 0
    for v in j["verdicts"] + j["fleet_verdicts"] + j.get("rack_verdicts", []):
        t = v.get("threshold")
        if v["outcome"] not in ("pass", "fail", "below_expected") or not isinstance(t, dict):
            continue
        tier = str(t.get("tier") or "spec")
        tiers[tier if tier in tiers else "spec"] += 1
        below += v["outcome"] == "below_expected"
    return {"judged": sum(tiers.values()), **tiers, "below_expected": below,
            "provisional_limits": previous.get("provisional_limits", "gross"),
            "calibration": previous.get("calibration", "")}


def judge_run(run: RunDir, write: bool = True) -> dict[str, dict[str, Any]]:
    """Judge every node of the run (node by node, then the fleet); write judgement.json."""
    from rackready.report.loader import result_from_events

    plan = run.plan
    judgements: dict[str, dict[str, Any]] = {}
    fleet_groups: dict[str, dict[str, list[CheckResult]]] = defaultdict(dict)
    profiles: dict[str, Profile] = {}
    gpu_ids: dict[str, dict[str, dict[str, str]]] = {}
    for name in run.node_names():
        planned = plan.node(name) if plan else None
        node_result = run.read_result(name)
        events_result = None
        events, bad = run.read_events(name)
        if node_result.result is None:
            if events:
                events_result = result_from_events(events, name, node_result.problems)
            if bad:
                node_result.problems.append(f"{bad} unusable event line(s) skipped")
        session = run.read_session(name)
        findings = trust.node_findings(
            run.paths(name).dir, dict(planned.identity) if planned else {}, node_result.result,
            events, session, plan.nonces.get(name) if plan else None,
            plan.bundle_sha256 if plan else None)
        j, results, profile = judge_node(
            name, planned, plan.level if plan else "quick", plan.only if plan else None,
            node_result, events_result, str(session.get("problem") or ""),
            plan.bundle_sha256 if plan else None, bmc=run.read_bmc(name), findings=findings)
        judgements[name] = j
        if node_result.result is not None:
            gpu_ids[name] = trust.gpu_ids(node_result.result)
        if profile is not None and j["outcome"] in ("PASS", "FAIL") and not j["scope"]["partial"]:
            fleet_groups[j["profile_sha256"]][name] = results
            profiles[j["profile_sha256"]] = profile
    # one GPU on two nodes: neither node's result can be believed
    for name, found in trust.rack_identity_findings(gpu_ids).items():
        _add_findings(judgements[name], found)
        fleet_groups.get(judgements[name]["profile_sha256"] or "", {}).pop(name, None)
    for key, group in fleet_groups.items():
        # the reference job's curves: from two nodes up, compared step by step
        for name, vs in rack_curve_verdicts(group, profiles[key]).items():
            judgements[name]["fleet_verdicts"].extend(vs)
            _decide(judgements[name])
        if len(group) < FLEET_MIN_NODES:
            continue
        for name, verdicts in judge_fleet(group, profiles[key]).items():
            fleet = [v for v in verdicts if v.check == "fleet"]
            j = judgements[name]
            j["fleet_verdicts"] += [_verdict_dict(v, "fleet", {}) for v in fleet]
            _decide(j)
    # --- rack-level step: its failing links join both ends' judgements (rack_checks) ---
    from rackready.rack_checks import node_verdicts, read_rack

    rack = node_verdicts(read_rack(run.path))
    for name, j in judgements.items():
        if name in rack:
            j["rack_verdicts"] = rack[name]
            _decide(j)
    # --- end rack-level step ---
    if write:
        for name, j in judgements.items():
            run.write_judgement(name, j)
    return judgements


def _add_findings(j: dict[str, Any], found: list[dict[str, str]]) -> None:
    j["integrity"] = [*j.get("integrity", []), *found]
    j["problems"] += [f["problem"] for f in found if f["problem"] not in j["problems"]]
    _decide(j)


def rack_outcome(node_outcomes: list[str]) -> str:
    """The rack passes only if every planned node passed."""
    if not node_outcomes:
        return "INCOMPLETE"
    for worst in ("FAIL", "INCOMPLETE", "PARTIAL"):
        if worst in node_outcomes:
            return worst
    return "PASS"
