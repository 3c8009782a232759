"""A node's result rebuilt from the events it streamed before it stopped."""

from __future__ import annotations

from typing import Any

from rackready.remote.result_shape import conform_result

FAILED_STATUSES = ("error", "timeout")  # as rackready.decide.integrity reads them

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
    words: dict[str, list[dict[str, Any]]] = {}  # each check's finished results, in order
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
            # the event names the check; a result that names none is still that check's
            name = check if isinstance(check, str) and check else ev["result"].get("check")
            words.setdefault(name, []).append({**ev["result"], "check": name})
            open_checks.pop(name, None)
        if ev.get("ts"):
            res["finished"] = ev["ts"]
    res["checks"] = [_last_word(said, problems) for said in words.values()]
    for name, partial in open_checks.items():
        res["checks"].append({
            "check": name, "status": INTERRUPTED, "duration_s": 0.0,
            "measurements": [m for m in partial["measurements"] if isinstance(m, dict)],
            "message": "the node stopped before this check finished; measurements so far",
            "needs": partial["needs"],
        })
    return conform_result(res, problems if problems is not None else [])


def _last_word(said: list[dict[str, Any]], problems: list[str] | None) -> dict[str, Any]:
    """A check the stream finished more than once: its last word, unless an earlier one
    failed (a failure the node took back stands), said as a problem."""
    statuses = [w.get("status") for w in said]
    failed = [w for w in said if w.get("status") in FAILED_STATUSES]
    kept = failed[-1] if failed and said[-1].get("status") not in FAILED_STATUSES else said[-1]
    if len(said) > 1 and len(set(map(str, statuses))) > 1 and problems is not None:
        problems.append(f"the live stream finished check {said[-1]['check']} "
                        f"{', then '.join(map(str, statuses))}; {kept.get('status')} kept")
    return kept
