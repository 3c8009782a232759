"""edac-utils stand-in: `edac-util -v` (edac-utils 0.18 src/util/edac-util.c default_report).

libedac reads the csrow layout: the i10nm controllers' DIMMs as csrow = slot, one channel each
(the channel's dimm_label is the DIMM's), UE counted per csrow.
"""

from __future__ import annotations

import sys
from typing import Any

from .common import ToolError, load_state, run


def report(state: dict[str, Any]) -> str:
    dimms = [d for d in (state.get("host") or {}).get("dimms", []) if d.get("present", True)]
    lines = []
    total = 0
    for mc in sorted({d["mc"] for d in dimms}):
        lines += [f"mc{mc}: 0 Uncorrected Errors with no DIMM info",
                  f"mc{mc}: 0 Corrected Errors with no DIMM info"]
        for d in sorted((d for d in dimms if d["mc"] == mc), key=lambda d: d["mc_slot"]):
            cs = f"csrow{d['mc_slot']}"
            lines += [f"mc{mc}: {cs}: {d['ue']} Uncorrected Errors",
                      f"mc{mc}: {cs}: {d['locator']}: {d['ce']} Corrected Errors"]
            total += d["ue"] + d["ce"]
    if not lines:
        raise ToolError("edac-util: Error: No memory controller data found.", 0)
    if not total:
        lines.append("edac-util: No errors to report.")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv not in (["-v"], ["--verbose"]):
        raise ToolError("edac-util (hwsim stand-in, SIMULATED): only -v", 1)
    sys.stdout.write(report(load_state()))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
