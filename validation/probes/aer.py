"""PCIe Advanced Error Reporting counters from sysfs (one device's aer_dev_* files).

Format (kernel Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats, drivers/pci/pcie/
aer.c `aer_stats_dev_attr`): one `<error name> <count>` line per error bit the kernel knows,
then `TOTAL_ERR_COR` / `TOTAL_ERR_NONFATAL` / `TOTAL_ERR_FATAL`. Kernels differ in which
names they list (4.19 first had the files; later ones added e.g. `HeaderOF`, `TLPBlockedErr`,
`PoisonTLPBlocked`), so names are kept as found and the total is the TOTAL_ERR_* line, or the
sum of the lines where a kernel printed none. A device without an AER capability, or a
kernel built without CONFIG_PCIEAER, has no files: not measured, never zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from validation.probes.nvidia_smi import ParseError

# file -> severity name used in measurements
AER_FILES = {"aer_dev_correctable": "correctable", "aer_dev_nonfatal": "nonfatal",
             "aer_dev_fatal": "fatal"}


@dataclass(frozen=True)
class AerCounts:
    total: int
    by_error: dict[str, int] = field(default_factory=dict)


def parse_aer(text: str) -> AerCounts:
    """One aer_dev_* file -> its total and the count per error name."""
    by_error: dict[str, int] = {}
    total: int | None = None
    for ln in text.splitlines():
        if not ln.strip():
            continue
        m = re.match(r"^\s*(\S+)\s+(\d+)\s*$", ln)
        if not m:
            raise ParseError(f"unparsed AER counter line: {ln.strip()[:80]!r}")
        if m.group(1).startswith("TOTAL_ERR_"):
            total = int(m.group(2))
        else:
            by_error[m.group(1)] = int(m.group(2))
    if total is None and not by_error:
        raise ParseError("unparsed AER counters: empty file")
    return AerCounts(total if total is not None else sum(by_error.values()), by_error)


def read_aer(device_dir: Path) -> dict[str, AerCounts]:
    """{severity: counts} of one PCI device directory; {} where the kernel exposes no AER."""
    out = {}
    for name, severity in AER_FILES.items():
        try:
            text = (device_dir / name).read_text()
        except OSError:
            continue
        out[severity] = parse_aer(text)
    return out
