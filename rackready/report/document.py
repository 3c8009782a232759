"""Build the report documents (the JSON source of truth) from loaded run data.

Outcome, reason, verdicts and each failing part's wording come from the
controller's judgement (rackready.decide.node) and are copied, never re-decided;
the node's own claim is kept only as "claimed_outcome".
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

from rackready.decide.outcome import OUTCOMES
from rackready.decide.records import Judgement, RackStep, ThresholdRecord
from rackready.report import launch_map
from rackready.report.kinds import figures_by_kind
from rackready.report.loader import NodeRun, RunData
from rackready.report.seal.canonical import empty_signoff, seal

REPORT_SCHEMA_VERSION = "1.0"

# Labels that make a measurement one point of a series (plotted, not tabled).
SERIES_LABELS = ("t_s", "step", "size_bytes")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def generator_version() -> str:
    try:
        return metadata.version("rackready")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def is_series(labels: dict[str, str]) -> bool:
    return any(k in labels for k in SERIES_LABELS)


def is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _threshold_for(thresholds: list[ThresholdRecord], name: str,
                   labels: dict[str, str]) -> ThresholdRecord | None:
    """The profile limit for a measurement: same metric, and labels (when the limit
    has any, e.g. one NVLink pair) all present on the measurement."""
    for t in thresholds:
        tl = t.get("labels") or {}
        if t.get("metric") == name and all(labels.get(k) == str(v) for k, v in tl.items()):
            return t
    return None


def _verdict_rows(judgement: Judgement) -> list[dict[str, Any]]:
    rows = []
    for v in [*judgement.get("verdicts", []), *judgement.get("fleet_verdicts", []),
              *judgement.get("rack_verdicts", [])]:
        rows.append({
            "check": v["check"], "metric": v["metric"], "outcome": v["outcome"],
            "value": v.get("value"), "unit": v.get("unit", ""),
            "labels": {str(k): str(x) for k, x in (v.get("labels") or {}).items()},
            "threshold": v.get("threshold"), "message": v.get("message", ""),
            "remediation": v.get("remediation", ""), "spread": v.get("spread"),
            "scope": v.get("scope", "node"), "component": v.get("component") or "",
        })
    return rows


def _measurements(result: dict[str, Any], thresholds: list[ThresholdRecord]
                  ) -> list[dict[str, Any]]:
    out = []
    for c in result.get("checks", []):
        for m in c.get("measurements", []):
            labels = {str(k): str(x) for k, x in (m.get("labels") or {}).items()}
            t = _threshold_for(thresholds, m.get("name", ""), labels)
            out.append({
                "check": c["check"], "name": m["name"], "value": m.get("value"),
                "unit": m.get("unit", ""), "labels": labels, "artifact": m.get("artifact"),
                "series": is_series(labels),
                # Provenance travels with the measurement so a reader never has to
                # look the limit up elsewhere.
                "threshold": None if t is None else {
                    "op": t["op"], "value": t["value"], "unit": t.get("unit", ""),
                    "provenance": t.get("provenance", ""), "tier": t.get("tier") or "spec",
                    "gross": t.get("gross")},
            })
    return out


def _artifacts(node: NodeRun) -> list[dict[str, Any]]:
    """Hash recorded on the node vs hash of the fetched copy, per raw artifact."""
    recorded: dict[str, str] = node.result.get("artifacts") or {}
    fetched: dict[str, str] = {}
    for rel, digest in node.artifact_files.items():
        # The node may record paths relative to its out dir or to artifacts/.
        short = rel.removeprefix("artifacts/")
        key = rel if rel in recorded or short not in recorded else short
        fetched[key] = digest
    rows = []
    for rel in sorted(set(recorded) | set(fetched)):
        want, got = recorded.get(rel), fetched.get(rel)
        if want is None:
            status = "unrecorded"
        elif got is None:
            status = "missing"
        else:
            status = "ok" if got == want else "mismatch"
        rows.append({"path": rel, "sha256": want or got, "fetched_sha256": got,
                     "status": status})
    return rows


def per_gpu_values(nodes: list[NodeRun]) -> dict[str, list[dict[str, Any]]]:
    """metric -> [{node, gpu, value, unit}] for per-GPU scalar numbers across the fleet."""
    out: dict[str, list[dict[str, Any]]] = {}
    for n in nodes:
        for c in n.result.get("checks", []):
            for m in c.get("measurements", []):
                labels = m.get("labels") or {}
                if "gpu" in labels and not is_series(labels) and is_number(m.get("value")):
                    out.setdefault(m["name"], []).append({
                        "node": n.name, "gpu": str(labels["gpu"]),
                        "value": float(m["value"]), "unit": m.get("unit", "")})
    return out


def fleet_stats(nodes: list[NodeRun]) -> dict[str, Any]:
    per_gpu = per_gpu_values(nodes)
    return {
        "nodes": len(nodes),
        "medians": {
            metric: {"median": statistics.median(r["value"] for r in rows),
                     "unit": rows[0]["unit"], "n": len(rows)}
            for metric, rows in sorted(per_gpu.items())
        },
    }


def _planned_site(run: dict[str, Any], name: str) -> dict[str, Any]:
    """The site file the controller shipped to the node (run.json's plan)."""
    for n in run.get("nodes") or []:
        if isinstance(n, dict) and n.get("name") == name and isinstance(n.get("site"), dict):
            return n["site"]
    return {}


def build_node_report(node: NodeRun, run: dict[str, Any], fleet: dict[str, Any],
                      generated: str) -> dict[str, Any]:
    r = node.result
    j = node.judgement
    bmc = j.get("bmc") if isinstance(j.get("bmc"), dict) else None
    if bmc and isinstance(bmc.get("check"), dict):  # the controller's out-of-band check
        r = {**r, "checks": [*r.get("checks", []), bmc["check"]]}
    checks = [{
        "check": c["check"], "status": c["status"],
        "duration_s": float(c.get("duration_s", 0.0)), "message": c.get("message", ""),
        "needs": list(c.get("needs", [])), "measurement_count": len(c.get("measurements", [])),
    } for c in r.get("checks", [])]
    verdicts = _verdict_rows(j)
    doc = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "kind": "node",
        "run_id": str(r.get("run_id") or run["run_id"]),
        "node": node.name,
        "hostname": r.get("hostname"),
        "generated": generated,
        "started": r.get("started"),
        "finished": r.get("finished"),
        "simulated": bool(r.get("simulated", False)),
        "profile": j.get("profile") or r.get("profile"),
        "level": j.get("level") or r.get("level"),
        "result_schema_version": r.get("schema_version"),
        "tool_versions": {str(k): str(v) for k, v in (r.get("tool_versions") or {}).items()
                          if v is not None},
        "generator": {"name": "rackready.report", "version": generator_version()},
        "bundle_sha256": r.get("bundle_sha256"),
        "outcome": j["outcome"],
        "outcome_reason": j.get("outcome_reason", ""),
        "limits": limits_of(j),
        "scope": j["scope"],
        "judge": {"by": "controller", "profile": j.get("profile"),
                  "profile_sha256": j.get("profile_sha256"), "judged": j.get("judged")},
        "claimed_outcome": j.get("node_claimed_outcome"),
        "complete": node.complete,
        "problems": list(node.problems),
        "inventory": r.get("inventory") if isinstance(r.get("inventory"), dict) else {},
        **({"bmc": {k: v for k, v in bmc.items() if k != "check"}} if bmc else {}),
        "thresholds": list(j.get("thresholds", [])),
        "checks": checks,
        "verdicts": verdicts,
        # one row per metric and unit: the weakest, how many, the worst component
        "figures_by_kind": figures_by_kind(verdicts),
        "measurements": _measurements(r, list(j.get("thresholds", []))),
        "golden_loss": list(j.get("golden_loss", [])),
        # each local rank's GPU, NIC, NUMA node and CPUs, and how to launch with them
        "launch_map": launch_map.from_result(r, _planned_site(run, node.name)),
        "fleet": fleet,
        "artifacts": _artifacts(node),
        "signoff": empty_signoff(),
    }
    return seal(doc)


