"""nccl-tests `<coll>_perf` output, read by its own column header.

Layouts (from nccl-tests' src/*.cu print_header, src/common.cu and, from 2.17.4,
src/util.cu writeResultHeader / writeBenchmarkLine*):
- 1.0: per-test headers `bytes N type [op] [root] time algbw busbw res` (time in ms; `res`
  the largest deviation), twice, or once (broadcast: out-of-place only);
- 2.0 to 2.11: per-test headers `size count type [redop] [root] time algbw busbw error`
  twice (time in us; `error` a deviation such as 0e+00, not a count). 2.10/2.11 alltoall
  names a `redop` column its rows leave blank;
- 2.13 and later: one header, `size count type redop root time algbw busbw #wrong` twice,
  and a `# Collective test starting:` banner. 2.13.0-2.13.3 rows of all_gather, alltoall,
  broadcast, gather, scatter (and hypercube in every version) leave `redop` blank; later
  ones print `none`. `-C 1` names the time column `cputime`; 2.19 `-R`-style per-iteration
  timing adds `i_min i_max i_p99 i_cv%` to each half; `--report_timestamps` (2.18+) adds a
  `timestamp` column (a date and a time) after the in-place half.
Rows are matched to the header that precedes them. Output with no header, a header with
columns none of these layouts has, or rows that never match their header is not "no
results": it raises ParseError("unparsed ...") and the check reports it as such, never as
a slow fabric. Nothing here raises anything else.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from validation.probes.nvidia_smi import ParseError
from validation.workloads.busbw import NcclTestsRow

_BANNER = re.compile(r"^# Collective test starting: (\w+)_perf")
_LEADS = (("size", "count", "type"), ("bytes", "N", "type"))  # 2.x, 1.0
_OPTIONAL = ("redop", "op", "root")
_REDOP = ("redop", "op")
_GROUP = ("algbw", "busbw")
_WRONG = ("#wrong", "error", "res")
_PER_ITER = ("i_min", "i_max", "i_p99", "i_cv%")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")


@dataclass(frozen=True)
class Layout:
    columns: tuple[str, ...]  # the header's words, as printed
    optional: tuple[str, ...]  # redop / op / root, in header order
    group: int  # columns per half: time algbw busbw wrong [+ 4 per-iteration]
    halves: int  # 2 (out-of-place, in-place) or 1 (1.0 broadcast)
    wrong: str  # "#wrong" (a count) or "error"/"res" (a deviation)
    time_scale: float  # to microseconds (1.0 printed milliseconds)
    timestamp: bool

    @property
    def name(self) -> str:
        if self.time_scale != 1.0:
            return "1.x"
        return "2.13+" if self.wrong == "#wrong" else "pre-2.13"


def _half(words: list[str]) -> tuple[int, str] | None:
    """(width, wrong column) of one half's columns at the start of `words`."""
    if len(words) < 4 or words[0] not in ("time", "cputime") or tuple(words[1:3]) != _GROUP:
        return None
    if words[3] not in _WRONG:
        return None
    return (8, words[3]) if tuple(words[4:8]) == _PER_ITER else (4, words[3])


def _layout(line: str) -> Layout | tuple[str, ...] | None:
    """A header line's layout; its words where it looks like a header of no known layout
    (rows under it are then unmatched); None for any other comment line."""
    words = line.lstrip("#").split()
    if tuple(words[:3]) not in _LEADS or not any(w in ("time", "cputime") for w in words):
        return None
    rest = words[3:]
    optional = []
    while rest and rest[0] in _OPTIONAL:
        optional.append(rest.pop(0))
    halves, group, wrong = 0, 0, ""
    while (half := _half(rest)) and halves < 2 and (not halves or half == (group, wrong)):
        group, wrong = half
        rest = rest[group:]
        halves += 1
    timestamp = rest == ["timestamp"]
    if not halves or (rest and not timestamp):
        return tuple(words)
    return Layout(tuple(words), tuple(optional), group, halves, wrong,
                  1000.0 if words[0] == "bytes" else 1.0, timestamp)


def _optional_ok(names: tuple[str, ...], toks: list[str]) -> bool:
    """The tokens between `type` and the figures fit the header's optional columns: all
    of them, or all but a blank redop (rows of some versions print "" there)."""
    if len(toks) == len(names) - 1 and names and names[0] in _REDOP:
        names = names[1:]
    if len(toks) != len(names):
        return False
    for name, tok in zip(names, toks, strict=True):
        if not re.fullmatch(r"-?\d+" if name == "root" else r"[A-Za-z_]\w*", tok):
            return False
    return True


def _wrong(column: str, tok: str) -> int | None:
    if tok == "N/A" or column != "#wrong":
        return None  # "error"/"res" is a deviation, not a count of wrong elements
    return int(float(tok))  # printed with %g: 1e+06 for a million wrong elements


def _row(lay: Layout, toks: list[str], op: str) -> NcclTestsRow | None:
    if lay.timestamp and len(toks) >= 2 and _TIMESTAMP.fullmatch(" ".join(toks[-2:])):
        toks = toks[:-2]
    figures = lay.group * lay.halves
    body = toks[3:]
    if len(body) < figures or not _optional_ok(lay.optional, body[:len(body) - figures]):
        return None
    tail = body[len(body) - figures:]
    oop = tail[:4]
    ip = tail[lay.group:lay.group + 4] if lay.halves == 2 else None
    s = lay.time_scale
    nan = math.nan  # 1.0 broadcast ran out-of-place only: no in-place figures
    return NcclTestsRow(
        op=op, size_bytes=int(toks[0]), dtype=toks[2],
        oop_time_us=float(oop[0]) * s, oop_algbw=float(oop[1]), oop_busbw=float(oop[2]),
        oop_wrong=_wrong(lay.wrong, oop[3]),
        ip_time_us=float(ip[0]) * s if ip else nan, ip_algbw=float(ip[1]) if ip else nan,
        ip_busbw=float(ip[2]) if ip else nan, ip_wrong=_wrong(lay.wrong, ip[3]) if ip else None,
    )


def parse(text: str, op: str | None = None) -> tuple[list[NcclTestsRow], str]:
    """Rows and the layout they were read with ("2.13+", "pre-2.13" or "1.x")."""
    rows: list[NcclTestsRow] = []
    lay: Layout | tuple[str, ...] | None = None
    layout = ""
    unmatched = 0
    for line in text.splitlines():
        if m := _BANNER.match(line):
            op = m.group(1)
            continue
        if line.startswith("#"):
            found = _layout(line)
            if found is not None:
                lay = found
                layout = found.name if isinstance(found, Layout) else layout
            continue
        toks = line.split()
        if not toks or not toks[0].isdigit():
            continue
        row = None
        if isinstance(lay, Layout):
            try:
                row = _row(lay, toks, op or "unknown")
            except (ValueError, IndexError):
                row = None
        if row is None:
            unmatched += 1
        else:
            rows.append(row)
    if not rows:
        what = ("no column header (size count type ... time algbw busbw)" if lay is None
                else f"{unmatched} row(s) did not match the header "
                     f"{' '.join(lay.columns if isinstance(lay, Layout) else lay)}")
        raise ParseError(f"unparsed nccl-tests output: {what}")
    return rows, layout
