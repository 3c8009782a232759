"""`dcgmi discovery -l`: the GPUs and NVSwitches DCGM's host engine sees.

Shapes (dcgmi/Query.cpp DisplayDiscoveredDevices, DcgmiOutputColumns):
- every version: `N GPU(s) found.` then a box of `| GPU ID | Device Information |` rows,
  each GPU `| <id> | Name: ... |` with `PCI Bus ID: 00000000:4C:00.0` and
  `Device UUID: GPU-...` below it (Name may be `<<<NULL>>>`: NVIDIA/DCGM issue 229);
  then `N NvSwitch(es) found.` and a `| Switch ID |` box, one id a row;
- DCGM 4.2+: `N ConnectX found.` and a `| ConnectX |` box; DCGM 3.3+: `N CPU(s) found.`
  and a `| CPU ID | Device Information |` box (Grace); both read past, not counted;
- DCGM 4.5+: `N GPUs found (Active).` (or `(All)` with `-a`): GPUs DCGM cannot use
  (detached, lost) are left out of the list, followed by `Note: Use -a flag to show all
  GPUs, including those that are not active.`; with `-a` such a GPU carries
  `Status: DETACHED` and `(last known)` after its name and bus id.
A GPU whose attributes DCGM could not read prints `Error: Cannot get device attributes
for GPU.`: kept with no bus id. Anything without the `GPUs found.` line, a count that
disagrees with the rows, or no `NvSwitches found.` line raises ParseError("unparsed ...").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from validation.probes.nvidia_smi import ParseError, short_bus_id

_GPUS = re.compile(r"^(\d+) GPUs? found(?: \((Active|All)\))?\.$")
_SWITCHES = re.compile(r"^(\d+) NvSwitch(?:es)? found\.$")
_OTHER = re.compile(r"^(\d+) (ConnectX|CPUs?) found\.$")
_CELLS = re.compile(r"^\|(.*)\|(.*)\|$")
_ONE_CELL = re.compile(r"^\|\s*(\d+)\s*\|$")


@dataclass(frozen=True)
class DcgmGpu:
    dcgm_id: str
    name: str
    bus_id: str  # 0000:4c:00.0 (short, lower case), "" where DCGM could not read it
    uuid: str
    status: str = "OK"  # DCGM 4.5+ with -a: the status it prints (DETACHED, ...)


@dataclass(frozen=True)
class Discovery:
    gpus: tuple[DcgmGpu, ...]
    nvswitches: tuple[str, ...]
    # DCGM 4.5+: some GPUs are not active and were left out of the list
    inactive_left_out: bool = False


def parse_discovery(text: str) -> Discovery:
    lines = [ln.strip() for ln in text.splitlines()]
    head = next((i for i, ln in enumerate(lines) if _GPUS.match(ln)), None)
    if head is None:
        raise ParseError("unparsed dcgmi discovery output: no 'GPUs found.' line")
    count = int(_GPUS.match(lines[head]).group(1))  # type: ignore[union-attr]
    gpus: list[dict[str, str]] = []
    section = "gpu"
    switches: list[str] = []
    seen_switch_line = False
    note = False
    for ln in lines[head + 1:]:
        if ln.startswith("Note: Use -a flag"):
            note = True
            continue
        sw = _SWITCHES.match(ln)
        if sw:
            section, seen_switch_line, sw_count = "switch", True, int(sw.group(1))
            continue
        if _OTHER.match(ln):
            section = "other"
            continue
        if section == "gpu":
            cells = _CELLS.match(ln)
            if not cells:
                continue
            left, right = cells.group(1).strip(), cells.group(2).strip()
            if left == "GPU ID":
                continue
            if left.isdigit():
                gpus.append({"id": left, "name": "", "bus": "", "uuid": "", "status": "OK"})
            elif left or not gpus:
                raise ParseError(f"unparsed dcgmi discovery output: GPU row {ln!r}")
            key, _, val = right.partition(":")
            val = val.strip()
            val = val.removesuffix(" (last known)")
            if key == "Name":
                gpus[-1]["name"] = val
            elif key == "PCI Bus ID":
                gpus[-1]["bus"] = short_bus_id(val) if val else ""
            elif key == "Device UUID":
                gpus[-1]["uuid"] = val
            elif key == "Status":
                gpus[-1]["status"] = val
        elif section == "switch":
            one = _ONE_CELL.match(ln)
            if one:
                switches.append(one.group(1))
    if len(gpus) != count:
        raise ParseError(f"unparsed dcgmi discovery output: {count} GPUs found but "
                         f"{len(gpus)} listed")
    if not seen_switch_line:
        raise ParseError("unparsed dcgmi discovery output: no 'NvSwitches found.' line")
    if len(switches) != sw_count:
        raise ParseError(f"unparsed dcgmi discovery output: {sw_count} NvSwitches found but "
                         f"{len(switches)} listed")
    return Discovery(tuple(DcgmGpu(g["id"], g["name"], g["bus"], g["uuid"], g["status"])
                           for g in gpus), tuple(switches), note)
