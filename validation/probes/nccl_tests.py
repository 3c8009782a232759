"""nccl-tests `<coll>_perf` output, read by its own column header.

Layouts (from nccl-tests' src/*.cu print_header and src/common.cu):
- 2.13 and later: one header for every test, `size count type redop root time algbw
  busbw #wrong time algbw busbw #wrong`, and a `# Collective test starting:` banner;
- 2.0 to 2.11: each test prints its own header: all_reduce/reduce_scatter `size count
  type redop`, broadcast/reduce `... root`, all_gather/alltoall/sendrecv `size count
  type`, then `time algbw busbw error` twice, where `error` is the largest deviation
  (a float such as 0e+00), not a count of wrong elements.
Rows are matched to the header that precedes them, so both read the same. Output with
no header, or a header whose rows never match it, is not "no results": it raises
ParseError("unparsed ...") and the check reports it as such, never as a slow fabric.
"""

from __future__ import annotations

import re

from validation.probes.nvidia_smi import ParseError
from validation.workloads.busbw import NcclTestsRow

_BANNER = re.compile(r"^# Collective test starting: (\w+)_perf")
_LEAD = ("size", "count", "type")
_OPTIONAL = ("redop", "root")
_TAIL = ("time", "algbw", "busbw")


def _header(line: str) -> list[str] | None:
    words = line.lstrip("#").split()
    if words[:3] != list(_LEAD) or "time" not in words:
        return None
    return words


def _wrong(column: str, tok: str) -> int | None:
    if tok == "N/A" or column != "#wrong":
        return None  # "error" is a deviation, not a count of wrong elements
    return int(tok)


def parse(text: str, op: str | None = None) -> tuple[list[NcclTestsRow], str]:
    """Rows and the layout they were read with ("2.13+" or "pre-2.13")."""
    rows: list[NcclTestsRow] = []
    cols: list[str] | None = None
    layout = ""
    unmatched = 0
    for line in text.splitlines():
        if m := _BANNER.match(line):
            op = m.group(1)
            continue
        if line.startswith("#"):
            found = _header(line)
            if found:
                cols = found
                layout = "2.13+" if "#wrong" in cols else "pre-2.13"
            continue
        toks = line.split()
        if not toks or not toks[0].isdigit():
            continue
        if cols is None or len(toks) != len(cols):
            unmatched += 1
            continue
        head = [c for c in cols if c not in _TAIL and c not in ("#wrong", "error")]
        if [c for c in head if c not in _LEAD + _OPTIONAL]:
            unmatched += 1
            continue
        n = len(head)
        oop, ip = toks[n:n + 4], toks[n + 4:n + 8]
        wcol = cols[n + 3]
        try:
            rows.append(NcclTestsRow(
                op=op or "unknown", size_bytes=int(toks[0]), dtype=toks[2],
                oop_time_us=float(oop[0]), oop_algbw=float(oop[1]), oop_busbw=float(oop[2]),
                oop_wrong=_wrong(wcol, oop[3]), ip_time_us=float(ip[0]),
                ip_algbw=float(ip[1]), ip_busbw=float(ip[2]), ip_wrong=_wrong(wcol, ip[3]),
            ))
        except (ValueError, IndexError):
            unmatched += 1
    if not rows:
        what = ("no column header (size count type ... time algbw busbw)" if cols is None
                else f"{unmatched} row(s) did not match the header {' '.join(cols)}")
        raise ParseError(f"unparsed nccl-tests output: {what}")
    return rows, layout
