"""nvme-cli stand-in: `nvme list [-o normal|json]`, `nvme smart-log DEV -o json`, `nvme version`."""

from __future__ import annotations

import json
import sys
from typing import Any

from .common import ToolError, load_state, present, run

USAGE = ("usage: nvme <command> [<device>] [<args>]\n\n"
         "supported: list [-o normal|json], smart-log <device> -o json, version")


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


# the SMART / Health log as nvme-cli 2.x prints it with -o json
# (nvme-print-json.c json_smart_log: temperature in Kelvin, percent_used, counters as numbers)
def smart_json(d: dict[str, Any]) -> str:
    s = d.get("smart", {})
    return json.dumps({
        "critical_warning": s.get("critical_warning", 0),
        "temperature": int(s.get("temperature_c", 38)) + 273,
        "avail_spare": s.get("avail_spare", 100), "spare_thresh": s.get("spare_thresh", 10),
        "percent_used": s.get("percentage_used", 0),
        "endurance_grp_critical_warning_summary": 0,
        "data_units_read": 1843021, "data_units_written": 2210934,
        "host_read_commands": 90210443, "host_write_commands": 120443102,
        "controller_busy_time": 41, "power_cycles": 12, "power_on_hours": 210,
        "unsafe_shutdowns": 3, "media_errors": s.get("media_errors", 0),
        "num_err_log_entries": s.get("error_log_entries", 0),
        "warning_temp_time": 0, "critical_comp_time": 0,
        "temperature_sensor_1": int(s.get("temperature_c", 38)) + 273,
        "thm_temp1_trans_count": 0, "thm_temp2_trans_count": 0,
        "thm_temp1_total_time": 0, "thm_temp2_total_time": 0,
    }, indent=2) + "\n"


def smart_log(argv: list[str]) -> int:
    devs = [a for a in argv if a.startswith("/dev/")]
    fmt_ok = argv[-2:] in (["-o", "json"], ["--output-format", "json"]) or \
        "--output-format=json" in argv
    if len(devs) != 1 or not fmt_ok:
        raise ToolError("usage: nvme smart-log <device> -o json (hwsim supports json only)", 1)
    name = devs[0].removeprefix("/dev/")
    drive = next((d for d in present(load_state()["nvme"])
                  if name in (d["name"], d["namespace"])), None)
    if drive is None:
        raise ToolError(f"Failed to open {devs[0]}: No such file or directory", 1)
    sys.stdout.write(smart_json(drive))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["smart-log"]:
        return smart_log(argv[1:])
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
