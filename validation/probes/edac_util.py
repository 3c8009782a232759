"""`edac-util -v` (edac-utils src/util/edac-util.c default_report, 0.9-0.18).

edac-util reads the EDAC sysfs csrow layout through libedac: per memory controller
`mcN: <n> Uncorrected Errors with no DIMM info` / `... Corrected Errors with no DIMM info`, per
csrow `mcN: csrowM: <n> Uncorrected Errors` (0.9: `mcN: csrowM: <label0>|<label1>: <n>
Uncorrected Errors`), per channel `mcN: csrowM: <label>: <n> Corrected Errors` (the channel's
dimm_label, `ch<i>` where none is set). With `-v` every counter is printed, zeros included;
`edac-util: No errors to report.` follows when all are 0 (0.16+). No controller: nothing on
stdout, `edac-util: Error: No memory controller data found.` on stderr (exit 0).

A controller whose driver registers only the DIMM layer (no csrowN: skx/i10nm on some kernels,
grondo/edac-utils issue 15) shows its noinfo lines alone: edac-util then cannot see the per-DIMM
counts, so its zeros never lower what sysfs reads (the check takes the larger per DIMM).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from validation.probes.nvidia_smi import ParseError


@dataclass(frozen=True)
class EdacUtilCount:
    mc: str  # mc0
    csrow: str  # csrow2; "" for the controller's noinfo counts
    labels: tuple[str, ...]  # the channel's label (CE); the csrow's labels (UE); () noinfo
    uncorrected: bool
    count: int


_NOINFO = re.compile(r"^(mc\d+): (\d+) (Uncorrected|Corrected) Errors with no DIMM info$")
_CSROW_UE = re.compile(r"^(mc\d+): (csrow\d+): (?:(.*?): )?(\d+) Uncorrected Errors$")
_CHAN_CE = re.compile(r"^(mc\d+): (csrow\d+): (.+?): (\d+) Corrected Errors$")
NO_ERRORS = "edac-util: No errors to report."
NO_MC = re.compile(r"No memory controller data found")


def parse_edac_util(text: str) -> list[EdacUtilCount]:
    """Every count `edac-util -v` printed; csrow UE counts carry the labels of that csrow's
    channels (the kernel counts UE per csrow, not per channel)."""
    out: list[EdacUtilCount] = []
    seen = False
    for raw in text.splitlines():
        ln = raw.strip()
        if not ln:
            continue
        if ln == NO_ERRORS:
            seen = True
            continue
        if m := _NOINFO.match(ln):
            out.append(EdacUtilCount(m.group(1), "", (), m.group(3) == "Uncorrected",
                                     int(m.group(2))))
        elif m := _CSROW_UE.match(ln):
            old = tuple(x for x in (m.group(3) or "").split("|") if x)
            out.append(EdacUtilCount(m.group(1), m.group(2), old, True, int(m.group(4))))
        elif m := _CHAN_CE.match(ln):
            out.append(EdacUtilCount(m.group(1), m.group(2), (m.group(3),), False,
                                     int(m.group(4))))
        else:
            raise ParseError(f"unparsed edac-util output: {ln[:120]!r}")
        seen = True
    if not seen:
        raise ParseError("unparsed edac-util output: no counts and no 'No errors' statement")
    # 0.16+: a csrow's UE line names no DIMM; its channels' CE lines do
    chans: dict[tuple[str, str], list[str]] = {}
    for c in out:
        if c.csrow and not c.uncorrected:
            chans.setdefault((c.mc, c.csrow), []).extend(c.labels)
    return [EdacUtilCount(c.mc, c.csrow, tuple(chans.get((c.mc, c.csrow), ())), True, c.count)
            if c.uncorrected and c.csrow and not c.labels else c for c in out]
