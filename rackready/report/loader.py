"""Load a judged run for the reports: through rackready.run.rundir, with the controller's
judgements (rackready.decide) handed in; an unjudged run is refused.

Every planned node gets a NodeRun, including one that never reported (its
result is an empty skeleton, its judgement says why). A node whose result.json
is missing or unreadable is rebuilt from its event stream (the checks that
finished before it dropped). The outcome is never decided here: it comes from
the judgements rackready.decide.judge.judged gives (the node's judgement.json in a
controller's run directory; a bare node folder judged anew, its judgement.json, if any,
came from the node).

Layouts accepted:
  DIR/run.json + DIR/<node>/{result.json,events.jsonl,artifacts/}  (invoke validate)
  DIR/{result.json,events.jsonl,artifacts/}         (python -m validation run --out DIR)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackready.decide.judge import rack_step_of
from rackready.decide.node import parse_checks
from rackready.decide.records import Judgement, RackJudgement, RackStep
from rackready.errors import UserError
from rackready.report.errors import ReportError
from rackready.report.schema import NUMBER_BOUND
from rackready.run.rebuild import result_from_events
from rackready.run.rundir import RunDir, sha256_file


@dataclass
class NodeRun:
    """One node's data as found on disk, and the controller's judgement of it."""

    name: str
    path: Path
    result: dict[str, Any]  # result.json shape (rebuilt from events, or a skeleton)
    complete: bool  # result.json present and readable
    judgement: Judgement
    problems: list[str] = field(default_factory=list)  # why incomplete, in words
    artifact_files: dict[str, str] = field(default_factory=dict)  # relpath -> sha256 on disk


@dataclass
class RunData:
    path: Path
    run: dict[str, Any]
    nodes: list[NodeRun]
    rack: RackJudgement  # the rack's judgement (rackready.decide.outcome.rack_judgement)
    rack_step: RackStep = field(default_factory=RackStep)  # <run>/_rack/rack.json


def open_run(run_dir: Path) -> RunDir:
    """A run directory with node data in it; ReportError for unusable input."""
    try:
        run = RunDir.open(run_dir)
    except UserError as e:
        raise ReportError(str(e)) from None
    if not run.node_names():
        raise ReportError(
            f"no node results in {run_dir}: expected {run_dir}/<node>/result.json "
            "or events.jsonl"
        )
    return run


def load_judged(run: RunDir, judged: tuple[dict[str, Judgement], RackJudgement]) -> RunData:
    """Load every node of a judged run: `judged` is rackready.decide.judge.judged(run),
    every node's judgement and the rack's. A run without them is refused: a report only
    reads what the controller decided (`invoke report` judges first)."""
    judgements, rack = judged
    names = run.node_names()
    unjudged = [n for n in names if not judgements.get(n)]
    if unjudged or not rack.get("outcome"):
        raise ReportError(f"{run.path}: not judged ({', '.join(unjudged[:3]) or 'the rack'} "
                          "has no judgement); a report reads the controller's judgement: "
                          "judge the run first (invoke report does)")
    nodes = [_load_node(run, n, judgements[n]) for n in names]
    return RunData(path=run.path, run=_run_info(run, nodes), nodes=nodes, rack=rack,
                   rack_step=_bounded_step(rack_step_of(run)))


def _bounded_step(step: RackStep) -> RackStep:
    """The rack step's figures (a link's GB/s) inside the schema's range, what was outside
    named among its group's problems."""
    groups = []
    for g in step.get("groups") or []:
        found: list[str] = []
        g = _bounded(g, "rack step", found)
        if found and isinstance(g, dict):
            g["problems"] = [*(g.get("problems") or []), *found[:_MAX_NAMED]]
        groups.append(g)
    return {**step, "groups": groups} if "groups" in step else step


