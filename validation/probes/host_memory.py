"""Host memory: DIMMs from the SMBIOS table, EDAC error counts, machine-check log lines.

- DIMMs: /sys/firmware/dmi/tables/DMI (the kernel's copy of the SMBIOS structure table,
  what `dmidecode -t memory` decodes), type 17 "Memory Device" structures (DMTF DSP0134):
  0x0C size (MB; bit 15 set = KB; 0x7FFF = see 0x1C extended size in MB; 0 = empty slot;
  0xFFFF unknown), 0x10 device locator and 0x11 bank locator (string numbers), 0x15 speed
  (MT/s; 0xFFFF = see 0x54 extended speed, SMBIOS 3.3), 0x17 manufacturer, 0x18 serial,
  0x1A part number, 0x20 configured speed (2.7+; 0xFFFF = 0x58 extended). Structures of
  2.3-2.6 (length 0x1C-0x22) lack the later fields: they read as None.
- EDAC: /sys/devices/system/edac/mc/mcN/ (kernel Documentation/admin-guide/ras.rst):
  the dimmN/ (or rankN/) layout with dimm_label, dimm_location, size (MiB),
  dimm_ce_count, dimm_ue_count; the older csrowN/ layout with ch*_dimm_label,
  ch*_ce_count and ue_count; ce_noinfo_count/ue_noinfo_count for errors no DIMM owns.
- Machine checks: `mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 7: cc00008000010090`
  (arch/x86/kernel/cpu/mce/core.c __print_mce; "Machine Check Exception" for an exception;
  MCi_STATUS bit 61 UC = uncorrected), AMD's decoder record
  `[Hardware Error]: CPU:0 (19:1:1) MC15_STATUS[Over|CE|...]: 0xdc2040000000011b`
  (drivers/edac/mce_amd.c amd_decode_mce; the same bit 61), and firmware-first (APEI GHES,
  Dell/HPE default) records `{1}[Hardware Error]: event severity: corrected|recoverable|fatal`
  with a `DIMM location: ...` line (drivers/firmware/efi/cper.c).
- EDAC reports (drivers/edac/edac_mc.c edac_ce_error/edac_ue_error): `EDAC MC1: 3 CE
  memory read error on CPU_SrcID#0_Ha#0_Chan#0_DIMM#0 (channel:0 slot:0 ...)` (3 errors
  on that DIMM label; UE = uncorrected; "0 CE" is one); the record dump an Intel EDAC
  driver prints before its report (sb_edac, pnd2_edac, skx_edac/i10nm_edac's skx_common, at
  KERN_DEBUG: `EDAC sbridge MC1: CPU 0: Machine Check Event: 0 Bank 7: <MCi_STATUS>`) is
  the same error (one record with the report's count),
  and so are the report amd64_edac prints after mce_amd's decoding and the one ghes_edac
  prints after a firmware-first record.
  `Machine check events logged` (mce_notify_irq, with or without the `mce: ` prefix) only
  announces that records were handed to the log: it is not a record and is not counted.
  One record printed by two decoders (the kernel's line and AMD's decoding) at the same
  log time counts once; identical records at other times are other events, each counted.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

from validation.probes.nvidia_smi import ParseError


@dataclass(frozen=True)
class Dimm:
    locator: str  # device locator: the slot's silk-screen name ("A1", "PROC 1 DIMM 3")
    bank: str
    size_mib: int | None  # 0: no module in the slot; None: unknown
    speed_mts: int | None  # rated
    configured_mts: int | None  # what the memory controller runs it at
    manufacturer: str
    serial: str
    part: str

    @property
    def populated(self) -> bool:
        return bool(self.size_mib)


def clean_string(s: str) -> str:
    """An SMBIOS string as both readers give it: trimmed; "Not Specified" (what dmidecode
    prints for string number 0, and what some BIOSes store) is no string."""
    s = s.strip()
    return "" if s == "Not Specified" else s


def _strings(buf: bytes, start: int) -> tuple[list[str], int]:
    """The string set after a structure's formatted area; (strings, offset after it)."""
    end = buf.find(b"\x00\x00", start)
    if end < 0:
        raise ParseError("SMBIOS table: unterminated string set")
    raw = buf[start:end]
    return ([s.decode("ascii", "replace").strip() for s in raw.split(b"\x00")] if raw
            else []), end + 2


