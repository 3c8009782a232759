"""`python -m validation health`: the quick gate a scheduler runs on a node before (and
between) jobs.

Only the hardware reads of the node's profile run (no GPU workload, nothing that needs
PyTorch), within a wall-time budget (`health:` in validation/budgets.yml, 10 s on an 8-GPU
node, counted from the process's start): each check must be done by the sum of its share
and the shares before it (time an earlier check left unused carries over); one that runs
past that is stopped, its processes killed, and the node fails the gate, never a silent
pass. The results are judged by validation.judge against the profile on the node itself: a
local health gate, not an acceptance (the controller's judgement of a full run is that).
One line and an exit code: 0 healthy, 1 unhealthy, 2 a usage mistake.

A check that ran out of time is not a hardware fault: the gate's budget is measured on the
lab's simulated node and a real node may be slower (a loaded node, a large journal). Where
nothing but time-outs failed, the node is `timed_out`, and its line and drain reason say
`health check timed out: <check>`; a verdict that failed on a measurement is named first
when there is one (`<check> <component>: <metric> = <value>`).

Evidence or FAIL here too: a GPU the gate read whose temperature nvidia-smi gave as N/A
is `not measured` and the node unhealthy (PER_GPU), never a healthy node by omission; a
number no hardware counter holds (a 400-digit ECC count) is refused, unhealthy. The
textfile is rewritten on every run, or removed where it cannot be (validation.textfile
.replace): an earlier run's file never stands for this one.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from validation import budgets, procs
from validation import judge as judge_mod
from validation.checks.catalog import all_checks
from validation.checks.registry import CheckSpec, Context
from validation.model import CheckResult, Verdict
from validation.profile import Profile

SOURCE = "health"
# a check that needs one of these runs a workload or a tool the health check does not have
WORKLOAD_NEEDS = frozenset({"torch", "nccl-tests", "fio", "dcgm"})
# quick-level checks that need none of those but are still no hardware read, or do not fit
# a 10 s gate that also runs while a job holds the GPUs
NOT_HEALTH = {
    "nccl.version": "imports PyTorch to read the NCCL it loads",
    "health.delta": "the rise of counters over a run; a 10 s gate has no run to measure",
    "fabric.manager_log": "NVSwitch errors logged since the run began; a 10 s gate has no run "
                          "(nvswitch.sxid reads this boot's SXids in the gate)",
    "host.membw": "a memory-bandwidth workload (numpy threads on every NUMA node)",
    "storage_ckpt": "writes and reads checkpoint files on /raid",
    "gpu.idle_peers": "idle power and temperature: under a running job it reads the job",
    "network.transceiver": "one mlxlink module and BER read per compute port; not measured "
                           "on real ConnectX ports, so kept out of the 10 s budget",
}


# what each GPU must have a reading of, by the check that reads it, where the profile
# holds a limit on it: a sensor that answers N/A on a GPU is not a pass on that GPU
PER_GPU = {"gpu.health": ("gpu.temperature",)}
# the widest counter a GPU, NIC or drive keeps: an integer past it is not a reading
COUNTER_MAX = 1 << 64


def health_checks() -> list[CheckSpec]:
    """The checks the health gate runs, in the registry's order."""
    return [c for c in all_checks().values()
            if "quick" in c.levels and not set(c.needs) & WORKLOAD_NEEDS
            and c.name not in NOT_HEALTH]


def process_age_s() -> float:
    """Seconds since this process started (the interpreter's start counts in the budget)."""
    try:
        stat = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started = int(stat[19]) / os.sysconf("SC_CLK_TCK")
        return max(0.0, float(Path("/proc/uptime").read_text().split()[0]) - started)
    except (OSError, ValueError, IndexError):
        return 0.0


def budget(gpus: int, raw: dict[str, Any] | None = None
           ) -> tuple[float, float, float, dict[str, float]]:
    """(whole budget, what is kept back for the start and for what follows the checks, what
    of that follows them (judging, the textfile, scontrol), each check's share) for a node
    of this many GPUs."""
    spec = (raw or budgets.load())["health"]
    shares = {name: budgets._by_gpus(v, gpus) for name, v in spec["checks"].items()}
    return (budgets._by_gpus(spec["budget_s"], gpus), budgets._by_gpus(spec["reserve_s"], gpus),
            budgets._by_gpus(spec["after_s"], gpus), shares)


