"""The one writer of outcomes, reasons and failing-part wording.

Every node's outcome and its one-line reason (decide_node), each verdict's failing part
in words (component_words: validation.judge.component, with the GPU's serial the node
measured and the inventory's where it differs), a fabric group's outcome in the rack
step (group_outcome) and the rack's (rack_judgement: PASS only if every planned node and
every fabric group passed) are written here and nowhere else. The judgements carry them
(<node>/judgement.json, <run>/_rack/judgement.json, through rackready.run); the reports,
JUnit and the exit code only read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from rackready.decide.identifiers import id_key, shown
from rackready.decide.limits import limits_record
from rackready.decide.records import (
    AllreduceRecord,
    GroupOutcome,
    GroupOutcomeName,
    Judgement,
    LeftOut,
    NodeOutcome,
    PairRow,
    RackJudgement,
    RackStep,
    Scope,
    VerdictRecord,
)
from rackready.remote.result_shape import MALFORMED
from rackready.sanitize import one_line
from validation.judge import component
from validation.model import Verdict

OUTCOMES = ("PASS", "FAIL", "INCOMPLETE", "PARTIAL")


def component_words(labels: dict[str, Any], inventory: dict[str, Any] | None,
                    measured: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """The failing part in words. A GPU is named by the serial the node measured: the
    verdict's own label, else the gpu.serial measurement for that GPU (`measured`:
    rackready.decide.integrity.gpu_ids). The inventory (result.json "inventory") is the
    node's summary, not a measurement: where its serial for the GPU differs, both are
    named; where nothing measured one, the inventory's is named as the inventory's."""
    labels = {str(k): str(v) for k, v in (labels or {}).items()}
    gpus = (inventory or {}).get("gpus")
    if isinstance(gpus, list):  # [{"index": i, "serial": ...}] as some inventories list them
        gpus = {str(g.get("index", i)): g for i, g in enumerate(gpus) if isinstance(g, dict)}
    if "gpu" not in labels:
        return component(labels)
    entry = gpus.get(labels["gpu"]) if isinstance(gpus, dict) else None
    entry = entry if isinstance(entry, dict) else {}
    listed = str(entry.get("serial") or "")
    seen = labels.get("serial", "")
    if seen in ("", "unknown"):
        seen = str((measured or {}).get(labels["gpu"], {}).get("serial") or "")
    if seen and listed and id_key(seen) != id_key(listed):
        labels["serial"] = f"{shown(seen)}, not {shown(listed)} as the inventory lists"
    elif seen:
        labels["serial"] = shown(seen)
    elif listed:
        labels["serial"] = f"{shown(listed)} as the inventory lists" + (
            ", not measured" if measured is not None else "")
    if entry.get("bus_id") and "bus_id" not in labels:
        labels["bus_id"] = str(entry["bus_id"])
    return component(labels)


def verdict_dict(v: Verdict, scope_name: Scope, inventory: dict[str, Any],
                 measured: Mapping[str, Mapping[str, str]] | None = None) -> VerdictRecord:
    d = v.to_dict()  # Verdict's fields; the controller adds the scope and the part in words
    d["scope"] = scope_name
    d["component"] = component_words(v.labels, inventory, measured)
    return cast(VerdictRecord, d)


def decide_node(j: Judgement) -> None:
    """Outcome and its one-line reason: decided here and nowhere else."""
    outcome: NodeOutcome
    failing = [v for v in j["verdicts"] + j["fleet_verdicts"] + j.get("rack_verdicts", [])
               if v["outcome"] == "fail"]
    missing = j["scope"]["missing_checks"]
    wrong = ("result.json is for", MALFORMED)
    # the session, the evidence, this run's nonce, the node's identity (rackready.decide.integrity)
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
    j["limits"] = limits_record(j)
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


def rack_outcome(node_outcomes: list[str]) -> NodeOutcome:
    """The rack passes only if every planned node passed."""
    if not node_outcomes:
        return "INCOMPLETE"
    for worst in ("FAIL", "INCOMPLETE", "PARTIAL"):
        if worst in node_outcomes:
            return worst
    return "PASS"


def missing_check_verdict(check: str, level: str) -> VerdictRecord:
    """A check of the planned set that never reported: a failing verdict, node-wide."""
    return {
        "check": check, "metric": "check.status", "outcome": "fail", "value": "missing",
        "unit": "", "labels": {}, "threshold": None, "spread": None, "scope": "node",
        "component": "node",
        "message": f"check {check} of the {level} level did not report",
        "remediation": "re-run the validation; a check that did not report is never a pass",
    }


def link_component(node: str, nic: str, peer: str, peer_nic: str, rail: object) -> str:
    """A rack link as the failing part, seen from one of its ends."""
    return f"link {node} {nic} <-> {peer} {peer_nic} (rail {rail})"


def group_outcome(name: str, planned: list[str], members: list[str],
                  left_out: list[LeftOut], rows: list[PairRow],
                  allreduce: AllreduceRecord | None, problems: list[str]) -> GroupOutcome:
    """A fabric group's outcome in the rack step and its one-line reason."""
    failing = [r for r in rows if r["outcome"] == "fail"]
    missing = [n["node"] for n in left_out]
    outcome: GroupOutcomeName
    if len(planned) < 2:
        outcome, reason = "NOT_APPLICABLE", f"one node on fabric {name}: no pairs"
    elif failing or (allreduce and allreduce["outcome"] == "fail"):
        outcome = "FAIL"
        reason = (failing[0]["failures"][0]["message"] if failing
                  else allreduce["message"] if allreduce else "")
    elif missing or problems or len(members) < 2:
        outcome = "INCOMPLETE"
        reason = (f"left out: {', '.join(missing)}" if missing
                  else problems[0] if problems else "fewer than two nodes took part")
    else:
        outcome, reason = "PASS", ""
    return {"outcome": outcome, "outcome_reason": one_line(reason, 300)}


