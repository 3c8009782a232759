"""A node's result rebuilt from the events it streamed before it stopped."""

from __future__ import annotations

from typing import Any

from rackready.remote.result_shape import conform_result

# Measurement status for a check that started but never finished (report-only value).
INTERRUPTED = "interrupted"


def result_from_events(events: list[dict[str, Any]], fallback_name: str,
                       problems: list[str] | None = None) -> dict[str, Any]:
    """Rebuild a result.json-shaped dict from what the node streamed before it stopped
    (in the controller's shape: rackready.remote.result_shape; the judgement names what was not)."""
    res: dict[str, Any] = {
        "schema_version": None, "run_id": None, "node": fallback_name, "hostname": None,
        "profile": None, "level": None, "simulated": False, "started": None,
        "finished": None, "tool_versions": {}, "bundle_sha256": None, "inventory": {},
        "checks": [], "verdicts": [], "outcome": "INCOMPLETE", "thresholds": [],
        "artifacts": {},
    }
    open_checks: dict[str, dict[str, Any]] = {}
    for ev in events:
        kind = ev["event"]
        check = ev.get("check")
        if kind == "run_started":
            for key in ("run_id", "node", "profile", "level"):
                if ev.get(key) is not None:
                    res[key] = ev[key]
            res["simulated"] = bool(ev.get("simulated", False))
            res["started"] = ev.get("ts")
        elif kind == "check_started" and isinstance(check, str):
            open_checks[check] = {"needs": list(ev.get("needs") or []), "measurements": [],
                                  "ts": ev.get("ts")}
        elif kind == "measurement" and isinstance(check, str):
            open_checks.setdefault(check, {"needs": [], "measurements": [], "ts": None})
            open_checks[check]["measurements"].append(ev.get("measurement"))
        elif kind == "check_finished" and isinstance(ev.get("result"), dict):
            res["checks"].append(ev["result"])
            open_checks.pop(ev["result"].get("check", check), None)
        if ev.get("ts"):
            res["finished"] = ev["ts"]
    for name, partial in open_checks.items():
        res["checks"].append({
            "check": name, "status": INTERRUPTED, "duration_s": 0.0,
            "measurements": [m for m in partial["measurements"] if isinstance(m, dict)],
            "message": "the node stopped before this check finished; measurements so far",
            "needs": partial["needs"],
        })
    return conform_result(res, problems if problems is not None else [])
