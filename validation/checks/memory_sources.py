"""host.memory_errors' sources beside sysfs EDAC and the kernel log: rasdaemon, edac-util.

Each is read only where installed (a node without rasdaemon is judged as before, and the
report's `host.memory_error_sources` fact says what was read); a tool present whose output
does not parse errors the check. Counts are merged per DIMM label, never summed across
sources: sysfs, edac-util and rasdaemon count the same kernel events (edac-util reads the
same sysfs counters; rasdaemon records each EDAC report the counters count), so the larger
count per DIMM is the DIMM's count. rasdaemon's is larger where counters were reset (a
reboot): its records span boots, and an error it recorded is an error.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field

from validation.checks.registry import CommandFailed, Context
from validation.probes.edac_util import NO_MC, parse_edac_util
from validation.probes.host_memory import EdacMc
from validation.probes.rasdaemon import RasErrors, no_database, parse_ras_mc_errors

_FALLBACK = re.compile(r"^ch\d+$")  # edac-util's name for a channel with no label


def run_optional(ctx: Context, cmd: list[str], artifact: str,
                 timeout_s: float = 60) -> subprocess.CompletedProcess[str] | None:
    """Run a tool the node may lack: None where it is not installed."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              check=False, env={**os.environ, "LC_ALL": "C"})
    except FileNotFoundError:
        return None
    except subprocess.TimeoutExpired:
        raise CommandFailed(f"{' '.join(cmd)} ran past {timeout_s:g} s") from None
    ctx.artifacts.mkdir(parents=True, exist_ok=True)
    (ctx.artifacts / artifact).write_text(proc.stdout + (f"\n# stderr:\n{proc.stderr}"
                                                         if proc.stderr else ""))
    return proc


@dataclass
class DimmCount:
    dimm: str  # the DIMM label (slot name where the BIOS or edac-utils set it)
    where: str  # how the sources locate it: EDAC mcN/dimmM, or rasdaemon's location
    ce: int = 0
    ue: int = 0
    sources: set[str] = field(default_factory=set)


@dataclass
class MemoryEvidence:
    dimms: dict[str, DimmCount] = field(default_factory=dict)
    # counts that name several DIMMs at once (a csrow's UE, rasdaemon's "A1 or A2"), resolved
    # after every single-DIMM count: only what exceeds their DIMMs' own counts is new
    groups: list[tuple[tuple[str, ...], str, str, int, int]] = field(default_factory=list)
    read: list[str] = field(default_factory=list)  # the sources read, in order
    not_read: list[str] = field(default_factory=list)  # "<tool>: <why>"
    mce_uc: dict[str, int] = field(default_factory=dict)  # rasdaemon: "CPU c bank b" -> n
    mce_ce: int = 0
    extlog_uc: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, dimm: str, where: str, source: str, ce: int, ue: int) -> None:
        d = self.dimms.setdefault(key, DimmCount(dimm, where))
        d.ce, d.ue = max(d.ce, ce), max(d.ue, ue)
        d.sources.add(source)

    def add_group(self, labels: tuple[str, ...], where: str, source: str, ce: int,
                  ue: int) -> None:
        if len(labels) == 1:
            self.add(labels[0], labels[0], where, source, ce, ue)
        elif ce or ue:
            self.groups.append((labels, where, source, ce, ue))

    def resolve(self) -> list[DimmCount]:
        for labels, where, source, ce, ue in self.groups:
            own = [self.dimms[x] for x in labels if x in self.dimms]
            ce_x = ce - sum(d.ce for d in own)
            ue_x = ue - sum(d.ue for d in own)
            if ce_x > 0 or ue_x > 0:
                self.add(" or ".join(labels), " or ".join(labels), where, source,
                         max(ce_x, 0), max(ue_x, 0))
        self.groups = []
        return list(self.dimms.values())