def rack_outcome_of(rack: RackStep) -> list[str]:
    """The groups' outcomes that count toward the rack's (not-applicable ones do not)."""
    return [g["outcome"] for g in rack.get("groups", []) if g["outcome"] != "NOT_APPLICABLE"]


def rack_judgement(judgements: Mapping[str, Judgement], rack_step: RackStep
                   ) -> RackJudgement:
    """The rack's outcome and reason: from every planned node's judgement and the rack
    step's fabric groups. Nothing judged is never a pass."""
    nodes = [(str(j.get("node") or name), j) for name, j in judgements.items()]
    outcomes = [str(j.get("outcome")) for _, j in nodes]
    outcome = rack_outcome(outcomes + rack_outcome_of(rack_step)) if nodes else "INCOMPLETE"
    return {"by": "controller", "outcome": outcome,
            "outcome_reason": _rack_reason(outcome, nodes, rack_step),
            "nodes": {name: j.get("outcome") for name, j in nodes},
            "rack_step": [{"fabric": g.get("fabric"), "outcome": g.get("outcome")}
                          for g in rack_step.get("groups", [])]}


def _rack_reason(outcome: str, nodes: list[tuple[str, Judgement]],
                 rack_step: RackStep) -> str:
    if outcome == "PASS":
        return ""
    hit = [(name, j) for name, j in nodes if j.get("outcome") == outcome]
    groups = [g for g in rack_step.get("groups", []) if g["outcome"] == outcome]
    if groups and not hit:  # only the rack-level step did not pass
        g = groups[0]
        return f"{outcome}: rack step on fabric {g.get('fabric')} ({g.get('outcome_reason', '')})"
    names = ", ".join(name for name, _ in hit[:6]) + (" …" if len(hit) > 6 else "")
    first = hit[0][1].get("outcome_reason", "") if hit else ""
    return f"{outcome}: {names}" + (f" ({first})" if len(hit) == 1 and first else "")


def exit_code(judgements: Mapping[str, Judgement], rack_step: RackStep) -> int:
    """0 only when the whole run passed: every planned node (those a --resume did not
    reach too, as its rack.json says) and the rack step (the rack judgement's outcome)."""
    return 0 if rack_judgement(judgements, rack_step)["outcome"] == "PASS" else 1
