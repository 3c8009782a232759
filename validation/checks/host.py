"""Host CPU memory: DIMMs against the profile, EDAC and machine-check errors, bandwidth."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from validation.checks.common import m
from validation.checks.gpu_health import kernel_log
from validation.checks.memory_sources import (
    MemoryEvidence,
    from_edac_util,
    from_rasdaemon,
    from_sysfs,
    run_optional,
)
from validation.checks.registry import CheckSkipped, CommandFailed, Context, check
from validation.model import Measurement
from validation.probes.dmidecode import NO_SMBIOS, parse_dmidecode_memory
from validation.probes.host_memory import Dimm, parse_hw_errors, parse_smbios_memory, read_edac

SMBIOS_TABLE = "/sys/firmware/dmi/tables/DMI"
EDAC_MC = "/sys/devices/system/edac/mc"


@check("host.dimms",
       emits=("host.dimm_count", "host.memory_total_gib", "host.dimm_size_gib",
              "host.dimm_speed_mts", "host.dimm_part", "host.dimm_source"),
       needs=("bare-metal",), timeout_s=30,
       title="DIMMs: count, size and speed against the profile")
def host_dimms(ctx: Context) -> Iterator[Measurement]:
    slots, source = read_dimms(ctx)
    if not slots:
        raise CheckSkipped(f"the SMBIOS table has no memory device (type 17; read from {source})")
    yield m("host.dimm_source", source)
    fitted = [d for d in slots if d.populated]
    empty = [d.locator for d in slots if d.size_mib == 0]
    yield m("host.dimm_count", len(fitted), {"empty_slots": ",".join(empty) or "none"})
    yield m("host.memory_total_gib", round(sum(d.size_mib or 0 for d in fitted) / 1024, 1))
    for d in fitted:
        lab = {"dimm": d.locator, "serial": d.serial or "unknown"}
        if d.size_mib is not None:
            yield m("host.dimm_size_gib", round(d.size_mib / 1024, 1), lab)
        speed = d.configured_mts or d.speed_mts
        if speed is not None:
            yield m("host.dimm_speed_mts", speed, {**lab, "rated": str(d.speed_mts or "unknown")})
        yield m("host.dimm_part", d.part or "unknown", lab)


def read_dimms(ctx: Context) -> tuple[list[Dimm], str]:
    """The memory devices and where they were read: the kernel's copy of the SMBIOS table,
    else (no table: an old kernel, no permission) `dmidecode -t memory`, which decodes the
    same structures into the same records."""
    path = ctx.path(SMBIOS_TABLE)
    try:
        return parse_smbios_memory(path.read_bytes()), "smbios-table"
    except (FileNotFoundError, PermissionError) as exc:
        why = "missing" if isinstance(exc, FileNotFoundError) else "not readable"
    proc = run_optional(ctx, ["dmidecode", "-t", "memory"], "dmidecode-t-memory.txt")
    if proc is None:
        raise CheckSkipped(f"{path} {why} (no SMBIOS table: not root, or no DMI) and "
                           "dmidecode not installed")
    if proc.returncode != 0 or NO_SMBIOS.search(proc.stdout):
        if NO_SMBIOS.search(proc.stdout + proc.stderr):
            raise CheckSkipped(f"{path} {why} and dmidecode finds no SMBIOS table")
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise CommandFailed(f"dmidecode -t memory exited {proc.returncode}: "
                            f"{err[-1] if err else 'no output'} ({path} {why})")
    return parse_dmidecode_memory(proc.stdout), "dmidecode"


@check("host.memory_errors",
       emits=("host.edac_controllers", "host.edac_uncorrected", "host.edac_corrected",
              "host.mce_uncorrected", "host.mce_corrected", "host.memory_error_sources"),
       # EDAC is the host's memory controllers: a VM slice's guest has none
       metric_needs={"host.edac_uncorrected": ("bare-metal",),
                     "host.edac_corrected": ("bare-metal",)},
       timeout_s=60,
       title="host memory errors: EDAC corrected/uncorrected per DIMM, machine checks")
def host_memory_errors(ctx: Context) -> Iterator[Measurement]:
    mcs = read_edac(ctx.path(EDAC_MC))
    # informational: firmware-first platforms may run without an OS EDAC driver
    yield m("host.edac_controllers", len(mcs))
    ev = MemoryEvidence()
    from_sysfs(ev, mcs)
    from_edac_util(ctx, ev)
    from_rasdaemon(ctx, ev)
    for d in ev.resolve():  # the larger count of the sources per DIMM (memory_sources.py)
        lab = {"dimm": d.dimm, "edac": d.where, "source": "+".join(sorted(d.sources))}
        yield m("host.edac_uncorrected", d.ue, lab)
        yield m("host.edac_corrected", d.ce, lab)
    counts: dict[tuple[str, str, bool], int] = defaultdict(int)
    for e in parse_hw_errors(kernel_log(ctx)):
        where = e.dimm or (f"CPU {e.cpu} bank {e.bank}" if e.cpu else "unknown")
        counts[(e.source, where, bool(e.uncorrected))] += e.count
    ev.read.append("kernel-log")
    uc = {(s, w): n for (s, w, u), n in counts.items() if u}
    # rasdaemon's machine-check records span boots; this boot's are also in the kernel log:
    # the larger count per CPU and bank
    for where, n in ev.mce_uc.items():
        key = ("mce", where) if ("mce", where) in uc else ("rasdaemon", where)
        uc[key] = max(uc.get(key, 0), n)
    for where, n in ev.extlog_uc.items():
        uc[("rasdaemon-extlog", where)] = n
    for (source, where), n in sorted(uc.items()):
        yield m("host.mce_uncorrected", n, {"source": source, "mce_at": where})
    if not uc:
        yield m("host.mce_uncorrected", 0)
    yield m("host.mce_corrected", max(sum(v for k, v in counts.items() if not k[2]), ev.mce_ce))
    yield m("host.memory_error_sources", ",".join(ev.read),
            {"not_read": "; ".join(ev.not_read) or "none"})


@check("host.membw", emits=("host.membw_triad",),
       needs=("bare-metal",), timeout_s=300,
       title="host memory bandwidth per NUMA node (STREAM-like triad, numpy threads)")
def host_membw(ctx: Context) -> Iterator[Measurement]:
    try:
        from validation.workloads import membw
    except ModuleNotFoundError as exc:  # numpy is in the node venv; a bare python lacks it
        raise CheckSkipped(f"{exc.name} not installed") from None
    try:
        import numpy  # noqa: F401
    except ModuleNotFoundError:
        raise CheckSkipped("numpy not installed (node venv)") from None
    for r in membw.run():
        yield m("host.membw_triad", r.best_gbs,
                {"numa": str(r.node), "cores": str(r.threads),
                 "array_mib": str(r.array_bytes >> 20)})


def health_counters(ctx: Context) -> Iterator[tuple[str, dict[str, str], float]]:
    """Issue 16's counters for health.delta (start and end of the run): SXids per switch
    the driver lists, uncorrected EDAC errors per DIMM, uncorrected machine checks. The
    checks above run before the workloads; these catch what the burn-in breaks."""
    from validation.checks.nvswitch import nvswitches
    from validation.probes.nvswitch import bus_key, parse_sxids

    log = kernel_log(ctx)
    sxids = parse_sxids(log)
    for bus, minor in nvswitches(ctx).items():
        yield "sxid", {"nvswitch": minor, "bus_id": bus}, sum(bus_key(e.bus) == bus
                                                                 for e in sxids)
    for mc in read_edac(ctx.path(EDAC_MC)):
        for d in mc.dimms:
            yield "edac_uncorrected", {"dimm": d.label or f"{mc.name} {d.name}",
                                       "edac": f"{mc.name}/{d.name}"}, d.ue
    yield "mce_uncorrected", {}, sum(e.count for e in parse_hw_errors(log) if e.uncorrected)
