"""Run the registered checks on this node: stream events, judge, write result.json.

A re-run into an existing run directory moves the old one aside to
DIR.previous-<UTC timestamp> so nothing of an earlier run leaks into this one
and nothing is lost. A resumed run (`--resume`, resume.py) instead continues the
interrupted run in DIR: same run id, finished checks taken over, the rest run.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import socket
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from validation import budgets, procs, result_schema, textfile
from validation import judge as judge_mod
from validation.checks.catalog import all_checks
from validation.checks.health_delta import read_counters
from validation.checks.registry import CheckSkipped, CheckSpec, Context
from validation.model import SCHEMA_VERSION, CheckResult, Measurement
from validation.profile import Profile
from validation.resume import PreviousRun, RecordedError, counters_to_json, set_events_aside

HEALTH_CHECK = "health.delta"
# checks that read what happened during the run run last, health.delta (end-of-run counters)
# the very last: what they read since the run began must include the workloads
RUN_END_CHECKS = ("fabric.manager_log", HEALTH_CHECK)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def prepare_out(out: Path) -> Path | None:
    """Start clean: an existing non-empty run dir is moved aside; returns where it went."""
    moved = None
    if out.exists() and any(out.iterdir()):
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        moved = out.with_name(f"{out.name}.previous-{stamp}")
        shutil.move(str(out), str(moved))
    (out / "artifacts").mkdir(parents=True, exist_ok=True)
    return moved


def select_checks(level: str, only: list[str] | None) -> list[CheckSpec]:
    checks = all_checks()
    if only:
        unknown = [n for n in only if n not in checks]
        if unknown:
            raise ValueError(f"unknown check(s) {', '.join(unknown)}; "
                             "`python -m validation checks` lists them")
        chosen = [checks[n] for n in only]
    else:
        chosen = [c for c in checks.values() if level in c.levels]
    # the end-of-run reads come after everything else has run
    return sorted(chosen, key=lambda c: RUN_END_CHECKS.index(c.name) + 1
                  if c.name in RUN_END_CHECKS else 0)


def check_timeout_s(spec: CheckSpec, ctx: Context) -> float:
    """From the level's budget (validation/budgets.yml), never shorter than the check's
    workload plans to take; the registered timeout where the level gives it no share."""
    try:
        planned = budgets.planned_s(ctx, spec.name)
    except Exception:  # a planner that cannot tell: the share alone decides
        planned = None
    gpus = int(ctx.profile.gpu("count", 8) or 8) if hasattr(ctx.profile, "gpu") else 8
    t = budgets.timeout_s(ctx.level, spec.name, gpus, planned,
                          simulated=bool(getattr(ctx.profile, "simulated", False)))
    return spec.timeout_s if t is None else t


def run_check(spec: CheckSpec, ctx: Context, required: frozenset[str]) -> CheckResult:
    ctx.current_check = spec.name
    ctx.emit({"event": "check_started", "check": spec.name, "needs": list(spec.needs)})
    missing = sorted(set(spec.needs) - required)
    if missing:
        return CheckResult(spec.name, "skipped", 0.0, (),
                           f"profile does not require {', '.join(missing)}", spec.needs)
    measurements: list[Measurement] = []
    outcome: dict[str, Any] = {}

    def body() -> None:
        try:
            for meas in spec.fn(ctx):
                measurements.append(meas)
                ctx.emit({"event": "measurement", "check": spec.name,
                          "measurement": meas.to_dict()})
            outcome["status"] = "ok"
        except CheckSkipped as exc:
            outcome.update(status="skipped", message=str(exc))
        except procs.NotRun as exc:  # the message says why in full
            outcome.update(status="error", message=str(exc))
        except procs.TimedOut as exc:  # its workload was killed at the deadline
            outcome.update(status="timeout", message=str(exc))
        except Exception as exc:  # a crashing check is a result, never a crashed run
            outcome.update(status="error", message=f"{type(exc).__name__}: {exc}")

    timeout_s = check_timeout_s(spec, ctx)
    start = time.monotonic()
    # the check's workloads run to this deadline (workload_checks._run), a little inside ours
    ctx.cache["check.deadline"] = start + timeout_s
    # a thread, so a hung probe times out the check instead of the whole run
    worker = threading.Thread(target=body, name=f"check-{spec.name}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        # Abandoning the thread is not enough: what it started would keep the GPUs busy
        # while the next checks run. Kill every session (a workload's torchrun, the worker
        # group) and every process this one started, and wait until they are gone.
        survivors = procs.kill_all(f"{spec.name} timed out")
        left = procs.kill_descendants()
        worker.join(5.0)  # it sees its processes die and ends
        duration = time.monotonic() - start
        msg = f"no result after {timeout_s:g} s; its processes were killed"
        stuck = sorted({p for ps in survivors.values() for p in ps} | set(left))
        if stuck:
            msg += f" (still alive: pid {', '.join(map(str, stuck))})"
        return CheckResult(spec.name, "timeout", duration, tuple(measurements), msg, spec.needs)
    duration = time.monotonic() - start
    return CheckResult(spec.name, outcome.get("status", "error"), duration, tuple(measurements),
                       outcome.get("message", ""), spec.needs)


def _inventory(results: list[CheckResult]) -> dict[str, Any]:
    """Identity of the node for the report: GPU serials, VBIOS, driver, NICs, drives."""
    inv: dict[str, Any] = {"gpus": {}, "nics": {}, "nvme": {}}
    for r in results:
        for meas in r.measurements:
            lab = meas.labels
            if meas.name in ("gpu.serial", "gpu.uuid", "gpu.vbios", "gpu.model",
                             "gpu.memory_total") and "gpu" in lab:
                entry = inv["gpus"].setdefault(lab["gpu"], {"bus_id": lab.get("bus_id")})
                entry[meas.name.split(".", 1)[1]] = meas.value
            elif meas.name in ("gpu.driver_version", "gpu.cuda_version", "nccl.version"):
                inv[meas.name.replace(".", "_")] = meas.value
            elif meas.name in ("nic.model", "nic.firmware") and "nic" in lab:
                inv["nics"].setdefault(lab["nic"], {})[meas.name.split(".")[1]] = meas.value
            elif meas.name == "nvme.model":
                inv["nvme"][lab.get("device", "?")] = {"model": meas.value,
                                                       "serial": lab.get("serial")}
    return inv


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def run_suite(profile: Profile, level: str, out: Path, sysroot: Path = Path("/"),
              site: dict[str, Any] | None = None, only: list[str] | None = None,
              stdout: TextIO = sys.stdout, bundle_sha256: str | None = None,
              resume: PreviousRun | None = None, nonce: str | None = None,
              textfile_dir: str | Path | None = None) -> dict[str, Any]:
    """Run the suite and return the result dict (also written to out/result.json).

    With `resume` (resume.read_previous of out, checked by resume.check_resumable) the
    interrupted run continues: its finished checks are re-emitted with "resumed": true
    and not run again, its start-of-run health counters stand, the rest runs.

    `nonce` is the controller's token for this run, echoed in result.json and the
    run_started event so a result replayed from another run is told apart.
    """
    site = dict(site or {})
    checks = select_checks(level, only)
    hostname = socket.gethostname()
    resumed_at: list[str] = []
    # One clock read for this start: result.json's started (or resumed_at) and the
    # run_started event's ts are the same instant, and a resume reads it back from the event.
    now = _now()
    if resume is None:
        prepare_out(out)
        run_id, node, started = str(uuid.uuid4()), str(site.get("node", hostname)), now
    else:
        set_events_aside(out)
        (out / "artifacts").mkdir(parents=True, exist_ok=True)
        run_id, started = resume.run_id, resume.started
        node = resume.node or str(site.get("node", hostname))
        resumed_at = [*resume.resumed_at, now]
        checks = [c for c in checks if c.name not in resume.results]
    results: list[CheckResult] = []
    finished = False
    with (out / "events.jsonl").open("w") as events:
        ctx = Context(profile=profile, level=level, sysroot=sysroot, out=out, site=site,
                      stream=[stdout, events], started=datetime.fromisoformat(started))
        start_event: dict[str, Any] = {
            "event": "run_started", "ts": now, "run_id": run_id, "node": node,
            "profile": profile.name, "level": level, "simulated": profile.simulated,
            "scope": profile.scope, "only": list(only) if only else None, "nonce": nonce}
        if resume is not None:
            start_event.update(resumed=True, first_started=started, resumed_at=resumed_at)
        ctx.emit(start_event)
        required = profile.required_needs()
        try:
            if resume is not None:
                results += _take_over(ctx, resume)
            wants_health = any(c.name == HEALTH_CHECK for c in checks) and "gpu" in required
            if resume is not None and resume.health_start is not None:
                # the original run's counters, so the delta covers the whole burn-in
                ctx.cache["health.start"] = resume.health_start
                _emit_health_start(ctx, resume.health_start)
            elif resume is not None and wants_health:
                ctx.cache["health.start"] = RuntimeError(
                    "the interrupted run recorded no start-of-run counters; re-reading them "
                    "now would hide what happened before the interruption")
            elif wants_health:
                try:
                    ctx.cache["health.start"] = read_counters(ctx)
                except Exception as exc:  # judged through the health.delta check
                    ctx.cache["health.start"] = exc
                ctx.cache.pop("smi", None)
                _emit_health_start(ctx, ctx.cache["health.start"])
            # one long-lived worker group for the run's GPU workloads, where more than one
            # runs (workload_checks._run starts it; the site may say workloads: {group: false})
            torch_checks = [c for c in checks if "torch" in c.needs]
            ctx.cache["workloads.use_group"] = (
                len(torch_checks) > 1
                and (site.get("workloads") or {}).get("group", True) is not False)
            for spec in checks:
                result = run_check(spec, ctx, required)
                results.append(result)
                ctx.emit({"event": "check_finished", "check": spec.name,
                          "result": result.to_dict()})
            finished = True
        finally:
            group = ctx.cache.pop("workloads.group", None)
            if group is not None:
                group.close()
            verdicts = judge_mod.judge(results, profile)
            outcome = judge_mod.node_outcome(verdicts, finished)
            finished_at = _now()  # result.json and the run_finished event: one instant
            artifacts = {str(p.relative_to(out)): _sha256(p)
                         for p in sorted((out / "artifacts").rglob("*")) if p.is_file()}
            doc: dict[str, Any] = {
                "schema_version": SCHEMA_VERSION, "run_id": run_id, "node": node,
                "hostname": hostname, "profile": profile.name, "level": level,
                "simulated": profile.simulated, "scope": profile.scope,
                # what was asked: a narrowed run is never an acceptance (the controller
                # also knows what it asked; a bare result folder has only this)
                "only": list(only) if only else None,
                "started": started, "finished": finished_at,
                **({"resumed_at": resumed_at} if resumed_at else {}),
                "tool_versions": {"python": platform.python_version(),
                                  "nvidia_driver": _inventory(results).get(
                                      "gpu_driver_version")},
                "bundle_sha256": bundle_sha256,
                "nonce": nonce,
                "inventory": _inventory(results),
                "checks": [r.to_dict() for r in results],
                "verdicts": [v.to_dict() for v in verdicts],
                "outcome": outcome,
                "thresholds": [t.to_dict() for t in profile.thresholds],
                "artifacts": artifacts,
            }
            text = json.dumps(doc, indent=2, default=str)
            _say_schema_problems(json.loads(text))
            tmp = out / "result.json.tmp"
            tmp.write_text(text)
            tmp.replace(out / "result.json")
            # node_exporter textfile metrics where asked (--textfile-dir, site, environment)
            textfile.write_run(doc, textfile.run_dir(site, textfile_dir))
            ctx.emit({"event": "run_finished", "ts": finished_at, "outcome": outcome})
    return doc


def _say_schema_problems(doc: dict[str, Any]) -> None:
    """A result that breaks its own schema is the suite's bug: said on stderr, and the
    result is still written (nothing measured is lost; the controller, checking the same
    schema, judges the node incomplete)."""
    problems = result_schema.check_result(doc)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        print(f"validation: result.json breaks validation/schema/result.schema.json: "
              f"{problems[0]}{more}", file=sys.stderr)


def _take_over(ctx: Context, prev: PreviousRun) -> list[CheckResult]:
    """The interrupted run's finished checks, re-emitted for the controller and reports."""
    taken = []
    for name, result in prev.results.items():
        ctx.emit({"event": "check_started", "check": name, "needs": list(result.needs),
                  "resumed": True})
        ctx.emit({"event": "check_finished", "check": name, "result": result.to_dict(),
                  "resumed": True})
        taken.append(result)
    return taken


def _emit_health_start(ctx: Context, start: Any) -> None:
    """Start-of-run counters into the event stream, where a resumed run finds them."""
    if isinstance(start, RecordedError):  # re-emitted as the interrupted run wrote it
        ctx.emit({"event": "health_start", "error": str(start)})
    elif isinstance(start, Exception):
        ctx.emit({"event": "health_start", "error": f"{type(start).__name__}: {start}"})
    else:
        ctx.emit({"event": "health_start", "counters": counters_to_json(start)})
