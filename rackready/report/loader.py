"""Read a run directory: run.json plus one folder per node (result.json, events.jsonl).

A node whose result.json is missing or truncated is rebuilt from its event
stream (the checks that finished before it dropped) and marked incomplete;
nothing here decides PASS or FAIL.

Layouts accepted:
  DIR/run.json + DIR/<node>/{result.json,events.jsonl,artifacts/}  (invoke validate)
  DIR/{result.json,events.jsonl,artifacts/}         (python -m validation run --out DIR)

run.json (optional; written by the controller, every key but run_id optional):
  {"run_id": str, "inventory": str|null, "started": ISO8601, "finished": ISO8601|null,
   "operator": {"name": str, "site": str, "ticket": str, ...}}
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackready.report.errors import ReportError
from validation.model import CheckResult, Verdict

REPORT_DIRNAME = "report"

# Measurement status for a check that started but never finished (report-only value).
INTERRUPTED = "interrupted"


@dataclass
class NodeRun:
    """One node's data as found on disk; result has the result.json shape."""

    name: str
    path: Path
    result: dict[str, Any]
    complete: bool  # result.json present and readable
    problems: list[str] = field(default_factory=list)  # why incomplete, in words
    artifact_files: dict[str, str] = field(default_factory=dict)  # relpath -> sha256 on disk


@dataclass
class RunData:
    path: Path
    run: dict[str, Any]
    nodes: list[NodeRun]


def load_run(run_dir: Path) -> RunData:
    """Load every node of a run directory; raise ReportError for unusable input."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"run directory not found: {run_dir}")
    if _is_node_dir(run_dir):
        node_dirs = [run_dir]
    else:
        node_dirs = sorted(
            p for p in run_dir.iterdir()
            if p.is_dir() and p.name != REPORT_DIRNAME and _is_node_dir(p)
        )
    if not node_dirs:
        raise ReportError(
            f"no node results in {run_dir}: expected {run_dir}/<node>/result.json "
            "or events.jsonl"
        )
    nodes = [load_node(p, single=(p == run_dir)) for p in node_dirs]
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise ReportError(f"{run_dir}: two folders hold the same node name: {sorted(names)}")
    return RunData(path=run_dir, run=_load_run_info(run_dir, nodes), nodes=nodes)


def _is_node_dir(p: Path) -> bool:
    return (p / "result.json").is_file() or (p / "events.jsonl").is_file()


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 text ({e.reason})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON (line {e.lineno}: {e.msg})") from None


def _load_run_info(run_dir: Path, nodes: list[NodeRun]) -> dict[str, Any]:
    path = run_dir / "run.json"
    if path.is_file():
        try:
            info = _read_json(path)
        except ValueError as e:
            raise ReportError(f"{path}: {e}") from None
        if not isinstance(info, dict) or not isinstance(info.get("run_id"), str):
            raise ReportError(f"{path}: expected an object with a string run_id")
        if "operator" in info and not isinstance(info["operator"], dict):
            raise ReportError(f"{path}: operator must be an object")
        return info
    # No run.json (a bare node-side result directory): take what the nodes say.
    results = [n.result for n in nodes]
    starts = sorted(str(r["started"]) for r in results if r.get("started"))
    ends = sorted(str(r["finished"]) for r in results if r.get("finished"))
    return {
        "run_id": next((r["run_id"] for r in results if r.get("run_id")), run_dir.name),
        "inventory": None,
        "started": starts[0] if starts else None,
        "finished": ends[-1] if ends else None,
        "operator": {},
    }


def read_events(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Events from a JSONL file and how many lines could not be read.

    A node that drops mid-write leaves a torn last line; skip it rather than
    lose everything before it.
    """
    events: list[dict[str, Any]] = []
    bad = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(ev, dict) and isinstance(ev.get("event"), str):
            events.append(ev)
        else:
            bad += 1
    return events, bad


def result_from_events(events: list[dict[str, Any]], fallback_name: str) -> dict[str, Any]:
    """Rebuild a result.json-shaped dict from what the node streamed before it stopped."""
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
    return res


def load_node(node_dir: Path, single: bool = False) -> NodeRun:
    """One node folder -> NodeRun; a missing/torn result.json falls back to events."""
    result_path = node_dir / "result.json"
    events_path = node_dir / "events.jsonl"
    problems: list[str] = []
    result: dict[str, Any] | None = None
    if result_path.is_file():
        try:
            loaded = _read_json(result_path)
        except ValueError as e:
            problems.append(f"result.json is unreadable ({e}); rebuilt from events")
        else:
            if not isinstance(loaded, dict):
                raise ReportError(f"{result_path}: expected a JSON object")
            result = loaded
    else:
        problems.append("no result.json: the run did not finish or was not fetched")

    complete = result is not None
    if result is None:
        if not events_path.is_file():
            raise ReportError(f"{node_dir}: result.json unreadable and no events.jsonl")
        events, bad = read_events(events_path)
        if not events:
            raise ReportError(f"{events_path}: no readable events")
        if bad:
            problems.append(f"{bad} unreadable line(s) in events.jsonl skipped")
        if any(ev["event"] == "run_finished" for ev in events):
            problems.append("the node reported run_finished but its result.json is missing")
        result = result_from_events(events, node_dir.name)

    _check_shape(result, result_path if complete else events_path)
    name = node_dir.name if not single else str(result.get("node") or node_dir.name)
    if not single and result.get("node") and result["node"] != name:
        problems.append(f"folder {name} holds a result for node {result['node']}")
    return NodeRun(name=name, path=node_dir, result=result, complete=complete,
                   problems=problems, artifact_files=hash_artifacts(node_dir))


def _check_shape(result: dict[str, Any], source: Path) -> None:
    """Refuse a result the shared types cannot read, naming the file and the field."""
    for key in ("checks", "verdicts", "thresholds"):
        if not isinstance(result.get(key, []), list):
            raise ReportError(f"{source}: {key} must be a list")
    try:
        for c in result.get("checks", []):
            if c.get("status") != INTERRUPTED:
                CheckResult.from_dict(c)
        for v in [*result.get("verdicts", []), *result.get("fleet_verdicts", [])]:
            Verdict.from_dict(v)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ReportError(f"{source}: malformed check or verdict ({type(e).__name__}: {e})") \
            from None
    if result.get("outcome") not in ("PASS", "FAIL", "INCOMPLETE"):
        raise ReportError(f"{source}: outcome must be PASS, FAIL or INCOMPLETE")


def hash_artifacts(node_dir: Path) -> dict[str, str]:
    """sha256 of every fetched raw artifact, keyed by path relative to the node folder."""
    root = node_dir / "artifacts"
    if not root.is_dir():
        return {}
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[p.relative_to(node_dir).as_posix()] = sha256_file(p)
    return out


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