@dataclass
class Health:
    results: list[CheckResult]
    verdicts: list[Verdict]
    healthy: bool
    elapsed_s: float
    budget_s: float
    started: float  # unix time of the process's start
    notes: list[str] = field(default_factory=list)

    def first_failure(self) -> Verdict | None:
        """The first failed verdict of a check that did not time out (the hardware's, or a
        check's own error); None when there is none. A timed-out check's verdicts (its
        status, a metric it never got to emit) say only that it ran out of time."""
        late = {r.check for r in self.timed_out()}
        return next((v for v in self.verdicts if v.outcome == "fail" and v.check not in late),
                    None)

    def timed_out(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "timeout"]

    @property
    def state(self) -> str:
        """healthy, unhealthy (a failure that is not a time-out) or timed_out."""
        if self.healthy:
            return "healthy"
        return "unhealthy" if self.first_failure() is not None or not self.timed_out() \
            else "timed_out"


def _timed_out(spec: CheckSpec, share: float, used: float, budget_s: float) -> CheckResult:
    return CheckResult(spec.name, "timeout", used, (),
                       f"timed out: stopped after {used:.1f} s, past its share of the "
                       f"{budget_s:g} s health budget ({share:g} s plus what earlier checks "
                       "left); its processes were killed", spec.needs)


def run_health(profile: Profile, sysroot: Path = Path("/"), site: dict[str, Any] | None = None,
               t0: float | None = None, raw_budgets: dict[str, Any] | None = None) -> Health:
    """Run the health checks the profile requires; t0 is the process's start (monotonic)."""
    from validation import runner  # its run_check: the same thread, statuses and events

    t0 = time.monotonic() - process_age_s() if t0 is None else t0
    started = time.time() - (time.monotonic() - t0)
    gpus = int(profile.gpu("count", 8) or 8)
    budget_s, _, after_s, shares = budget(gpus, raw_budgets)
    required = profile.required_needs(site)
    checks = [c for c in health_checks() if set(c.needs) <= required]
    results: list[CheckResult] = []
    with tempfile.TemporaryDirectory(prefix="rackready-health-") as tmp:
        ctx = Context(profile=profile, level="quick", sysroot=sysroot, out=Path(tmp),
                      site=dict(site or {}), stream=[])
        # the schedule starts with the first check (a slow start is not the first check's
        # fault); the budget's end holds for all of them, less what follows the checks
        deadline = time.monotonic()
        limit = t0 + budget_s - after_s
        for spec in checks:
            share = shares.get(spec.name)
            if share is None:  # test_health holds every health check to a share
                share = 0.0
            deadline = min(deadline + share, limit)
            start = time.monotonic()
            if deadline - start <= 0:
                results.append(_timed_out(spec, share, 0.0, budget_s))
                continue
            box: list[CheckResult] = []
            # box and spec bound now: a check left behind must not write into a later one's
            worker = threading.Thread(target=lambda s=spec, b=box: b.append(
                runner.run_check(s, ctx, required)), name=f"health-{spec.name}", daemon=True)
            worker.start()
            worker.join(deadline - start)
            if box:
                results.append(box[0])
                continue
            # past its share: kill what it started (a hung nvidia-smi) without waiting long
            # for a process stuck in the kernel; the thread is left behind (daemon)
            procs.kill_descendants(wait_s=0.2)
            results.append(_timed_out(spec, share, time.monotonic() - start, budget_s))
        verdicts = judge_mod.judge(results, profile)
        verdicts += unread_verdicts(results, profile, verdicts) + refused_verdicts(results)
    healthy = judge_mod.node_outcome(verdicts) == "PASS"
    return Health(results, verdicts, healthy, time.monotonic() - t0, budget_s, started)


def unread_verdicts(results: list[CheckResult], profile: Profile,
                   verdicts: list[Verdict]) -> list[Verdict]:
    """A failing `not measured` verdict for each GPU a check of PER_GPU read without a
    reading of a metric the profile limits (nvidia-smi's N/A), unless the judge already
    failed that metric as not measured."""
    limited = {t.metric for t in profile.thresholds}
    said = {v.metric for v in verdicts if v.outcome == "fail" and v.value is None}
    out = []
    for r in results:
        if r.status != "ok":
            continue  # its check.status verdict says why
        gpus = {m.labels["gpu"]: m.labels for m in r.measurements if m.labels.get("gpu")}
        for metric in PER_GPU.get(r.check, ()):
            if metric not in limited or metric in said:
                continue
            read = {m.labels.get("gpu") for m in r.measurements if m.name == metric}
            for gpu, labels in sorted(gpus.items(), key=lambda x: (len(x[0]), x[0])):
                if gpu not in read:
                    out.append(Verdict(
                        r.check, metric, "fail", None, "", dict(labels),
                        message=f"{metric} not measured on {judge_mod.component(labels)}: "
                                "the GPU gave no reading (N/A)",
                        remediation="read the GPU's sensors (nvidia-smi -q -d TEMPERATURE); "
                                    "a GPU whose temperature cannot be read is not healthy"))
    return out


