"""The Fabric Manager log, read since the run began: NVSwitch errors by switch and port.

`fabric.manager` asks systemd whether the daemon runs; this reads what it logged. An
NVSwitch error logged since the run began (ctx.started) is the run's: fatal and non-fatal
counts per switch and port are judged by the profile. Earlier entries (other sessions,
other boots: the file is appended across restarts, LOG_APPEND_TO_LOG) are history,
reported unjudged; the kernel's SXid lines of this boot are `nvswitch.sxid`'s. The runner
runs this check at the end of the run (runner.RUN_END_CHECKS), after the workloads.

Times: the file's (and the year-less syslog form's) are the node's local wall time
without a zone, so the run's start is turned into the node's local time to compare, on the
node that wrote them; an aware journal time is compared as it is. The log has whole
seconds: the start is taken down to its second, so an error in the run's first second
counts as the run's, never as history. (A wall clock set back during the run, or the hour
repeated when summer time ends, can misplace entries by that much: accepted.)
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from validation.checks.common import m
from validation.checks.fabric import NVSWITCH_DIR
from validation.checks.nvswitch import nvswitches
from validation.checks.registry import CheckSkipped, CommandFailed, Context, check
from validation.model import Measurement
from validation.probes.fabricmanager_log import FmEntry, log_file_name, parse_fm_log
from validation.probes.nvidia_smi import ParseError

FM_CONFIG = "/usr/share/nvidia/nvswitch/fabricmanager.cfg"
FM_LOG = "/var/log/fabricmanager.log"  # LOG_FILE_NAME's default
# the tail read from a large log: doubled until it reaches back before the run's start
TAIL_BYTES = 4 << 20
TAIL_MAX_BYTES = 64 << 20


def _tail(ctx: Context, path: str, since: datetime) -> str:
    """The end of the file, far enough back to hold every entry since `since` (a log of
    many boots can be a gigabyte: LOG_MAX_SIZE). More than TAIL_MAX_BYTES logged since
    the start is an error: what was not read is not "no errors"."""
    p = ctx.path(path)
    size = p.stat().st_size
    want = TAIL_BYTES
    while True:
        with p.open("rb") as fh:
            fh.seek(max(0, size - want))
            text = fh.read().decode(errors="replace")
        if want >= size:
            return text
        text = text.split("\n", 1)[1] if "\n" in text else ""  # the first line is cut
        try:
            first = parse_fm_log(text, datetime.now())[0].when
        except ParseError:
            first = None  # nothing readable in the tail yet: read further back
        if first is not None and _at_or_after(first, since) is False:
            return text
        if want >= TAIL_MAX_BYTES:
            raise CommandFailed(f"{p}: more than {TAIL_MAX_BYTES >> 20} MiB logged since the "
                                "run began; read only the tail, so the run's errors are not "
                                "all read")
        want *= 2


def _journal(ctx: Context) -> str:
    if str(ctx.sysroot) != "/":
        raise CheckSkipped("fabric manager logs to the journal (LOG_USE_SYSLOG=1), which a "
                           "simulated root does not have")
    # this boot's entries, with year and zone (short-iso): earlier boots are history anyway
    return ctx.run(["journalctl", "-u", "nvidia-fabricmanager", "-b", "-o", "short-iso",
                    "--no-pager", "-q"], timeout_s=30, artifact="fabricmanager-journal.txt")


def read_log(ctx: Context) -> str:
    """The log where fabricmanager.cfg sends it: LOG_FILE_NAME, else the journal."""
    name, syslog = (log_file_name(ctx.read(FM_CONFIG)) if ctx.path(FM_CONFIG).is_file()
                    else (None, False))
    if syslog:
        return _journal(ctx)
    path = name or FM_LOG
    try:
        return _tail(ctx, path, ctx.started)
    except FileNotFoundError:
        raise CheckSkipped(f"{ctx.path(path)} missing (fabric manager never logged)") from None
    except PermissionError as exc:
        raise CommandFailed(f"{ctx.path(path)} unreadable: {exc.strerror}") from None


def _at_or_after(when: datetime, started: datetime) -> bool:
    """Was an entry logged since the run began (see the module's note on times)?"""
    start = started.replace(microsecond=0)
    if when.tzinfo is not None:
        return when >= start
    return when >= start.astimezone().replace(tzinfo=None)


def _where(e: FmEntry, minors: dict[str, str]) -> dict[str, str]:
    lab = {"bus_id": e.bus or "unknown"}
    if e.bus in minors:
        lab["nvswitch"] = minors[e.bus]
    if e.physical_id is not None:
        lab["physical_id"] = str(e.physical_id)
    if e.port is not None:
        lab["port"] = str(e.port)
    return lab


@check("fabric.manager_log",
       emits=("fabricmanager.nvswitch_fatal", "fabricmanager.nvswitch_nonfatal",
              "fabricmanager.log_errors", "fabricmanager.log_history"),
       needs=("nvswitch", "fabric-manager"), timeout_s=60,
       title="Fabric Manager log since the run began: NVSwitch errors by switch and port")
def fabric_manager_log(ctx: Context) -> Iterator[Measurement]:
    entries = parse_fm_log(read_log(ctx), datetime.now())
    minors = nvswitches(ctx)  # bus id -> the driver's switch number
    run = [e for e in entries if _at_or_after(e.when, ctx.started)]
    history = [e for e in entries if e.is_error and not _at_or_after(e.when, ctx.started)]
    errors = [e for e in run if e.kind in ("nvswitch_fatal", "nvswitch_nonfatal")]
    if not minors and not errors:
        raise CheckSkipped(f"no NVSwitch listed in {NVSWITCH_DIR} nor named in the log")
    since = {"since": ctx.started.isoformat(timespec="seconds")}
    for kind, metric in (("nvswitch_fatal", "fabricmanager.nvswitch_fatal"),
                         ("nvswitch_nonfatal", "fabricmanager.nvswitch_nonfatal")):
        counts: dict[tuple[tuple[str, str], ...], list[FmEntry]] = {}
        for e in errors:
            if e.kind == kind:
                counts.setdefault(tuple(sorted(_where(e, minors).items())), []).append(e)
        named = {dict(k)["bus_id"] for k in counts}
        # a switch with no error since the start: one zero, so the limit is judged on it
        for bus, minor in minors.items():
            if bus not in named:
                counts[(("bus_id", bus), ("nvswitch", minor))] = []
        for key, found in sorted(counts.items()):
            sxids = ",".join(sorted({str(e.sxid) for e in found}))
            yield m(metric, len(found), {**dict(key), **since,
                                         **({"sxids": sxids} if sxids else {})})
    other = [e for e in run if e.kind == "error"]
    yield m("fabricmanager.log_errors", len(other),
            {**since, **({"last": other[-1].text[:200]} if other else {})})
    sessions = [e for e in entries if e.kind == "start"]
    yield m("fabricmanager.log_history", len(history),
            {"before": ctx.started.isoformat(timespec="seconds"),
             **({"last": f"{history[-1].when:%Y-%m-%d %H:%M:%S} {history[-1].text[:200]}"}
                if history else {}),
             **({"version": str(sessions[-1].version)} if sessions else {})})
