"""nvme-cli stand-in: `nvme list [-o normal|json]` and `nvme version`."""

from __future__ import annotations

import json
import sys
from typing import Any

from .common import ToolError, load_state, present, run

USAGE = "usage: nvme <command> [<device>] [<args>]\n\nsupported: list [-o normal|json], version"


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:6.2f}  {unit}"
        n /= 1000
    return ""


def plain(drives: list[dict[str, Any]]) -> str:
    head = (f"{'Node':<21} {'Generic':<21} {'SN':<20} {'Model':<40} {'Namespace':<10} "
            f"{'Usage':<26} {'Format':<16} {'FW Rev':<8}")
    rule = " ".join("-" * w for w in (21, 21, 20, 40, 10, 26, 16, 8))
    rows = [head, rule]
    for d in drives:
        i = d["name"][4:]
        usage = f"{_size(d['bytes'])} / {_size(d['bytes'])}"
        rows.append(f"{'/dev/' + d['namespace']:<21} {'/dev/ng' + i + 'n1':<21} "
                    f"{d['serial']:<20} {d['model']:<40} {'0x1':<10} {usage:<26} "
                    f"{'512   B +  0 B':<16} {d['fw']:<8}")
    return "\n".join(rows) + "\n"


def as_json(drives: list[dict[str, Any]]) -> str:
    devices = [{"NameSpace": 1, "DevicePath": "/dev/" + d["namespace"],
                "GenericPath": f"/dev/ng{d['name'][4:]}n1", "Firmware": d["fw"],
                "Index": int(d["name"][4:]), "ModelNumber": d["model"],
                "SerialNumber": d["serial"], "UsedBytes": d["bytes"],
                "MaximumLBA": d["bytes"] // 512, "PhysicalSize": d["bytes"], "SectorSize": 512}
               for d in drives]
    return json.dumps({"Devices": devices}, indent=2) + "\n"


def main(argv: list[str]) -> int:
    if argv == ["version"]:
        print("nvme version 2.4 (hwsim stand-in, SIMULATED)")
        return 0
    if not argv or argv[0] != "list":
        raise ToolError(USAGE, 1)
    fmt = "normal"
    rest = argv[1:]
    if rest:
        if len(rest) == 1 and rest[0].startswith("--output-format="):
            fmt = rest[0].split("=", 1)[1]
        elif len(rest) == 2 and rest[0] in ("-o", "--output-format"):
            fmt = rest[1]
        else:
            raise ToolError(USAGE, 1)
    if fmt not in ("normal", "json"):
        raise ToolError(f"Invalid output format: {fmt}", 1)
    drives = present(load_state()["nvme"])
    sys.stdout.write(as_json(drives) if fmt == "json" else plain(drives))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
