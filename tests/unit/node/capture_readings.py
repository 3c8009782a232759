"""What every committed capture reads as: each tool's real output (tests/fixtures/field/,
tests/fixtures/hgx-h200-2gpu/) through its parser, as JSON.

    PYTHONPATH=$PWD .venv/bin/python tests/unit/node/capture_readings.py   # rewrite the record

tests/unit/node/test_capture_readings.py holds every capture to its recorded reading, so a
parser change that reads any capture differently shows as a failing test and, once meant,
as a diff of tests/fixtures/capture-readings.json.xz that its commit explains.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import lzma
import math
import sys
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path
from typing import Any

from rackready.site.paths import PROJECT_ROOT as REPO

FIXTURES = REPO / "tests" / "fixtures"
RECORD = FIXTURES / "capture-readings.json.xz"
# the fabric manager log prints no year: read as of this date, so the record never moves
AS_OF = datetime(2026, 12, 5)  # naive: the log's local time, as the check passes it


def _parsers() -> list[tuple[str, Callable[[bytes], Any]]]:
    """(glob under tests/fixtures, parser of the file's bytes), first match wins."""
    from validation.probes import (
        aer,
        dcgm_discovery,
        dcgm_health,
        dmidecode,
        edac_util,
        fabricmanager_log,
        host_memory,
        kernel_log,
        nccl_tests,
        nvidia_smi,
        nvswitch,
        rasdaemon,
        system,
    )

    def text(fn: Callable[[str], Any]) -> Callable[[bytes], Any]:
        return lambda b: fn(b.decode())

    return [
        ("field/dcgm/discovery-*.txt", text(dcgm_discovery.parse_discovery)),
        ("field/dcgm/health-c-text-*.txt", text(dcgm_health.parse_health_text)),
        ("field/dcgm/health-j-*.json", text(dcgm_health.parse_health_json)),
        ("field/dmidecode/*.txt", text(dmidecode.parse_dmidecode_memory)),
        ("field/edac-util/*.txt", text(edac_util.parse_edac_util)),
        ("field/fabricmanager/*", text(lambda t: fabricmanager_log.parse_fm_log(t, AS_OF))),
        ("field/kernel-log/edac-*.txt", text(host_memory.parse_hw_errors)),
        ("field/kernel-log/sxid-*.txt", text(nvswitch.parse_sxids)),
        ("field/kernel-log/xid-*.txt", text(kernel_log.parse_xids)),
        ("field/nccl-tests/*.txt", text(nccl_tests.parse)),
        ("field/pcie/aer_dev_*.txt", text(aer.parse_aer)),
        # a fragment (the MCE section alone, as the thread pasted it): read after the memory
        # section ras-mc-ctl prints first, as test_memory_sources.py reads it
        ("field/rasdaemon/mcelog-116-*.txt",
         text(lambda t: rasdaemon.parse_ras_mc_errors("No Memory errors.\n\n" + t))),
        ("field/rasdaemon/*.txt", text(rasdaemon.parse_ras_mc_errors)),
        ("field/smbios/*.dump-bin", host_memory.parse_smbios_memory),
        ("hgx-h200-2gpu/nccl-tests-*.txt", text(nccl_tests.parse)),
        ("hgx-h200-2gpu/nvidia-smi-q-x.xml", text(nvidia_smi.parse_query_xml)),
        ("hgx-h200-2gpu/nvidia-smi-topo-m.txt", text(nvidia_smi.parse_topo)),
        ("hgx-h200-2gpu/nvidia-smi-nvlink-s.txt", text(nvidia_smi.read_nvlink_status)),
        ("hgx-h200-2gpu/nvidia-smi-nvlink-e.txt", text(nvidia_smi.parse_nvlink_errors)),
        ("hgx-h200-2gpu/nvidia-smi-*.csv", text(nvidia_smi.parse_query_csv)),
        ("hgx-h200-2gpu/numactl-H.txt", text(system.parse_numactl)),
        ("hgx-h200-2gpu/lscpu.txt", text(system.parse_lscpu)),
        ("hgx-h200-2gpu/sysfs-pci.txt", text(system.parse_pci_summary)),
        ("hgx-h200-2gpu/proc-driver-nvidia.txt", text(system.parse_driver_version)),
    ]


# captures no parser of the suite reads, and why (a new capture must land in one list)
NOT_READ = {
    "field/pcie/nccl-topo-*.xml": "NCCL's topology dump: checks hwsim's PCIe tree, not a node "
                                  "tool's output",
    "hgx-h200-2gpu/nvidia-smi-q.txt": "the text form of -q; the suite reads -q -x",
    "hgx-h200-2gpu/nvidia-smi-q-performance.txt": "the text form; the suite reads -q -x",
    "hgx-h200-2gpu/nvidia-smi-nvlink-c.txt": "link capabilities: not read by the suite",
}
ROOTS = ("field", "hgx-h200-2gpu")


def captures() -> list[Path]:
    return sorted(p for r in ROOTS for p in (FIXTURES / r).rglob("*")
                  if p.is_file() and p.name != "README.md")


def parser_for(rel: str) -> Callable[[bytes], Any] | None:
    from fnmatch import fnmatch

    return next((fn for pattern, fn in _parsers() if fnmatch(rel, pattern)), None)


def not_read(rel: str) -> str | None:
    from fnmatch import fnmatch

    return next((why for pattern, why in NOT_READ.items() if fnmatch(rel, pattern)), None)


def jsonable(obj: Any) -> Any:
    """A parser's reading as plain JSON: dataclasses by field, sets sorted, floats that JSON
    cannot hold as words."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return jsonable(obj.value)
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted((jsonable(v) for v in obj), key=repr)
    if isinstance(obj, float) and not math.isfinite(obj):
        return repr(obj)
    if isinstance(obj, (datetime, date)):
        return obj.isoformat()
    if isinstance(obj, bytes):
        return obj.hex()
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return repr(obj)


def reading(path: Path) -> Any:
    rel = path.relative_to(FIXTURES).as_posix()
    fn = parser_for(rel)
    if fn is None:
        raise KeyError(rel)
    return jsonable(fn(path.read_bytes()))


def readings() -> dict[str, Any]:
    return {p.relative_to(FIXTURES).as_posix(): reading(p) for p in captures()
            if not_read(p.relative_to(FIXTURES).as_posix()) is None}


def recorded() -> dict[str, Any]:
    return json.loads(lzma.decompress(RECORD.read_bytes()))


def main() -> int:
    data = json.dumps(readings(), indent=1, sort_keys=True).encode()
    RECORD.write_bytes(lzma.compress(data, preset=9))
    print(f"{RECORD.relative_to(REPO)}: {len(json.loads(data))} captures")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
