"""`mlxlink -d DEV -m -c -e` (NVIDIA MFT / mstflint): transceiver module and link BER.

Text layout (mstflint mlxlink/modules/mlxlink_commander.cpp, `setPrintTitle` /
`setPrintVal`; MFT 4.2x-4.3x docs "mlxlink Utility"): sections titled by a line and a
dashed underline (`Operational Info`, `Module Info`, `Physical Counters and BER Info`,
`EYE Opening Info`, ...), then `Name<spaces>: value` lines. Module values carry the
module's own alarm range: `54 [-5..75]`; per-lane values are comma-separated:
`1.886,1.989,2.281,1.976 [-10.41..6]`. A passive copper cable has no monitoring:
`N/A`, or zeros with the range `[0..0]` (MFT 4.35). BER values read `15E-255` when no
error was counted (an underflow sentinel, i.e. zero). `--json` prints the same names under
`result.output.<section>`, per-lane values as `{"values": [...]}`; both are read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from validation.probes.nvidia_smi import ParseError

MODULE = "Module Info"
COUNTERS = "Physical Counters and BER Info"
OPERATIONAL = "Operational Info"


@dataclass(frozen=True)
class LinkReport:
    sections: dict[str, dict[str, str]]
    state: str | None = None
    identifier: str | None = None  # OSFP, QSFP112, QSFP28 ...
    cable_type: str | None = None  # "Optical Module", "Passive copper cable" ...
    vendor: str | None = None
    part_number: str | None = None
    serial: str | None = None
    temperature_c: float | None = None  # None: not monitored (passive copper) or N/A
    temperature_range: tuple[float, float] | None = None
    rx_power_dbm: tuple[float, ...] = field(default_factory=tuple)  # per lane; () not monitored
    rx_power_range: tuple[float, float] | None = None
    effective_ber: float | None = None
    raw_ber: float | None = None
    effective_errors: int | None = None
    link_down: int | None = None
    link_error_recovery: int | None = None


def _sections_text(text: str) -> dict[str, dict[str, str]]:
    lines = text.splitlines()
    out: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for i, ln in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if ln.strip() and re.fullmatch(r"\s*-{3,}\s*", nxt) and ":" not in ln:
            current = out.setdefault(ln.strip(), {})
            continue
        m = re.match(r"^\s*([^:]+?)\s*:\s?(.*?)\s*$", ln)
        if m and current is not None and not re.fullmatch(r"-+", m.group(1)):
            current[m.group(1)] = m.group(2)
    return out


def _flat(v: object) -> str:
    if isinstance(v, dict) and "values" in v:
        return ",".join(str(x) for x in v["values"])
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return str(v)


def _sections_json(text: str) -> dict[str, dict[str, str]]:
    try:
        doc = json.loads(text)
        output = doc["result"]["output"]
    except (ValueError, KeyError, TypeError):
        raise ParseError("unparsed mlxlink JSON: no result.output") from None
    return {str(sec): {str(k): _flat(v) for k, v in body.items()}
            for sec, body in output.items() if isinstance(body, dict)}


def _na(v: str | None) -> str | None:
    if v is None:
        return None
    v = v.strip()
    return None if not v or v.upper() in ("N/A", "NA") else v


def _values(v: str | None) -> tuple[tuple[float, ...], tuple[float, float] | None]:
    """'1.8,2.0 [-10.41..6]' -> ((1.8, 2.0), (-10.41, 6.0)); N/A or [0..0] -> ((), None)."""
    v = _na(v)
    if v is None:
        return (), None
    m = re.match(r"^(.*?)\s*(?:\[\s*(-?[\d.]+)\s*\.\.\s*(-?[\d.]+)\s*\])?$", v)
    if not m:
        return (), None
    rng = (float(m.group(2)), float(m.group(3))) if m.group(2) else None
    if rng == (0.0, 0.0):
        return (), None  # the module reports no monitoring (passive copper)
    vals = []
    for part in m.group(1).split(","):
        part = part.strip()
        if _na(part) is None:
            continue
        try:
            vals.append(float(part))
        except ValueError:
            return (), None
    return tuple(vals), rng


def _number(v: str | None) -> float | None:
    v = _na(v)
    if v is None:
        return None
    m = re.match(r"^(-?[\d.]+(?:[eE][-+]?\d+)?)", v)
    return float(m.group(1)) if m else None


def _int(v: str | None) -> int | None:
    n = _number(v)
    return None if n is None else int(n)


def parse_mlxlink(text: str) -> LinkReport:
    """`mlxlink -m -c [-e]` text or `--json` -> LinkReport. A BER of 15E-255 reads as ~0."""
    sections = (_sections_json(text) if text.lstrip().startswith("{")
                else _sections_text(text))
    if MODULE not in sections and COUNTERS not in sections:
        raise ParseError("unparsed mlxlink output: no 'Module Info' or "
                         "'Physical Counters and BER Info' section")
    mod = sections.get(MODULE, {})
    cnt = sections.get(COUNTERS, {})
    temps, trange = _values(mod.get("Temperature [C]"))
    rx, rrange = _values(mod.get("Rx Power Current [dBm]"))
    return LinkReport(
        sections=sections,
        state=_na(sections.get(OPERATIONAL, {}).get("State")),
        identifier=_na(mod.get("Identifier")),
        cable_type=_na(mod.get("Cable Type")),
        vendor=_na(mod.get("Vendor Name")),
        part_number=_na(mod.get("Vendor Part Number")),
        serial=_na(mod.get("Vendor Serial Number")),
        temperature_c=temps[0] if temps else None,
        temperature_range=trange,
        rx_power_dbm=rx,
        rx_power_range=rrange,
        effective_ber=_number(cnt.get("Effective Physical BER")),
        raw_ber=_number(cnt.get("Raw Physical BER")),
        effective_errors=_int(cnt.get("Effective Physical Errors")),
        link_down=_int(cnt.get("Link Down Counter")),
        link_error_recovery=_int(cnt.get("Link Error Recovery Counter")),
    )
