"""`nvme smart-log <dev> -o json`: the NVMe SMART / Health Information log (log page 02h).

Fields (NVMe base spec, "SMART / Health Information"; nvme-cli `nvme-print-json.c`
json_smart_log, 1.x and 2.x):
- critical_warning: bit 0 spare below threshold, 1 temperature, 2 reliability degraded,
  3 read-only, 4 volatile backup failed, 5 PMR read-only. nvme-cli prints an integer;
  2.x in verbose/human mode an object whose "value" is that integer.
- temperature: composite temperature in Kelvin (an integer); some builds print a string
  such as "38 C" / "311 K" in human mode.
- avail_spare, spare_thresh, percent_used (percentage_used in a few builds): percent.
- media_errors, num_err_log_entries: 128-bit counters, printed as numbers (1.x, 2.x) or
  decimal strings (large values in 2.x).
Written from the documented format (no NVMe on the captured machine).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from validation.probes.nvidia_smi import ParseError


@dataclass(frozen=True)
class NvmeSmart:
    critical_warning: int
    temperature_c: float | None
    avail_spare: int | None
    spare_thresh: int | None
    percentage_used: int
    media_errors: int
    error_log_entries: int | None


def _int(v: object, what: str) -> int:
    if isinstance(v, bool):
        raise ParseError(f"nvme smart-log: {what} is not a number")
    if isinstance(v, (int, float)):
        return int(v)
    if isinstance(v, str):
        s = v.replace(",", "").replace("%", "").strip()
        if re.fullmatch(r"\d+", s):
            return int(s)
        if re.fullmatch(r"0x[0-9a-fA-F]+", s):
            return int(s, 16)
    raise ParseError(f"nvme smart-log: {what} unreadable ({v!r})")


def _temp_c(v: object) -> float | None:
    if v is None:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return round(float(v) - 273.15, 1)  # JSON carries Kelvin
    m = re.fullmatch(r"\s*(-?[\d.]+)\s*(°?C|K)\s*(\(.*\))?\s*", str(v))
    if not m:
        raise ParseError(f"nvme smart-log: temperature unreadable ({v!r})")
    t = float(m.group(1))
    return round(t - 273.15, 1) if m.group(2) == "K" else t


def parse_smart_log(text: str) -> NvmeSmart:
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"nvme smart-log -o json: not JSON ({exc.msg})") from None
    if not isinstance(d, dict) or "critical_warning" not in d:
        raise ParseError("nvme smart-log -o json: no critical_warning (unknown format)")
    cw = d["critical_warning"]
    if isinstance(cw, dict):  # 2.x verbose: {"value": n, "available_spare": 0, ...}
        cw = cw.get("value")
    used = d.get("percent_used", d.get("percentage_used"))
    if used is None or "media_errors" not in d:
        raise ParseError("nvme smart-log -o json: no percent_used or media_errors")
    spare = d.get("avail_spare", d.get("available_spare"))
    thresh = d.get("spare_thresh", d.get("available_spare_threshold"))
    errs = d.get("num_err_log_entries")
    return NvmeSmart(
        critical_warning=_int(cw, "critical_warning"),
        temperature_c=_temp_c(d.get("temperature")),
        avail_spare=None if spare is None else _int(spare, "avail_spare"),
        spare_thresh=None if thresh is None else _int(thresh, "spare_thresh"),
        percentage_used=_int(used, "percent_used"),
        media_errors=_int(d["media_errors"], "media_errors"),
        error_log_entries=None if errs is None else _int(errs, "num_err_log_entries"),
    )
