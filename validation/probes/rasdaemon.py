"""rasdaemon's error database as `ras-mc-ctl --errors` prints it (rasdaemon util/ras-mc-ctl.in).

rasdaemon records the kernel's RAS trace events in sqlite (/var/lib/rasdaemon/ras-mc_event.db)
and keeps them across reboots, so an error it recorded stays an error after the EDAC sysfs
counters reset. `--errors` prints one section per table, each a header (`Memory controller
events:`, `MCE events:`, `Extlog events:`, `PCIe AER events:`, ...) and one row per event
starting with its id and time, or the section's statement that it has none (`No Memory
errors.`, `No MCE errors.`, `No SIGNAL event.`); 0.4.x prints the memory header alone when the
table is empty. Sections other than these three are not memory and are skipped (AER: PCIe).

- memory controller (ras:mc_event, 0.4-0.8.x): `<id> <time> <count> <type> error(s): <msg>
  at <label> location: <mc>:<top>:<mid>:<low>, addr ..., grain ..., syndrome ... <detail>`;
  type Corrected / Uncorrected / Deferred / Fatal / Info (ras-mc-handler.c); the label is the
  DIMM's EDAC label, several joined by " or " when the driver could not pick one, `any memory`
  when it names none.
- MCE (mce_record): `<id> <time> error: <msg>, CPU <vendor>, bank <name>, mcg ..., mci <text>,
  ..., status=0x<MCi_STATUS>, ..., cpu=0x<n>, ..., bank=0x<n>`; `cpu=` and `bank=` are left
  out when 0 (perl's `if ($cpu)`); MCi_STATUS bit 61 = uncorrected. A row a terminal wrapped
  continues on the next lines (they do not start with an id).
- Extlog (extlog_mem_event): `<id> <time> error: type=..., severity=<recoverable|fatal|
  corrected|informational>, address=..., fru_id=..., fru_text='<DIMM>', ...`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from validation.probes.nvidia_smi import ParseError

UC_BIT = 1 << 61


@dataclass(frozen=True)
class RasMcEvent:
    count: int
    kind: str  # Corrected, Uncorrected, Deferred, Fatal, Info
    labels: tuple[str, ...]  # the DIMM label(s); () for "any memory"
    location: str  # mc:top:mid:low

    @property
    def uncorrected(self) -> bool:
        # Deferred: an uncorrectable error the hardware deferred (AMD); Info is no error
        return self.kind in ("Uncorrected", "Fatal", "Deferred")


@dataclass(frozen=True)
class RasMce:
    cpu: int
    bank: int
    uncorrected: bool | None  # None: neither the status nor the text says
    text: str


@dataclass(frozen=True)
class RasExtlog:
    severity: str
    dimm: str

    @property
    def uncorrected(self) -> bool:
        return self.severity in ("recoverable", "fatal", "unknown-severity")


@dataclass(frozen=True)
class RasErrors:
    mc: tuple[RasMcEvent, ...]
    mce: tuple[RasMce, ...]
    extlog: tuple[RasExtlog, ...]


_HEADER = re.compile(r"^[A-Za-z][\w ()/.-]* (?:events|errors|records):$")
_NONE = re.compile(r"^No [\w ()/.-]+\.$")
_ROW = re.compile(r"^(\d+) ")
_MC = re.compile(r"^\d+ .*? (\d+) (\w+) error\(s\): (.*) at (.*?) location: "
                 r"(-?\d+:-?\d+:-?\d+:-?\d+)(?:,|$)")
_STATUS = re.compile(r"\bstatus=0x([0-9a-fA-F]+)")
_CPU = re.compile(r"\bcpu=0x([0-9a-fA-F]+)")
_BANK = re.compile(r"\bbank=0x([0-9a-fA-F]+)")
_EXTLOG = re.compile(r"\bseverity=([\w-]+),.*?fru_text='([^']*)'")
# where neither status= nor the row's words say, rasdaemon's own decodings do
_UC_WORDS = re.compile(r"Uncorrected|\bUECC\b|\bUC\b|Fatal", re.I)
_CE_WORDS = re.compile(r"Corrected error|Corrected_error|\bCECC\b")


def parse_ras_mc_errors(text: str) -> RasErrors:
    """Every memory-controller, MCE and Extlog event; ParseError for anything else."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    memory_seen = False
    for raw in text.splitlines():
        ln = raw.strip()
        if not ln:
            continue
        if _NONE.match(ln):
            memory_seen |= ln == "No Memory errors."
            current = None
            continue
        if _HEADER.match(ln) and not _ROW.match(ln):
            current = sections.setdefault(ln[:-1], [])
            memory_seen |= ln == "Memory controller events:"
            continue
        if current is None:
            raise ParseError(f"unparsed ras-mc-ctl --errors output: {ln[:120]!r}")
        if _ROW.match(ln):
            current.append(ln)
        elif current:  # a wrapped row: the rest of the one before
            current[-1] += " " + ln
        else:
            raise ParseError(f"unparsed ras-mc-ctl --errors output: {ln[:120]!r}")
    if not memory_seen:
        raise ParseError("unparsed ras-mc-ctl --errors output: no memory controller section "
                         "(neither 'Memory controller events:' nor 'No Memory errors.')")
    return RasErrors(tuple(_mc_row(r) for r in sections.get("Memory controller events", [])),
                     tuple(_mce_row(r) for r in sections.get("MCE events", [])),
                     tuple(_extlog_row(r) for r in sections.get("Extlog events", [])))


def _mc_row(row: str) -> RasMcEvent:
    m = _MC.match(row)
    if not m:
        raise ParseError(f"unparsed ras-mc-ctl memory controller event: {row[:160]!r}")
    label = m.group(4).strip()
    labels = () if label in ("", "any memory") else tuple(
        x.strip() for x in label.split(" or ") if x.strip())
    return RasMcEvent(int(m.group(1)), m.group(2), labels, m.group(5))


def _mce_row(row: str) -> RasMce:
    if " error: " not in row:
        raise ParseError(f"unparsed ras-mc-ctl MCE event: {row[:160]!r}")
    st = _STATUS.search(row)
    cpu, bank = _CPU.search(row), _BANK.search(row)
    uc: bool | None
    if st:
        uc = bool(int(st.group(1), 16) & UC_BIT)
    elif _UC_WORDS.search(row):
        uc = True
    elif _CE_WORDS.search(row):
        uc = False
    else:
        uc = None
    return RasMce(int(cpu.group(1), 16) if cpu else 0, int(bank.group(1), 16) if bank else 0,
                  uc, row)


def _extlog_row(row: str) -> RasExtlog:
    m = _EXTLOG.search(row)
    if not m:
        raise ParseError(f"unparsed ras-mc-ctl Extlog event: {row[:160]!r}")
    return RasExtlog(m.group(1), m.group(2).strip())


# rasdaemon installed but not recording: ras-mc-ctl finds no database or no mc_event table
# (0.6.x+: "mc_event table missing from <db>. Run 'rasdaemon --record'."; older ones die in
# DBI: "no such table: mc_event", "unable to open database file").
NO_DATABASE = re.compile(r"table missing from|no such table: mc_event|unable to open database")


def no_database(stderr: str) -> bool:
    return bool(NO_DATABASE.search(stderr))
