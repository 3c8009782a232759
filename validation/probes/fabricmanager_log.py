"""The NVIDIA Fabric Manager log: NVSwitch errors, sessions and other error lines.

Fabric Manager writes LOG_FILE_NAME (fabricmanager.cfg; /var/log/fabricmanager.log by
default), one entry a line, in the node's local time with the year and no zone:

    [Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0
        on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33      (one line)
    [Jul 09 2024 18:14:07] [ERROR] [tid 12727] detected NVSwitch non-fatal error 12028 ...
    [Feb 25 2025 13:59:45] [INFO] [tid 1803] Received an inband message:  Message header ...
    Message payload details:Team release request: Team Handle:99c9f23d49236386 Flags:0

An entry may run over several lines (the inband message dumps above): a line without the
bracketed time belongs to the entry before it. With LOG_USE_SYSLOG=1 the entries go to the
journal of the nvidia-fabricmanager unit instead, read as `journalctl -o short-iso` (year
and zone: `2024-07-23T07:53:55+0000 host nv-fabricmanager[841]: ...`) or the classic
syslog form without a year (`Aug 27 07:13:21 host nv-fabricmanager[31082]: ...`), the
message with or without its `[ERROR] [tid N]` tags.

Read here: NVSwitch fatal / non-fatal errors (SXid number, fabric id, the switch's PCI bus
id and physical id, the port where the line names one), the session banner
(`Fabric Manager version V is running with the following configuration options`: a
start of Fabric Manager), `Successfully configured all the available GPUs and NVSwitches`,
and every other entry tagged ERROR/CRITICAL/FATAL (NVLink training and GPU registration
failures, multicast team failures: kept as `error` with its text). Any other entry is
`other`, never an error. Text with no entry of either shape is not a Fabric Manager log:
ParseError("unparsed ..."), never "no errors".

Timestamps are returned as read: naive local time (the file, the syslog form; the syslog
form without a year takes the latest year that does not put it after `now`, as syslog
readers do), aware where the journal gave a zone. Comparing them with a run's start is the
check's business.
Sources: leptonai/gpud components/accelerator/nvidia/fabric-manager (log_matcher.go,
log_parser.go, testdata/fabricmanager.log); NVIDIA Fabric Manager user guide (LOG_* options).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from validation.probes.nvidia_smi import ParseError
from validation.probes.nvswitch import bus_key

Kind = Literal["nvswitch_fatal", "nvswitch_nonfatal", "start", "configured", "error", "other"]

_FILE = re.compile(r"^\[([A-Z][a-z]{2} +\d{1,2} \d{4} \d{2}:\d{2}:\d{2})\]\s*(.*)$")
_ISO = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[+-]\d{2}:?\d{2}|Z))"
                  r"\s+\S+\s+([\w.@-]+)(?:\[\d+\])?:\s?(.*)$")
_SYSLOG = re.compile(r"^([A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2})\s+\S+\s+([\w.@-]+)"
                     r"(?:\[\d+\])?:\s?(.*)$")
# the unit's own processes: the daemon and its start script (systemd's lines are not its log)
_PROGRAMS = ("nv-fabricmanager", "nvidia-fabricmanager")
_TAG = re.compile(r"^\[([A-Za-z]+)\]\s*")
_TID = re.compile(r"^\[tid \d+\]\s*", re.I)
_NVSWITCH = re.compile(
    r"detected NVSwitch (fatal|non-fatal) error (\d+)(?: on fid (\d+))?"
    r"(?: on NVSwitch)? pci bus id ([0-9A-Fa-f:.]+)"
    r"(?: physical id (\d+))?(?: port (\d+))?", re.I)
_START = re.compile(r"Fabric Manager version (\S+) is running", re.I)
_CONFIGURED = re.compile(r"Successfully configured all the available GPUs and NVSwitches", re.I)
_ERROR_LEVELS = {"error", "critical", "fatal"}


@dataclass(frozen=True)
class FmEntry:
    when: datetime  # naive = the node's local time; aware where the journal gave a zone
    level: str  # ERROR, INFO, ... as tagged; "" where the line has no tag (syslog)
    kind: Kind
    text: str
    sxid: int | None = None
    bus: str | None = None  # 0000:86:00.0
    physical_id: int | None = None
    port: int | None = None
    version: str | None = None  # of a session start

    @property
    def is_error(self) -> bool:
        return self.kind in ("nvswitch_fatal", "nvswitch_nonfatal", "error")


def _year_less(stamp: str, now: datetime) -> datetime:
    when = datetime.strptime(f"{stamp} {now.year}", "%b %d %H:%M:%S %Y")
    # a year-less time a day or more after now is last year's (a log across New Year)
    return when.replace(year=now.year - 1) if when - now > timedelta(days=1) else when


def _iso(stamp: str) -> datetime:
    s = stamp.replace("Z", "+00:00")
    if re.search(r"[+-]\d{4}$", s):  # +0000 (short-iso before systemd 250) -> +00:00
        s = f"{s[:-2]}:{s[-2:]}"
    return datetime.fromisoformat(s)


def _entry(when: datetime, message: str) -> FmEntry:
    level = ""
    tag = _TAG.match(message)
    if tag and not _TID.match(message):
        level, message = tag.group(1).upper(), message[tag.end():]
    message = _TID.sub("", message, count=1).strip()
    m = _NVSWITCH.search(message)
    if m:
        return FmEntry(when, level, "nvswitch_fatal" if m.group(1).lower() == "fatal"
                       else "nvswitch_nonfatal", message, sxid=int(m.group(2)),
                       bus=bus_key(m.group(4)),
                       physical_id=int(m.group(5)) if m.group(5) else None,
                       port=int(m.group(6)) if m.group(6) else None)
    start = _START.search(message)
    if start:
        return FmEntry(when, level, "start", message, version=start.group(1))
    if _CONFIGURED.search(message):
        return FmEntry(when, level, "configured", message)
    return FmEntry(when, level, "error" if level.lower() in _ERROR_LEVELS else "other", message)


def parse_fm_log(text: str, now: datetime) -> list[FmEntry]:
    """Every entry of a Fabric Manager log file or journal, oldest first as written.

    now: the reader's local time, for syslog lines without a year. Lines that continue an
    entry (multi-line messages) or have neither shape are not entries; text with no entry
    at all raises ParseError."""
    out: list[FmEntry] = []
    for ln in text.splitlines():
        m = _FILE.match(ln)
        if m:
            try:
                when = datetime.strptime(re.sub(" +", " ", m.group(1)), "%b %d %Y %H:%M:%S")
            except ValueError:
                continue  # a bracketed time no calendar has: not an entry
            out.append(_entry(when, m.group(2)))
            continue
        j = _ISO.match(ln) or _SYSLOG.match(ln)
        if j and j.group(2).startswith(_PROGRAMS):
            try:
                when = _iso(j.group(1)) if j.re is _ISO else _year_less(
                    re.sub(" +", " ", j.group(1)), now)
            except ValueError:
                continue
            out.append(_entry(when, j.group(3)))
    if not out:
        head = next((ln for ln in text.splitlines() if ln.strip()), "")
        raise ParseError("unparsed fabric manager log: no entry in either the file's "
                         "([Mon DD YYYY HH:MM:SS]) or the journal's shape"
                         + (f" (first line: {head[:80]!r})" if head else " (empty)"))
    return out


def log_file_name(cfg_text: str) -> tuple[str | None, bool]:
    """fabricmanager.cfg -> (LOG_FILE_NAME or None where unset/empty, LOG_USE_SYSLOG on)."""
    values = {}
    for ln in cfg_text.splitlines():
        key, sep, value = ln.strip().partition("=")
        if sep and not key.startswith("#"):
            values[key.strip()] = value.strip()
    return values.get("LOG_FILE_NAME") or None, values.get("LOG_USE_SYSLOG", "0") == "1"
