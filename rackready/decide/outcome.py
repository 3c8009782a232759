"""The one writer of outcomes, reasons and failing-part wording."""

from __future__ import annotations

from typing import Any

from rackready.decide.limits import _limits_record
from rackready.remote.result_shape import MALFORMED
from validation.judge import component
from validation.model import Verdict

OUTCOMES = ("PASS", "FAIL", "INCOMPLETE", "PARTIAL")


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


def _decide(j: dict[str, Any]) -> None:
    """Outcome and its one-line reason: decided here and nowhere else."""
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


def rack_outcome(node_outcomes: list[str]) -> str:
    """The rack passes only if every planned node passed."""
    if not node_outcomes:
        return "INCOMPLETE"
    for worst in ("FAIL", "INCOMPLETE", "PARTIAL"):
        if worst in node_outcomes:
            return worst
    return "PASS"
