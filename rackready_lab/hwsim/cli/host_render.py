"""Render the host side of the sysroot: SMBIOS table, EDAC sysfs, kernel log lines.

Standard library only (node-side tools re-render). Formats: DMTF DSP0134 (SMBIOS type 17
"Memory Device", 2.8 layout), the kernel's EDAC sysfs (Documentation/admin-guide/ras.rst),
the x86 MCE console line (arch/x86/kernel/cpu/mce/core.c) and the nvswitch driver's SXid line.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DDR5 = 0x22
UC = 1 << 61


def _type17(handle: int, d: dict[str, Any]) -> bytes:
    fitted = d.get("present", True)
    strings = [d["locator"], d["bank"]]
    idx = {}
    if fitted:
        for key in ("manufacturer", "serial", "asset", "part"):
            strings.append(d.get(key) or "Not Specified")
            idx[key] = len(strings)
    size = d["size_mib"] if fitted else 0
    size_word, ext = (0x7FFF, size) if size >= 0x7FFF else (size, 0)
    body = struct.pack(
        "<BBHHHHHHBBBBBHHBBBBBIHHHH",
        17, 0x28, handle, 0x1000, 0xFFFE, 80 if fitted else 0xFFFF, 64 if fitted else 0xFFFF,
        size_word, 0x09, 0, 1, 2, DDR5, 0x2080 if fitted else 0x0004,
        d["speed"] if fitted else 0, idx.get("manufacturer", 0), idx.get("serial", 0),
        idx.get("asset", 0), idx.get("part", 0), 2 if fitted else 0, ext,
        d["configured"] if fitted else 0, 1100, 1100, 1100)
    assert len(body) == 0x28
    return body + b"\x00".join(s.encode() for s in strings) + b"\x00\x00"


def smbios_table(state: dict[str, Any]) -> bytes:
    dimms = (state.get("host") or {}).get("dimms", [])
    out = b"".join(_type17(0x1100 + i, d) for i, d in enumerate(dimms))
    return out + struct.pack("<BBH", 127, 4, 0xFEFF) + b"\x00\x00"


def _edac(state: dict[str, Any], root: Path) -> None:
    base = root / "sys/devices/system/edac/mc"
    dimms = (state.get("host") or {}).get("dimms", [])
    for mc in sorted({d["mc"] for d in dimms}):
        mine = [d for d in dimms if d["mc"] == mc]
        mcd = base / f"mc{mc}"
        fitted = [d for d in mine if d.get("present", True)]
        files = {"mc_name": f"Intel_10nm Socket#{mine[0]['socket']} IMC#{mc % 4}",
                 "ce_count": sum(d["ce"] for d in fitted), "ue_count": sum(d["ue"] for d in fitted),
                 "ce_noinfo_count": 0, "ue_noinfo_count": 0,
                 "size_mb": sum(d["size_mib"] for d in fitted)}
        for name, value in files.items():
            write_file(mcd / name, f"{value}\n")
        for d in fitted:  # EDAC lists only the DIMMs it found
            dd = mcd / f"dimm{d['mc_slot']}"
            for name, value in {"dimm_label": d["locator"],  # as edac-utils labels set it
                                "dimm_location": f"channel {d['mc_slot'] // 2} slot "
                                                 f"{d['mc_slot'] % 2}",
                                "size": d["size_mib"], "dimm_mem_type": "Registered-DDR5",
                                "dimm_ce_count": d["ce"], "dimm_ue_count": d["ue"]}.items():
                write_file(dd / name, f"{value}\n")


def kern_lines(state: dict[str, Any], node: str) -> list[str]:
    """MCE and SXid lines of this boot, in the kernel's wording."""
    host = state.get("host") or {}
    lines = []
    t = 1500.0
    for e in host.get("mce", []):
        t += 11.5
        pre = f"Nov 30 01:25:{int(t) % 60:02d} {node} kernel: [{t:12.6f}] mce: [Hardware Error]: "
        exc = " Exception" if e["status"] & UC else ""
        lines.append(f"{pre}CPU {e['cpu']}: Machine Check{exc}: 0 Bank {e['bank']}: "
                     f"{e['status']:016x}")
        lines.append(f"{pre}TSC 0 ADDR {e.get('addr', 0):x} MISC 0")
    for e in host.get("sxids", []):
        t += 7.25
        sev = "Fatal" if e["fatal"] else "Non-fatal"
        tag = (f"Nov 30 01:26:{int(t) % 60:02d} {node} kernel: [{t:12.6f}] "
               f"nvidia-nvswitch{e['nvswitch']}: SXid (PCI:{e['bdf']}): {e['sxid']}, ")
        lines.append(f"{tag}{sev}, {e['text']}")
        lines.append(f"{tag}Severity {5 if e['fatal'] else 0} Engine instance "
                     f"{e.get('link', 0):02d} Sub-engine instance 00")
    return lines


# While a render runs: every path it wrote (files, links, directories that stay empty).
# A tree is always rendered in place and what the render did not write is removed after:
# a file that still belongs is never absent, even for a moment, so a node-side writer
# racing a re-render (the RoCE role's `echo 1 > .../ecn/roce_np/enable/3`) is not lost.
_rendered: set[Path] | None = None


@contextlib.contextmanager
def tracking() -> Iterator[set[Path]]:
    """The set of paths written while the block runs."""
    global _rendered
    _rendered = set()
    try:
        yield _rendered
    finally:
        _rendered = None


def keep(path: Path) -> None:
    """Mark a path the render wrote (or left as it is because it is current)."""
    if _rendered is not None:
        _rendered.add(path)


def write_bytes(path: Path, data: bytes) -> None:
    """As write_file, for binary files."""
    keep(path)
    try:
        if path.read_bytes() == data:
            return
    except OSError:
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def write_file(path: Path, text: str) -> None:
    """Write a simulated file; one that already holds text is left as it is (a tree
    re-rendered in place rewrites only what changed)."""
    keep(path)
    try:
        if path.read_text() == text:
            return
    except OSError:  # not there yet (or not a file: writing says why)
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def render_host(state: dict[str, Any], root: Path) -> None:
    if not state.get("host"):
        return  # a state written before the host model existed
    if state["host"].get("smbios_table", True):  # False: the kernel exposes no table copy
        write_bytes(root / "sys/firmware/dmi/tables/DMI", smbios_table(state))
    _edac(state, root)
