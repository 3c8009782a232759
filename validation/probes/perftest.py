"""perftest (`ib_write_bw`, `ib_read_bw`, `ib_send_bw`) bandwidth reports, read by their header.

The result table (perftest's src/perftest_parameters.c, REPORT_FMT):
  ` #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]`
  ` 8388608    5000             391.25             390.87               0.005824`
With --report_gbits the BW columns are Gb/sec; without it they are MB/sec (2^20 bytes/s),
converted here to Gb/s. Duration runs (-D) print `#iterations` as the count done. No header or
no matching row raises ParseError("unparsed ..."): never a 0 Gb/s link.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from validation.probes.nvidia_smi import ParseError

_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(Gb|MB|MiB)/sec\]\s+"
                     r"BW average\[(Gb|MB|MiB)/sec\]\s+MsgRate\[Mpps\]")


@dataclass(frozen=True)
class BwRow:
    size_bytes: int
    iterations: int
    peak_gbps: float
    avg_gbps: float
    msg_rate_mpps: float


def _gbps(value: float, unit: str) -> float:
    return value if unit == "Gb" else value * (1 << 20) * 8 / 1e9


def parse_bw(text: str) -> list[BwRow]:
    unit = None
    rows: list[BwRow] = []
    for line in text.splitlines():
        if h := _HEADER.search(line):
            unit = h.group(2)
            continue
        toks = line.split()
        if unit is None or len(toks) != 5 or not toks[0].isdigit():
            continue
        try:
            rows.append(BwRow(int(toks[0]), int(toks[1]), round(_gbps(float(toks[2]), unit), 2),
                              round(_gbps(float(toks[3]), unit), 2), float(toks[4])))
        except ValueError:
            continue
    if not rows:
        what = "no result header (#bytes #iterations BW peak ...)" if unit is None \
            else "no row under the result header"
        raise ParseError(f"unparsed perftest output: {what}")
    return rows
