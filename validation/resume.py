"""What an interrupted run left in DIR/events.jsonl, read back for `run --resume`.

The event stream is the run's durable record (one flushed line per event): the
identity of the run (run_started), every finished check's CheckResult
(check_finished), the start-of-run health counters (health_start) and, when the
run ended, its outcome (run_finished). A resumed run writes a new stream that
repeats all of this, so a resumed run that is interrupted again resumes too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from validation.model import CheckResult

Key = tuple[str, tuple[tuple[str, str], ...]]  # as validation.checks.health_delta.Key

# run_finished outcomes that end a run for good; INCOMPLETE (an interrupt the runner
# caught, e.g. Ctrl-C) left checks unrun and may be resumed
FINAL = ("PASS", "FAIL")


class RecordedError(RuntimeError):
    """Why the interrupted run could not read its start-of-run counters (its own words)."""


@dataclass(frozen=True)
class PreviousRun:
    run_id: str
    node: str
    profile: str
    level: str
    scope: Any
    started: str  # when the run first started (resumes keep it)
    resumed_at: tuple[str, ...] = ()
    results: dict[str, CheckResult] = field(default_factory=dict)  # finished, in order
    # start-of-run counters; an Exception when they were unreadable; None: never recorded
    health_start: dict[Key, float] | Exception | None = None
    outcome: str | None = None  # run_finished's outcome, None when the run never got there


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every readable event; a line torn by the interruption is skipped."""
    events = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(ev, dict) and isinstance(ev.get("event"), str):
            events.append(ev)
    return events


def read_previous(out: Path) -> PreviousRun:
    """The run recorded in out/events.jsonl; ValueError (one line) when there is none."""
    path = out / "events.jsonl"
    if not path.is_file():
        raise ValueError(f"--resume: {path} not found; nothing to resume (run without --resume)")
    events = read_events(path)
    start = next((ev for ev in events if ev["event"] == "run_started"), None)
    if start is None or not start.get("run_id"):
        raise ValueError(f"--resume: {path} has no run_started event; nothing to resume")
    results: dict[str, CheckResult] = {}
    health: dict[Key, float] | Exception | None = None
    outcome = None
    for ev in events:
        kind = ev["event"]
        if kind == "check_finished" and isinstance(ev.get("result"), dict):
            try:
                r = CheckResult.from_dict(ev["result"])
            except (KeyError, TypeError, ValueError):
                continue  # unreadable: the check runs again
            results[r.check] = r
        elif kind == "health_start":
            health = (RecordedError(str(ev["error"])) if "error" in ev
                      else counters_from_json(ev.get("counters") or []))
        elif kind == "run_finished":
            outcome = ev.get("outcome")
    return PreviousRun(
        run_id=str(start["run_id"]), node=str(start.get("node", "")),
        profile=str(start.get("profile")), level=str(start.get("level")),
        scope=start.get("scope"), started=str(start.get("first_started") or start.get("ts")),
        resumed_at=tuple(start.get("resumed_at") or ()), results=results,
        health_start=health, outcome=outcome)


def check_resumable(prev: PreviousRun, profile: str, level: str, scope: Any) -> None:
    """ValueError unless this invocation is the same run: profile, level and scope."""
    asked = (profile, level, json.loads(json.dumps(scope)))
    if asked != (prev.profile, prev.level, prev.scope):
        was = f"--profile {prev.profile} --level {prev.level}"
        if prev.scope:
            was += f" scope {json.dumps(prev.scope, sort_keys=True)}"
        raise ValueError(f"--resume: the run in this directory was {was}; "
                         "resume it with the same profile, level and scope")


def set_events_aside(out: Path) -> Path | None:
    """Keep the interrupted stream as events.interrupted[.N].jsonl; the resumed run
    writes a new, complete events.jsonl (the controller does the same on its side)."""
    src = out / "events.jsonl"
    if not src.exists():
        return None
    dest = out / "events.interrupted.jsonl"
    k = 1
    while dest.exists():
        k += 1
        dest = out / f"events.interrupted.{k}.jsonl"
    src.rename(dest)
    return dest


def counters_to_json(counters: dict[Key, float]) -> list[dict[str, Any]]:
    return [{"counter": c, "labels": dict(lab), "value": v}
            for (c, lab), v in sorted(counters.items())]


def counters_from_json(rows: list[dict[str, Any]]) -> dict[Key, float]:
    return {(str(r["counter"]), tuple(sorted((str(k), str(v))
                                             for k, v in (r.get("labels") or {}).items()))):
            float(r["value"]) for r in rows}