def from_sysfs(ev: MemoryEvidence, mcs: list[EdacMc]) -> None:
    ev.read.append("sysfs-edac" if mcs else "sysfs-edac (no controller)")
    for mc in mcs:
        for d in mc.dimms:
            label = d.label or f"{mc.name} {d.name}"
            ev.add(label, label, f"{mc.name}/{d.name}", "sysfs", d.ce, d.ue)
        if mc.ue_noinfo or mc.ce_noinfo:  # errors the driver could not pin on a DIMM
            ev.add(f"{mc.name} unknown", "unknown", mc.name, "sysfs", mc.ce_noinfo,
                   mc.ue_noinfo)


def from_edac_util(ctx: Context, ev: MemoryEvidence) -> None:
    proc = run_optional(ctx, ["edac-util", "-v"], "edac-util-v.txt")
    if proc is None:
        ev.not_read.append("edac-util: not installed")
        return
    if not proc.stdout.strip() and NO_MC.search(proc.stderr):
        ev.not_read.append("edac-util: no memory controller")  # as sysfs says: none
        return
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise CommandFailed(f"edac-util -v exited {proc.returncode}: "
                            f"{err[-1] if err else 'no output'}")
    for c in parse_edac_util(proc.stdout):
        if not c.csrow:
            if c.count:  # as sysfs: errors no DIMM owns, listed where there are some
                ev.add(f"{c.mc} unknown", "unknown", c.mc, "edac-util",
                       0 if c.uncorrected else c.count, c.count if c.uncorrected else 0)
            continue
        # a channel without a dimm_label prints as "ch<i>": sysfs's key for it is
        # "mcN csrowM/ch<i>" (read_edac), and "ch0" alone would merge every csrow's ch0
        labels = tuple(f"{c.mc} {c.csrow}/{x}" if _FALLBACK.match(x) else x for x in c.labels)
        ce, ue = (0, c.count) if c.uncorrected else (c.count, 0)
        ev.add_group(labels, f"{c.mc}/{c.csrow}", "edac-util", ce, ue)
    ev.read.append("edac-util")


def from_rasdaemon(ctx: Context, ev: MemoryEvidence) -> None:
    proc = run_optional(ctx, ["ras-mc-ctl", "--errors"], "ras-mc-ctl-errors.txt")
    if proc is None:
        ev.not_read.append("ras-mc-ctl: not installed")
        return
    if proc.returncode != 0 and no_database(proc.stderr):
        ev.not_read.append("ras-mc-ctl: rasdaemon has no event database (not recording)")
        return
    if proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise CommandFailed(f"ras-mc-ctl --errors exited {proc.returncode}: "
                            f"{err[-1] if err else 'no output'}")
    add_ras(ev, parse_ras_mc_errors(proc.stdout))
    ev.read.append("rasdaemon")


def add_ras(ev: MemoryEvidence, r: RasErrors) -> None:
    per: dict[tuple[tuple[str, ...], str], list[int]] = {}
    for e in r.mc:
        if e.kind == "Info":
            continue
        key = (e.labels, e.location.split(":")[0] if not e.labels else "")
        ce_ue = per.setdefault(key, [0, 0])
        ce_ue[1 if e.uncorrected else 0] += max(e.count, 1)  # "0 ... error(s)" is one
    for (labels, mc), (ce, ue) in per.items():
        if not labels:  # "any memory": no DIMM named, like the noinfo counts
            ev.add(f"mc{mc} unknown", "unknown", f"mc{mc}", "rasdaemon", ce, ue)
        else:
            ev.add_group(labels, "rasdaemon", "rasdaemon", ce, ue)
    for m in r.mce:
        if m.uncorrected is False:
            ev.mce_ce += 1
        else:  # a record whose severity nothing states is judged as uncorrected
            where = f"CPU {m.cpu} bank {m.bank}"
            ev.mce_uc[where] = ev.mce_uc.get(where, 0) + 1
    for x in r.extlog:
        if x.uncorrected:
            ev.extlog_uc[x.dimm or "unknown"] = ev.extlog_uc.get(x.dimm or "unknown", 0) + 1
