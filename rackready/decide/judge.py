"""Judge a run: every node (rackready.decide.node), then the fleet of each profile
(decide.fleet, validation.judge.judge_fleet), then the rack step's links (decide.rack);
each node's judgement.json and the rack's _rack/judgement.json are written through the
run store (rackready.run)."""

from __future__ import annotations

from collections import defaultdict
from typing import cast

from rackready.decide import integrity as trust
from rackready.decide.fleet import FLEET_MIN_NODES, rack_curve_verdicts
from rackready.decide.node import judge_node
from rackready.decide.outcome import decide_node, rack_judgement, verdict_dict
from rackready.decide.rack import node_verdicts
from rackready.decide.records import Judgement, RackJudgement, RackStep
from rackready.run.rebuild import result_from_events
from rackready.run.rundir import RunDir
from validation.judge import judge_fleet
from validation.model import CheckResult
from validation.profile import Profile


def judge_run(run: RunDir, write: bool = True) -> dict[str, Judgement]:
    """Judge every node of the run (node by node, then the fleet); write judgement.json."""
    plan = run.plan
    judgements: dict[str, Judgement] = {}
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
        bmc = run.read_bmc(name)
        findings = trust.node_findings(
            run.paths(name).dir, planned.identity.copy() if planned else {}, node_result.result,
            events, session, plan.nonces.get(name) if plan else None,
            plan.bundle_sha256 if plan else None)
        # the BMC's GPU serials against the node's; what could not be compared is a note
        by_bmc, unchecked = trust.bmc_serial_findings(bmc, node_result.result)
        j, results, profile = judge_node(
            name, planned, plan.level if plan else "quick", plan.only if plan else None,
            node_result, events_result, str(session.get("problem") or ""),
            plan.bundle_sha256 if plan else None, bmc=bmc, findings=findings + by_bmc)
        if unchecked:
            j["problems"].append(unchecked)
        judgements[name] = j
        if node_result.result is not None:
            gpu_ids[name] = trust.gpu_ids(node_result.result)
        key = j["profile_sha256"]  # set whenever the profile loaded
        if (profile is not None and key is not None and j["outcome"] in ("PASS", "FAIL")
                and not j["scope"]["partial"]):
            fleet_groups[key][name] = results
            profiles[key] = profile
    # one GPU on two nodes: neither node's result can be believed
    for name, found in trust.rack_identity_findings(gpu_ids).items():
        _add_findings(judgements[name], found)
        fleet_groups.get(judgements[name]["profile_sha256"] or "", {}).pop(name, None)
    for key, group in fleet_groups.items():
        # the reference job's curves: from two nodes up, compared step by step
        for name, vs in rack_curve_verdicts(group, profiles[key]).items():
            judgements[name]["fleet_verdicts"].extend(vs)
            decide_node(judgements[name])
        if len(group) < FLEET_MIN_NODES:
            continue
        for name, verdicts in judge_fleet(group, profiles[key]).items():
            fleet = [v for v in verdicts if v.check == "fleet"]
            j = judgements[name]
            j["fleet_verdicts"] += [verdict_dict(v, "fleet", {}) for v in fleet]
            decide_node(j)
    # the rack-level step: its failing links join both ends' judgements (decide.rack)
    rack_step = rack_step_of(run)
    rack = node_verdicts(rack_step)
    for name, j in judgements.items():
        if name in rack:
            j["rack_verdicts"] = rack[name]
            decide_node(j)
    if write:
        for name, j in judgements.items():
            run.write_judgement(name, j)
        if plan is not None:  # a bare node folder holds only what the node wrote
            run.write_rack_judgement(rack_judgement(judgements, rack_step))
    return judgements


def rack_step_of(run: RunDir) -> RackStep:
    """The run's rack record as rackready.steps.rack wrote it ({} without a rack step)."""
    return cast(RackStep, run.read_rack())


def judged(run: RunDir) -> tuple[dict[str, Judgement], RackJudgement]:
    """The run as the reports read it: every node's judgement and the rack's. A
    controller's run directory with every judgement written is read as it was judged;
    otherwise the run is judged now and nothing is written (a bare node folder holds
    only the node's word: a judgement.json there is never the controller's). The rack's
    judgement is decided from those, as judge_run writes it, and the run's rack record."""
    if run.plan is not None:
        # the controller's own judgement.json, as judge_run wrote it
        found = {n: cast("Judgement | None", run.read_judgement(n)) for n in run.node_names()}
        if found and all(found.values()):
            judgements = {n: j for n, j in found.items() if j}
            return judgements, rack_judgement(judgements, rack_step_of(run))
    judgements = judge_run(run, write=False)
    return judgements, rack_judgement(judgements, rack_step_of(run))


def _add_findings(j: Judgement, found: list[dict[str, str]]) -> None:
    j["integrity"] = [*j.get("integrity", []), *found]
    j["problems"] += [f["problem"] for f in found if f["problem"] not in j["problems"]]
    decide_node(j)