def _load_node(run: RunDir, name: str, judgement: Judgement) -> NodeRun:
    paths = run.paths(name)
    loaded = run.read_result(name)
    result = loaded.result
    complete = result is not None
    if result is None:
        events, _ = run.read_events(name)
        result = result_from_events(events, name)
    problems = list(judgement.get("problems") or [])
    # only well-formed checks reach the documents (the judgement counted the rest)
    result = {**result, "checks": [c.to_dict() for c in parse_checks(result, [])]}
    # every number within the schema's range before any document, statistic or figure
    found: list[str] = []
    result = _bounded(result, "result.json", found)
    judgement = _bounded(judgement, "the judgement", found)
    found = list(dict.fromkeys(found))  # a verdict repeats its measurement's words
    problems += found[:_MAX_NAMED] + (
        [f"{len(found) - _MAX_NAMED} more number(s) outside what the report holds"]
        if len(found) > _MAX_NAMED else [])
    if run.is_bare_node_dir():
        name = str(judgement.get("node") or name)
    return NodeRun(name=name, path=paths.dir, result=result, complete=complete,
                   judgement=judgement, problems=problems,
                   artifact_files=hash_artifacts(paths.dir))


# labels the figures read as an axis: each a finite number in its range, else the
# measurement stays in the tables and is left out of the figure
_AXIS_LABELS = {"size_bytes": (1.0, NUMBER_BOUND), "t_s": (-NUMBER_BOUND, NUMBER_BOUND),
                "step": (-NUMBER_BOUND, NUMBER_BOUND)}
_MAX_NAMED = 5  # numbers named one by one in the problems; the rest are counted


def _bounded(v: Any, where: str, found: list[str]) -> Any:
    """v with every number inside the report schema's range (+-NUMBER_BOUND): one beyond
    it clamped to the bound, one that is no number (NaN, infinity) refused as null, each
    recorded in `found`. A node's 1.7e308 would otherwise overflow a fleet median to
    infinity, which JSON cannot hold, and take every report of the run down with it."""
    if isinstance(v, dict):
        named = v.get("metric") or v.get("name")  # a measurement or verdict: its metric
        where = named[:60] if isinstance(named, str) else where
        out = {k: _bounded(x, f"{where} {k}", found) for k, x in v.items()}
        labels = out.get("labels")
        if isinstance(labels, dict) and "name" in out:
            for key, (lo, hi) in _AXIS_LABELS.items():
                if key in labels and not _within(labels[key], lo, hi):
                    found.append(f"{out['name']}: label {key} {str(labels[key])[:40]!r} "
                                 f"is not a number from {lo:g} to {hi:g}; left out of "
                                 "the figures")
        return out
    if isinstance(v, list):
        return [_bounded(x, where, found) for x in v]
    if isinstance(v, bool) or not isinstance(v, int | float):
        return v
    if isinstance(v, float) and not math.isfinite(v):
        found.append(f"{where}: {v!r} is no number; refused (null)")
        return None
    if abs(v) <= NUMBER_BOUND:
        return v
    shown = f"{v:.3g}" if isinstance(v, float) else f"an integer of {len(str(abs(v)))} digits"
    found.append(f"{where}: {shown} is outside the report's range (+-{NUMBER_BOUND:g}); "
                 "clamped to it")
    return math.copysign(NUMBER_BOUND, v)


def _within(text: Any, lo: float, hi: float) -> bool:
    try:
        x = float(str(text)[:64])
    except ValueError:
        return False
    return lo <= x <= hi  # NaN is never within


def _run_info(run: RunDir, nodes: list[NodeRun]) -> dict[str, Any]:
    if run.plan is not None:
        return run.plan.to_dict()
    # No run.json (a bare node-side result directory): take what the nodes say.
    results = [n.result for n in nodes]
    starts = sorted(str(r["started"]) for r in results if r.get("started"))
    ends = sorted(str(r["finished"]) for r in results if r.get("finished"))
    return {
        "run_id": str(next((r["run_id"] for r in results if r.get("run_id")), run.path.name)),
        "inventory": None,
        "started": starts[0] if starts else None,
        "finished": ends[-1] if ends else None,
        "operator": {},
        "nodes": [{"name": n.name, "profile": n.judgement.get("profile")} for n in nodes],
    }


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
