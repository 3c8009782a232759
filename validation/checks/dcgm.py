"""DCGM: diagnostics (`dcgmi diag -r 2` standard, `-r 3` burnin; one verdict per plugin
and GPU: dcgmi exits non-zero when a plugin fails, the JSON still says which), what its
host engine sees (`dcgmi discovery -l`) and its health watches (`dcgmi health -c -j`)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

from validation.checks.common import gpu_labels, m, smi
from validation.checks.registry import CheckSkipped, CommandFailed, Context, check, log
from validation.model import Measurement
from validation.probes.dcgm import parse_diag_json
from validation.probes.dcgm_discovery import Discovery, parse_discovery
from validation.probes.dcgm_health import (
    HealthReport,
    Incident,
    parse_health_json,
    parse_health_text,
)
from validation.probes.nvidia_smi import ParseError

DIAG_LEVEL = {"standard": 2, "burnin": 3}
# seconds dcgmi diag may take per run level (r3 runs the stress plugins: tens of minutes)
DIAG_TIMEOUT_S = {2: 900, 3: 3600}


@check("dcgm.diag", emits=("dcgm.diag_result",),
       needs=("gpu", "dcgm"), levels=("standard", "burnin"), timeout_s=3900,
       title="DCGM diagnostics (dcgmi diag -r 2 standard, -r 3 burn-in): every plugin, every GPU")
def dcgm_diag(ctx: Context) -> Iterator[Measurement]:
    r = DIAG_LEVEL.get(ctx.level, 2)
    name = f"dcgmi-diag-r{r}.json"
    # 226: dcgmi's exit status when a plugin failed (the report is complete)
    text = ctx.run(["dcgmi", "diag", "-r", str(r), "-j"], timeout_s=DIAG_TIMEOUT_S[r],
                   artifact=name, ok_codes=(0, 226))
    for res in parse_diag_json(text):
        labels = {"plugin": res.plugin, "gpu": res.gpu, "category": res.category}
        if res.warnings:
            labels["warning"] = "; ".join(res.warnings)[:200]
        yield m("dcgm.diag_result", res.status, labels, f"artifacts/{name}")


# --- what DCGM's host engine sees, and its health watches -------------------------

DISCOVERY = "dcgmi-discovery-l.txt"


def discovery(ctx: Context) -> Discovery:
    """`dcgmi discovery -l`, parsed once per pass (dcgm.discovery and dcgm.health)."""
    return ctx.once("dcgm-discovery", lambda: parse_discovery(
        ctx.run(["dcgmi", "discovery", "-l"], timeout_s=60, artifact=DISCOVERY)))


@check("dcgm.discovery", emits=("dcgm.gpu_count", "dcgm.nvswitch_count", "dcgm.gpu_seen"),
       needs=("gpu", "dcgm"), timeout_s=60,
       metric_needs={"dcgm.nvswitch_count": ("nvswitch",)},
       title="DCGM sees every GPU and NVSwitch the driver lists (dcgmi discovery -l)")
def dcgm_discovery(ctx: Context) -> Iterator[Measurement]:
    found = discovery(ctx)
    yield m("dcgm.gpu_count", len(found.gpus), artifact=f"artifacts/{DISCOVERY}")
    if _switches_judged(ctx):
        yield m("dcgm.nvswitch_count", len(found.nvswitches),
                artifact=f"artifacts/{DISCOVERY}")
    # a GPU the driver lists and DCGM does not is named by its bus id (and serial)
    seen = {g.bus_id for g in found.gpus if g.bus_id and g.status == "OK"}
    for g in smi(ctx).gpus:
        lab = gpu_labels(g)
        yield m("dcgm.gpu_seen", lab["bus_id"] in seen, lab, f"artifacts/{DISCOVERY}")


def _switches_judged(ctx: Context) -> bool:
    """NVSwitches are counted where the profile requires them, or expects none (a chassis
    without); a scope without them (a VM slice, --without nvswitch) leaves them unjudged."""
    p = ctx.profile
    return (p is None or "nvswitch" in p.requires
            or not (p.inventory.get("nvswitch") or {}).get("count"))


HEALTH_GROUP = "rackready-health"
# dcgmi health -s's sampling interval (s) and how long the check lets DCGM sample before it
# asks: the counter and state rules (volatile DBEs, pending remaps and retirements, InfoROM,
# NVLink and NVSwitch error counts, XID-driven incidents) read the samples taken; DCGM's
# PCIe replay *rate* rule wants a minute of them, which health.delta.pcie_replay covers
HEALTH_UPDATE_S = 1
HEALTH_SETTLE_S = 1.0
_GROUP_ID = re.compile(r"with a group ID of (\d+)")


def _group(ctx: Context, flag: str) -> str:
    """A DCGM group of the check's own (`dcgmi group -c NAME --default|--defaultnvswitches`):
    `dcgmi health -s` replaces the watches of the group it names, so on the default group
    it would overwrite the systems, interval and keep age a site's monitoring set there."""
    out = ctx.run(["dcgmi", "group", "-c", HEALTH_GROUP, flag], timeout_s=30)
    found = _GROUP_ID.search(out)
    if not found:
        raise ParseError(f"unparsed dcgmi group -c output: {out.strip()[:120]!r}")
    return found.group(1)