LIMIT_KEYS = ("judged", "spec", "measured", "provisional", "calibrated", "below_expected")


def limits_of(j: Judgement) -> dict[str, Any]:
    """The judgement's count of verdicts by the tier of their limit (rackready.decide.node)."""
    # a judgement read back from disk: its limits record is checked, not assumed
    raw: Mapping[str, Any] = given if isinstance(given := j.get("limits"), dict) else {}
    out: dict[str, Any] = {k: int(raw.get(k) or 0) for k in LIMIT_KEYS}
    out["provisional_limits"] = "strict" if raw.get("provisional_limits") == "strict" \
        else "gross"
    out["calibration"] = str(raw.get("calibration") or "")
    return out


def _failure_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    keys = ("check", "metric", "labels", "message", "remediation", "scope", "component")
    return [{k: v[k] for k in keys} for v in doc["verdicts"] if v["outcome"] == "fail"]


def build_rack_report(data: RunData, node_docs: list[dict[str, Any]],
                      generated: str) -> dict[str, Any]:
    outcomes = [d["outcome"] for d in node_docs]
    rack_step = data.rack_step
    run = data.run
    unreported = [d["node"] for d in node_docs if d["outcome"] == "INCOMPLETE"]
    doc = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "kind": "rack",
        "run_id": str(run["run_id"]),
        "inventory": run.get("inventory"),
        "generated": generated,
        "started": run.get("started"),
        "finished": run.get("finished"),
        "simulated": any(d["simulated"] for d in node_docs),
        "operator_info": {str(k): str(v) for k, v in (run.get("operator") or {}).items()},
        "generator": {"name": "rackready.report", "version": generator_version()},
        "outcome": data.rack["outcome"],
        "outcome_reason": data.rack["outcome_reason"],
        "partial": any(d["scope"]["partial"] for d in node_docs),
        "level": run.get("level"),
        "planned_nodes": [n["name"] for n in run.get("nodes") or []],
        "incomplete_nodes": unreported,
        "counts": {k: outcomes.count(k) for k in OUTCOMES},
        "nodes": [{
            "node": d["node"], "outcome": d["outcome"], "simulated": d["simulated"],
            "outcome_reason": d["outcome_reason"], "partial": d["scope"]["partial"],
            "profile": d["profile"], "level": d["level"], "report": f"node-{d['node']}.json",
            "report_sha256": d["sha256"], "failures": _failure_rows(d),
            "problems": d["problems"], "limits": d["limits"],
        } for d in node_docs],
        "fleet": {**node_docs[0]["fleet"], "per_gpu": per_gpu_values(data.nodes)},
        "rack_checks": report_groups(rack_step),
        "signoff": empty_signoff(),
    }
    return seal(doc)


def report_groups(rack: RackStep) -> list[dict[str, Any]]:
    """The rack report's view of the step: every group, its links and its judgement."""
    out = []
    for g in rack.get("groups", []):
        ar = g.get("allreduce")
        out.append({
            "fabric": g["fabric"], "outcome": g["outcome"],
            "outcome_reason": g["outcome_reason"], "planned": g["planned"],
            "members": g["members"], "left_out": g["left_out"],
            "median_rail_gbps": g.get("median_rail_gbps"),
            "allreduce": None if ar is None else {
                k: ar.get(k) for k in ("value", "unit", "correct", "outcome", "message",
                                       "threshold", "labels")},
            "pairs": [{k: p.get(k) for k in ("node_a", "node_b", "rail", "nic_a", "nic_b",
                                              "value", "unit", "vs_median", "refused",
                                              "simulated", "outcome", "threshold")}
                      | {"messages": [f["message"] for f in p["failures"]] + [
                          f"below expected (provisional limit): {f['message']}"
                          for f in p.get("below_expected", [])]}
                      for p in g.get("pairs", [])],
            "suspects": g.get("suspects", []), "problems": g.get("problems", []),
        })
    return out