def refused_verdicts(results: list[CheckResult]) -> list[Verdict]:
    """A failing verdict for each integer reading past COUNTER_MAX: a lie or a broken
    probe, never a count; the gate refuses it rather than judging or exporting it."""
    out = []
    for r in results:
        for m in r.measurements:
            v = m.value
            if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= COUNTER_MAX:
                size = f"{v.bit_length()}-bit number"  # str() of it may itself raise
                out.append(Verdict(
                    r.check, m.name, "fail", size, m.unit, dict(m.labels),
                    message=f"{m.name} refused: a {size}, beyond any hardware counter "
                            "(64 bits)",
                    remediation="re-read the part with the vendor's tool; a reading no "
                                "counter can hold is not a measurement"))
    return out


def one_line(h: Health, profile: Profile) -> str:
    if h.healthy:
        return (f"healthy: {len(h.results)} checks in {h.elapsed_s:.1f} s "
                f"({profile.name}; a local health gate, not an acceptance)")
    v = h.first_failure()
    if v is None and h.timed_out():
        first = h.timed_out()[0]
        return f"UNHEALTHY: {timed_out_words(h)} ({' '.join(first.message.split())})"
    return f"UNHEALTHY: {failure_words(v)}" if v else "UNHEALTHY: no verdict said why"


TIMED_OUT = "health check timed out"


def timed_out_words(h: Health) -> str:
    """`health check timed out: <check>[ and N more]`: the drain reason of a gate whose
    only failures are time-outs, never worded as a hardware fault."""
    late = h.timed_out()
    more = f" and {len(late) - 1} more" if len(late) > 1 else ""
    return f"{TIMED_OUT}: {late[0].check}{more}"


def failure_words(v: Verdict) -> str:
    """`<check> <component>: <message>`, on one line."""
    msg = " ".join(v.message.split())
    return f"{v.check} {judge_mod.component(v.labels)}: {msg}"


def document(h: Health, profile: Profile, node: str) -> dict[str, Any]:
    """The health check as a result.json-shaped dict (what validation.textfile reads)."""
    import platform

    from validation.runner import _inventory

    return {"profile": profile.name, "level": SOURCE, "node": node,
            "tool_versions": {"python": platform.python_version()},
            "simulated": profile.simulated, "scope": profile.scope,
            "inventory": _inventory(h.results),
            "checks": [r.to_dict() for r in h.results],
            "verdicts": [v.to_dict() for v in h.verdicts]}


def main(profile: Profile, sysroot: Path, site: dict[str, Any], textfile_dir: str | None,
         drain: bool, t0: float) -> int:
    """Run the gate, drain or resume where asked, write the textfile; print one line."""
    from validation import drain as drain_mod
    from validation import textfile

    h = run_health(profile, sysroot, site, t0=t0)
    line = one_line(h, profile)
    healthy = h.healthy
    node = str(site.get("node") or drain_mod.node_name())
    if drain:
        why = drain_mod.reason(drain_words(h))
        remaining = max(1.0, h.budget_s - (time.monotonic() - t0))
        done, words = drain_mod.apply(healthy, why, drain_mod.Scontrol(timeout_s=remaining))
        if not done and healthy:  # the gate could not do what it was asked
            healthy = False
            line = f"UNHEALTHY: health.drain node: {words}"
        elif words:
            line += f"; {words}" if done else f"; not drained: {words}"
    where = textfile.run_dir(site, textfile_dir)  # --textfile-dir, else the site's
    if where is not None:
        elapsed = time.monotonic() - t0
        state = h.state if healthy == h.healthy else "unhealthy"  # the drain failed
        built: list[str] = []

        def build() -> str:
            built.append(textfile.health_exposition(document(h, profile, node), elapsed,
                                                    h.started + elapsed, state))
            return built[0]

        problem = textfile.replace(where, SOURCE, build)
        refused = textfile.refused_words(built[0]) if built else ""
        line += "".join(f"; {p}" for p in (refused, problem) if p)
    print(line, flush=True)
    return 0 if healthy else 1


def drain_words(h: Health) -> str:
    """What the drain reason says: the first failure that is not a time-out, else that
    the gate timed out (its own reason, never a hardware fault)."""
    first = h.first_failure()
    if first is not None:
        return reason_words(first)
    return timed_out_words(h) if h.timed_out() else ""


def reason_words(v: Verdict) -> str:
    """What a drain reason says: `<check> <component>: <metric> = <value>`, or how the
    check ended."""
    part = judge_mod.component(v.labels)
    if v.metric == "check.status":
        return f"{v.check} {part}: {v.value} ({v.message})"
    if v.value is None:
        return f"{v.check} {part}: {v.metric} not measured"
    return f"{v.check} {part}: {v.metric} = {v.value}"