def parse_smbios_memory(buf: bytes) -> list[Dimm]:
    """Every type 17 structure of an SMBIOS structure table, in table order."""
    out = []
    off = 0
    while off + 4 <= len(buf):
        typ, length = buf[off], buf[off + 1]
        if length < 4 or off + length > len(buf):
            raise ParseError(f"SMBIOS table: bad structure length {length} at {off}")
        strings, nxt = _strings(buf, off + length)
        if typ == 17:
            out.append(_dimm(buf[off:off + length], strings))
        if typ == 127:  # end-of-table
            break
        off = nxt
    return out


def _dimm(s: bytes, strings: list[str]) -> Dimm:
    if len(s) < 0x15:
        raise ParseError(f"SMBIOS type 17 of length {len(s)} (SMBIOS 2.1+ needs 0x15)")

    def word(o: int) -> int | None:
        return struct.unpack_from("<H", s, o)[0] if len(s) >= o + 2 else None

    def dword(o: int) -> int | None:
        return struct.unpack_from("<I", s, o)[0] if len(s) >= o + 4 else None

    def string(o: int) -> str:
        n = s[o] if len(s) > o else 0
        return clean_string(strings[n - 1]) if 0 < n <= len(strings) else ""

    size: int = struct.unpack_from("<H", s, 0x0C)[0]  # always there: len(s) >= 0x15
    size_mib: int | None
    if size == 0xFFFF:
        size_mib = None
    elif size == 0x7FFF:
        ext = dword(0x1C)
        size_mib = (ext & 0x7FFFFFFF) if ext is not None else None
    else:
        kb = size & 0x7FFF
        # bit 15: KB granularity; a fitted sub-MiB module is not an empty slot
        size_mib = (max(1, kb // 1024) if kb else 0) if size & 0x8000 else size

    def speed(o: int, ext_o: int) -> int | None:
        v = word(o)
        if v == 0xFFFF:
            e = dword(ext_o)
            return (e & 0x7FFFFFFF) if e else None
        return v or None  # 0 = unknown

    return Dimm(locator=string(0x10), bank=string(0x11), size_mib=size_mib,
                speed_mts=speed(0x15, 0x54), configured_mts=speed(0x20, 0x58),
                manufacturer=string(0x17), serial=string(0x18), part=string(0x1A))


@dataclass(frozen=True)
class EdacDimm:
    mc: str  # mc0
    name: str  # dimm3, rank3, csrow2/ch1
    label: str  # dimm_label (the slot name where the BIOS or edac-utils set it)
    location: str
    size_mib: int | None
    ce: int
    ue: int


@dataclass(frozen=True)
class EdacMc:
    name: str
    ce: int
    ue: int
    ce_noinfo: int
    ue_noinfo: int
    dimms: tuple[EdacDimm, ...]


def _read_int(p: Path) -> int | None:
    try:
        return int(p.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _read_str(p: Path) -> str:
    try:
        return p.read_text().strip()
    except FileNotFoundError:
        return ""


def read_edac(mc_dir: Path) -> list[EdacMc]:
    """Every memory controller under /sys/devices/system/edac/mc (an absent dir: [])."""
    if not mc_dir.is_dir():
        return []
    out = []
    for mc in sorted(mc_dir.glob("mc[0-9]*"), key=lambda p: int(p.name[2:])):
        dimms = []
        for d in sorted([*mc.glob("dimm[0-9]*"), *mc.glob("rank[0-9]*")],
                        key=lambda p: (p.name.rstrip("0123456789"),
                                       int(re.sub(r"\D", "", p.name)))):
            dimms.append(EdacDimm(mc.name, d.name, _read_str(d / "dimm_label"),
                                  _read_str(d / "dimm_location"), _read_int(d / "size"),
                                  _read_int(d / "dimm_ce_count") or 0,
                                  _read_int(d / "dimm_ue_count") or 0))
        if not dimms:  # the csrow layout of older drivers: per channel CE, per csrow UE
            for cs in sorted(mc.glob("csrow[0-9]*"), key=lambda p: int(p.name[5:])):
                chans = sorted(cs.glob("ch[0-9]*_ce_count"))
                for i, ch in enumerate(chans):
                    n = ch.name.split("_")[0]
                    dimms.append(EdacDimm(mc.name, f"{cs.name}/{n}",
                                          _read_str(cs / f"{n}_dimm_label"), "",
                                          _read_int(cs / "size_mb"), _read_int(ch) or 0,
                                          (_read_int(cs / "ue_count") or 0) if i == 0 else 0))
        out.append(EdacMc(mc.name, _read_int(mc / "ce_count") or 0,
                          _read_int(mc / "ue_count") or 0,
                          _read_int(mc / "ce_noinfo_count") or 0,
                          _read_int(mc / "ue_noinfo_count") or 0, tuple(dimms)))
    return out


@dataclass(frozen=True)
class HwError:
    source: str  # mce | ghes
    uncorrected: bool | None  # None: the line does not say
    cpu: str
    bank: str
    dimm: str  # GHES "DIMM location" or the EDAC label, else ""
    text: str
    count: int = 1  # errors the record stands for (EDAC's "3 CE": three)


_MCE = re.compile(r"mce: \[Hardware Error\]: CPU (\d+): Machine Check( Exception)?: "
                  r"([0-9a-fA-F]+) Bank (\d+): ([0-9a-fA-F]+)")
_AMD = re.compile(r"\[Hardware Error\]: CPU:(\d+) \([0-9a-fA-F:]+\) MC(\d+)_STATUS"
                  r"\[[^\]]*\]: 0x([0-9a-fA-F]+)")
_GHES_SEV = re.compile(r"\{\d+\}\[Hardware Error\]:\s+event severity: (\w+)")
_GHES_DIMM = re.compile(r"\{\d+\}\[Hardware Error\]:.*DIMM location: ([^\n]+?)\s*$")
# An EDAC driver's dump of the record it decodes (sb_edac, pnd2_edac, skx_common):
# "EDAC sbridge MC1: CPU 0: Machine Check Event: 0 Bank 7: 8c00004000010090" ("Exception"
# while MCIP is set).
_EDAC_MCE = re.compile(r"EDAC [\w-]+ MC\d+: CPU (\d+): Machine Check (Event|Exception): "
                       r"(?:0x)?[0-9a-fA-F]+ Bank (\d+): (?:0x)?([0-9a-fA-F]+)")
# The EDAC core's report (drivers/edac/edac_mc.c edac_ce_error/edac_ue_error, kernel 3.6+):
# "EDAC MC1: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#0_DIMM#0 (channel:0 ...)".
_EDAC_MC = re.compile(r"EDAC MC\d+: (\d+) (CE|UE) (?:.*? )?on (.+?)(?: \(.*)?\s*$")
UC_BIT = 1 << 61


def _mce_record(ln: str) -> tuple[str, str, int, bool, str] | None:
    """(cpu, bank, MCi_STATUS, exception, decoder) of a kernel or AMD-decoder record line."""
    if m := _MCE.search(ln):
        return m.group(1), m.group(4), int(m.group(5), 16), bool(m.group(2)), "kernel"
    if m := _AMD.search(ln):
        return m.group(1), m.group(2), int(m.group(3), 16), False, "mce_amd"
    return None


# When a line was logged: dmesg's monotonic seconds (`[  333.200000]`, also inside a
# syslog or journal line), else the line's leading wall-clock time (syslog, ISO).
_LOG_TIME = re.compile(r"\[\s*(\d+\.\d+)\]|^\s*(\w{3}\s+\d+\s+[\d:]+|\d{4}-\d\d-\d\d[T ][\d:.,]+)")


def _log_time(ln: str) -> str | None:
    m = _LOG_TIME.search(ln)
    return (m.group(1) or m.group(2)) if m else None


def parse_hw_errors(text: str) -> list[HwError]:
    out: list[HwError] = []
    ghes: dict[str, object] | None = None
    # the last record: (cpu, bank, status), when it was logged, the decoders that printed it
    last_mce: tuple[tuple[str, str, int], str | None, set[str]] | None = None
    # EDAC drivers' record dumps waiting for the EDAC core's reports of them, oldest
    # first: sb_edac before 4.x queues records and reports them when polled, so a CMCI
    # storm prints a dozen dumps and then their dozen reports in the same order
    dumps: list[tuple[str, str, bool, str]] = []
    # the last kernel/AMD record, until an EDAC report of it among its own lines
    # (amd64_edac reports each record mce_amd decodes, within the decoding's lines)
    unreported: int | None = None

    def flush() -> None:
        nonlocal ghes
        if ghes is not None:
            out.append(HwError("ghes", bool(ghes["uc"]), "", "", str(ghes["dimm"]),
                               str(ghes["text"])))
            ghes = None

    for ln in text.splitlines():
        if "[Hardware Error]" not in ln and "EDAC" not in ln:
            unreported = None  # the record's lines ended without a report
        if e := _EDAC_MCE.search(ln):
            dumps.append((e.group(1), e.group(3),
                          e.group(2) == "Exception" or bool(int(e.group(4), 16) & UC_BIT),
                          ln.strip()))
            continue
        if r := _EDAC_MC.search(ln):
            # "0 CE" (skx_edac with no count in MCi_STATUS) is still one error logged
            count, kind, label = max(int(r.group(1)), 1), r.group(2), r.group(3).strip()
            if ghes is not None and not ghes["edac"]:
                # ghes_edac's report of the firmware's record just printed: counted there
                # (once: a repeat whose record the GHES cache kept quiet counts on its own)
                ghes["dimm"] = ghes["dimm"] or label
                ghes["edac"] = True
                continue
            if not dumps and unreported is not None:  # the report of that record
                rec_ = out[unreported]
                out[unreported] = HwError(rec_.source, rec_.uncorrected, rec_.cpu, rec_.bank,
                                          label, rec_.text, count)
                unreported = None
                continue
            cpu, bank = dumps.pop(0)[:2] if dumps else ("", "")
            out.append(HwError("edac", kind == "UE", cpu, bank, label, ln.strip(), count))
            continue
        rec = _mce_record(ln)
        if rec:
            cpu, bank, status, exception, decoder = rec
            key, when = (cpu, bank, status), _log_time(ln)
            # One record decoded twice (the kernel's own line and AMD's decoding of it) is
            # the same CPU/bank/status at the same log time from another decoder. The same
            # record again from a decoder that already printed it, or at another time, is
            # another event: a bank repeating one corrected error logs identical records.
            if (last_mce is not None and last_mce[0] == key and last_mce[1] == when
                    and decoder not in last_mce[2]):
                last_mce[2].add(decoder)
                continue
            out.append(HwError("mce", exception or bool(status & UC_BIT), cpu, bank, "",
                               ln.strip()))
            unreported = len(out) - 1
            last_mce = (key, when, {decoder})
            continue
        s = _GHES_SEV.search(ln)
        if s:
            flush()
            ghes = {"uc": s.group(1).lower() != "corrected", "dimm": "", "text": ln.strip(),
                    "edac": False}
            continue
        d = _GHES_DIMM.search(ln)
        if d and ghes is not None:
            ghes["dimm"] = d.group(1)
    flush()
    # a dump no report followed (the driver could not decode it): the record alone
    out.extend(HwError("edac", uc, cpu, bank, "", line) for cpu, bank, uc, line in dumps)
    return out