def settle_s(site: dict[str, Any]) -> float:
    """How long DCGM samples before the check asks: the site's `dcgm: {health_settle_s}`
    (0-60 s; the lab's stand-in answers from its state and samples nothing: 0), else 1 s."""
    raw = (site.get("dcgm") or {}).get("health_settle_s", HEALTH_SETTLE_S)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0 <= raw <= 60:
        raise ValueError(f"site dcgm.health_settle_s must be 0-60 s, not {raw!r}")
    return float(raw)


def read_health(ctx: Context, groups: dict[str, str]) -> dict[str, HealthReport]:
    """Set every watch on each group, let DCGM sample, then check: kind -> report."""
    wait = settle_s(ctx.site)
    for gid in groups.values():
        ctx.run(["dcgmi", "health", "-g", gid, "-s", "a", "-u", str(HEALTH_UPDATE_S)],
                timeout_s=30)
    time.sleep(wait)
    reports = {}
    for kind, gid in groups.items():
        text = ctx.run(["dcgmi", "health", "-g", gid, "-c", "-j"], timeout_s=60,
                       artifact=f"dcgmi-health-c-{kind}.json")
        # a dcgmi that prints the boxed report despite -j is read as such
        reports[kind] = (parse_health_json(text) if text.lstrip().startswith("{")
                         else parse_health_text(text))
    return reports


def _incident_words(incidents: list[Incident]) -> str:
    return "; ".join(f"{i.system}: {i.message}" if i.message else i.system
                     for i in incidents)[:240]


def _entity_measurements(labels: dict[str, str], incidents: list[Incident],
                         entity_health: str | None) -> Iterator[Measurement]:
    fails = [i for i in incidents if i.health in ("fail", "unknown")]
    warns = [i for i in incidents if i.health == "warn"]
    # an entity marked failed (or "Internal error") with no system under it still fails
    n_fail = len(fails) or int(entity_health in ("fail", "unknown"))
    yield m("dcgm.health_failures", n_fail,
            {**labels, **({"health_incident": _incident_words(fails) or "no system named"}
                          if n_fail else {})})
    yield m("dcgm.health_warnings", len(warns),
            {**labels, **({"health_incident": _incident_words(warns)} if warns else {})})


@check("dcgm.health", emits=("dcgm.health_failures", "dcgm.health_warnings"),
       needs=("gpu", "dcgm"), timeout_s=120,
       title="DCGM health watches (dcgmi health -s a, -c -j) on a group of the check's own: "
             "incidents per GPU and NVSwitch")
def dcgm_health(ctx: Context) -> Iterator[Measurement]:
    found = discovery(ctx)
    groups: dict[str, str] = {}
    try:
        groups["gpu"] = _group(ctx, "--default")
        if found.nvswitches:
            groups["nvswitch"] = _group(ctx, "--defaultnvswitches")
        reports = read_health(ctx, groups)
    finally:
        for gid in groups.values():  # the watches go with the group
            try:
                ctx.run(["dcgmi", "group", "-d", gid], timeout_s=30)
            except (CheckSkipped, CommandFailed) as exc:
                log(f"dcgm.health: group {gid} left behind: {exc}")
    by_bus = {gpu_labels(g)["bus_id"]: gpu_labels(g) for g in smi(ctx).gpus}
    entities: dict[tuple[str, str], dict[str, str]] = {}
    for g in found.gpus:
        entities[("gpu", g.dcgm_id)] = {**by_bus.get(g.bus_id, {"gpu": f"dcgm {g.dcgm_id}"}),
                                        "dcgm_id": g.dcgm_id}
    for s in found.nvswitches:
        entities[("nvswitch", s)] = {"nvswitch": s}
    incidents = [i for r in reports.values() for i in r.incidents]
    health = {k: v for r in reports.values() for k, v in r.entities.items()}
    # entities the report names that discovery did not list are judged too, never dropped
    for kind, eid in {*health, *((i.entity, i.entity_id) for i in incidents)}:
        entities.setdefault((kind, eid), {"nvswitch": eid} if kind == "nvswitch"
                            else {"gpu": f"dcgm {eid}", "dcgm_id": eid} if kind == "gpu"
                            else {"node": f"{kind} {eid}"})
    for (kind, eid), lab in entities.items():
        mine = [i for i in incidents if (i.entity, i.entity_id) == (kind, eid)]
        yield from _entity_measurements(lab, mine, health.get((kind, eid)))
    named = any(v in ("fail", "unknown") for v in health.values())
    worst = [r.overall for r in reports.values() if r.overall in ("fail", "unknown")]
    if worst and not named:  # an overall failure no entity carries: the node's
        yield from _entity_measurements({"node": "DCGM overall health"}, [], worst[0])
