"""The controller judges: every node's measurements against the profile the plan names.

The node's own verdicts and outcome are advisory (recorded, never copied). The
controller loads its own copy of the profile (hash recorded), applies the
site settings it shipped, requires the level's complete set of checks, and
decides once per node:

    INCOMPLETE  no usable result, a result for another node/profile/level/bundle,
                an INCOMPLETE finding (rackready.decide.integrity: the session did not end
                normally, evidence missing or altered, a replayed result, another
                machine's or a GPU seen twice), or checks of the planned set that
                never reported
    FAIL        a FAIL finding (the node's own evidence shows a fault) or any
                verdict failed (node, fleet or rack)
    PARTIAL     a narrowed run (--only, a GPU subset): never an acceptance
    PASS        everything planned was measured and every verdict passed

The decision, its one-line reason and each failing part's wording are written to
<node>/judgement.json (rackready.run.rundir) and carried into every report.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from rackready.decide.integrity import gpu_ids, replay_findings, session_findings
from rackready.decide.outcome import decide_node, missing_check_verdict, verdict_dict
from rackready.decide.records import (
    BmcRecord,
    GoldenPoint,
    Judgement,
    ScopeRecord,
    threshold_record,
)
from rackready.redfish.envelope import series as envelope_series
from rackready.run.rebuild import INTERRUPTED
from rackready.run.rundir import NodeResult, PlannedNode, now_iso
from validation.judge import judge
from validation.model import CheckResult
from validation.profile import Profile, ProfileError, load_profile, scope, with_site
from validation.runner import select_checks
from validation.workloads.golden import (
    GoldenError,
    load_golden,
    run_config,
)


def expected_checks(level: str, only: list[str] | None) -> list[str]:
    """The checks a run of this level (narrowed by --only) must report."""
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
        # the probe facts that make a limit not applicable decide verdicts too
        "not_applicable": [r.to_dict() for r in profile.not_applicable],
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


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

    def scope_record(self, missing: list[str]) -> ScopeRecord:
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
    out: list[str] = []
    if ctx.planned is None:
        return out
    for key, want in (("node", ctx.name), ("profile", ctx.profile_name), ("level", ctx.level)):
        got = result.get(key)
        if got is not None and str(got) != str(want):
            out.append(f"result.json is for {key} {got!r}, the plan says {want!r}")
    return out  # the bundle and this run's nonce: rackready.decide.integrity.replay_findings


def judge_node(name: str, planned: PlannedNode | None, level: str, only: list[str] | None,
               node_result: NodeResult, events_result: dict[str, Any] | None = None,
               session_problem: str = "", bundle_sha256: str | None = None,
               bmc: dict[str, Any] | None = None,
               findings: list[dict[str, str]] | None = None,
               ) -> tuple[Judgement, list[CheckResult], Profile | None]:
    """One node's judgement (see the module doc), its check results and the profile used.

    `findings` (rackready.decide.integrity) are what the session, the evidence, the run's nonce
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
    # a run cut short is rebuilt with checks "interrupted" (rackready.run.rebuild), a status
    # the node never writes (validation.model.CheckStatus)
    reported = {r.check for r in results if r.status != INTERRUPTED}
    missing = [c for c in expected_checks(ctx.level, ctx.only) if c not in reported]
    # a failing GPU is named by the serial the node measured (and the inventory's, if other)
    measured = gpu_ids(source) if source is not None else None
    verdict_dicts = [verdict_dict(v, "node", inventory, measured) for v in verdicts]
    verdict_dicts += [missing_check_verdict(c, ctx.level) for c in missing]
    claimed = (result or {}).get("outcome")
    judgement: Judgement = {
        "node": name, "by": "controller", "judged": now_iso(),
        "profile": ctx.profile_name or None, "profile_sha256": ctx.profile_hash,
        "level": ctx.level, "scope": ctx.scope_record(missing),
        "complete": result is not None,
        "node_claimed_outcome": claimed if isinstance(claimed, str) else None,
        "verdicts": verdict_dicts, "fleet_verdicts": [],
        "thresholds": ([threshold_record(t) for t in ctx.profile.thresholds]
                       if ctx.profile else []),
        "golden_loss": _golden_loss(results, ctx.profile),
        "problems": problems,
        "integrity": integrity,
        "bmc": _bmc_record(bmc, oob_check),
        "limits": {"provisional_limits": "strict" if ctx.profile is not None
                   and ctx.profile.provisional_strict else "gross",
                   "calibration": ctx.profile.calibration if ctx.profile is not None else ""},
    }
    decide_node(judgement)
    return judgement, results, ctx.profile


def _bmc_check(planned: PlannedNode | None, bmc: dict[str, Any] | None,
               problems: list[str]) -> CheckResult | None:
    """The controller's BMC reading (rackready.steps.oob) as the check `bmc`; for a planned node
    without one, the check as 'not run', so the profile decides (requires: [bmc] fails)."""
    if bmc and isinstance(bmc.get("check"), dict):
        try:
            return CheckResult.from_dict(bmc["check"])
        except (KeyError, TypeError, ValueError, AttributeError):
            problems.append("bmc.json holds no usable check")
            return not_run("the out-of-band record is unreadable")
    if planned is None:
        return None
    return not_run("the out-of-band step did not run for this node")


def _bmc_record(bmc: dict[str, Any] | None, check: CheckResult | None) -> BmcRecord:
    """What the report shows of the BMC: identity, log excerpt, and why it was not read."""
    bmc = bmc or {}
    return {"address": bmc.get("address"), "status": check.status if check else None,
            "problem": bmc.get("problem") or (check.message if check else ""),
            "since": bmc.get("since"), "since_source": bmc.get("since_source", ""),
            "identity": bmc.get("identity") or {}, "log_excerpt": bmc.get("log_excerpt") or [],
            "check": check.to_dict() if check else None,
            "envelope": envelope_series(bmc.get("envelope"))}


def _golden_loss(results: list[CheckResult], profile: Profile | None) -> list[GoldenPoint]:
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
    out: list[GoldenPoint] = []
    for step, loss in points.items():
        try:
            out.append({"step": float(step), "loss": float(loss)})
        except (TypeError, ValueError):
            continue
    return sorted(out, key=lambda p: p["step"])


BMC_CHECK = "bmc"  # the out-of-band check (rackready.steps.oob reads the BMC)


def not_run(problem: str) -> CheckResult:
    """The check as judged when no out-of-band record exists for a planned node."""
    return CheckResult(check=BMC_CHECK, status="skipped", duration_s=0.0, message=problem,
                       needs=(BMC_CHECK,))
