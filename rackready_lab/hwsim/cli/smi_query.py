"""`nvidia-smi --query-gpu=...` and `--query-remapped-rows=...` as CSV.

Header and value formats follow the capture: ", " between columns, the unit
in brackets in the header and after the value unless `nounits` is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .common import ToolError, smi_bus_id
from .smi_render import EVENT_REASONS, yes_no

Gpu = dict[str, Any]
# field -> (unit or "", value function(gpu, display index, state))
Field = tuple[str, Callable[[Gpu, int, dict[str, Any]], str]]


def _ecc_total(kind: str, corrected: bool) -> Callable[[Gpu, int, dict[str, Any]], str]:
    def value(g: Gpu, i: int, s: dict[str, Any]) -> str:
        e = g["ecc"][kind]
        if corrected:
            return str(e["sram_correctable"] + e["dram_correctable"])
        return str(e["sram_uncorrectable_parity"] + e["sram_uncorrectable_secded"]
                   + e["dram_uncorrectable"])
    return value


def _reason(bit: int) -> Callable[[Gpu, int, dict[str, Any]], str]:
    return lambda g, i, s: "Active" if g["clocks_event_reasons"] & bit else "Not Active"


GPU_FIELDS: dict[str, Field] = {
    "index": ("", lambda g, i, s: str(i)),
    "count": ("", lambda g, i, s: str(s["_visible"])),
    "name": ("", lambda g, i, s: g["name"]),
    "uuid": ("", lambda g, i, s: g["uuid"]),
    "serial": ("", lambda g, i, s: g["serial"]),
    "pci.bus_id": ("", lambda g, i, s: smi_bus_id(g["bdf"])),
    "pci.bus": ("", lambda g, i, s: "0x" + g["bdf"][5:7].upper()),
    "pci.device_id": ("", lambda g, i, s: "0x" + g["device_id"] + "10DE"),
    "driver_version": ("", lambda g, i, s: s["driver"]["version"]),
    "vbios_version": ("", lambda g, i, s: g["vbios"]),
    "memory.total": ("MiB", lambda g, i, s: str(g["memory_mib"])),
    "memory.used": ("MiB", lambda g, i, s: "0"),
    "memory.free": ("MiB", lambda g, i, s: str(g["memory_mib"] - 615)),
    "ecc.mode.current": ("", lambda g, i, s: g["ecc_mode"]),
    "ecc.mode.pending": ("", lambda g, i, s: str(g.get("ecc_mode_pending", g["ecc_mode"]))),
    "ecc.errors.corrected.volatile.total": ("", _ecc_total("volatile", True)),
    "ecc.errors.corrected.aggregate.total": ("", _ecc_total("aggregate", True)),
    "ecc.errors.uncorrected.volatile.total": ("", _ecc_total("volatile", False)),
    "ecc.errors.uncorrected.aggregate.total": ("", _ecc_total("aggregate", False)),
    # Hopper replaced page retirement with row remapping: NVML reports N/A.
    "retired_pages.pending": ("", lambda g, i, s: "[N/A]"),
    "retired_pages.single_bit_ecc.count": ("", lambda g, i, s: "[N/A]"),
    "retired_pages.double_bit.count": ("", lambda g, i, s: "[N/A]"),
    "remapped_rows.pending": ("", lambda g, i, s: yes_no(g["remapped_rows"]["pending"])),
    "remapped_rows.failure": ("", lambda g, i, s: yes_no(g["remapped_rows"]["failure"])),
    "remapped_rows.correctable": ("", lambda g, i, s: str(g["remapped_rows"]["correctable"])),
    "remapped_rows.uncorrectable": ("",
                                    lambda g, i, s: str(g["remapped_rows"]["uncorrectable"])),
    "pcie.link.gen.current": ("", lambda g, i, s: str(g["pcie"]["gen_cur"])),
    "pcie.link.gen.gpucurrent": ("", lambda g, i, s: str(g["pcie"]["gen_cur"])),
    "pcie.link.gen.max": ("", lambda g, i, s: str(g["pcie"]["gen_max"])),
    "pcie.link.gen.gpumax": ("", lambda g, i, s: str(g["pcie"]["gen_max"])),
    "pcie.link.width.current": ("", lambda g, i, s: str(g["pcie"]["width_cur"])),
    "pcie.link.width.max": ("", lambda g, i, s: str(g["pcie"]["width_max"])),
    "power.limit": ("W", lambda g, i, s: f"{g['power_limit_w']:.2f}"),
    "power.max_limit": ("W", lambda g, i, s: f"{g['power_limit_w']:.2f}"),
    "power.draw": ("W", lambda g, i, s: f"{g['power_draw_w']:.2f}"),
    "clocks.max.sm": ("MHz", lambda g, i, s: str(g["max_sm_mhz"])),
    "clocks.sm": ("MHz", lambda g, i, s: str(g["sm_mhz"])),
    "clocks.mem": ("MHz", lambda g, i, s: str(g["mem_mhz"])),
    "clocks_event_reasons.active": ("", lambda g, i, s: f"0x{g['clocks_event_reasons']:016X}"),
    "temperature.gpu": ("", lambda g, i, s: str(g["temp_c"])),
    "temperature.memory": ("", lambda g, i, s: str(g["mem_temp_c"])),
    "persistence_mode": ("", lambda g, i, s: g["persistence_mode"]),
    "mig.mode.current": ("", lambda g, i, s: g.get("mig_mode", "Disabled")),
    "mig.mode.pending": ("", lambda g, i, s: str(g.get("mig_mode_pending",
                                                       g.get("mig_mode", "Disabled")))),
    "utilization.gpu": ("%", lambda g, i, s: "0"),
    "pci.sub_device_id": ("", lambda g, i, s: "0x" + g["subsys_id"] + "10DE"),
}
for _bit, _tag, _label in EVENT_REASONS:
    GPU_FIELDS[f"clocks_event_reasons.{_tag}"] = ("", _reason(_bit))
# Older spelling still accepted by the driver's nvidia-smi.
for _name in [n for n in GPU_FIELDS if n.startswith("clocks_event_reasons.")]:
    GPU_FIELDS[_name.replace("clocks_event_reasons", "clocks_throttle_reasons")] = \
        GPU_FIELDS[_name]

REMAP_FIELDS: dict[str, Field] = {
    "gpu_bus_id": ("", lambda g, i, s: smi_bus_id(g["bdf"])),
    "gpu_uuid": ("", lambda g, i, s: g["uuid"]),
    "remapped_rows.correctable": GPU_FIELDS["remapped_rows.correctable"],
    "remapped_rows.uncorrectable": GPU_FIELDS["remapped_rows.uncorrectable"],
    "remapped_rows.pending": GPU_FIELDS["remapped_rows.pending"],
    "remapped_rows.failure": GPU_FIELDS["remapped_rows.failure"],
}


def render_csv(state: dict[str, Any], gpus: list[tuple[int, Gpu]], fields_arg: str,
               fmt: str, table: dict[str, Field], units_in_header: bool = True) -> str:
    fields = [f.strip() for f in fields_arg.split(",") if f.strip()]
    for f in fields:
        if f not in table:
            raise ToolError(f'Field "{f}" is not a valid field to query.', 2)
    opts = {o.strip() for o in fmt.split(",")}
    if "csv" not in opts or not opts <= {"csv", "noheader", "nounits"}:
        raise ToolError(f'"{fmt}" is not a valid format. Please run \'nvidia-smi -h\' for help.',
                        2)
    lines = []
    if "noheader" not in opts:
        heads = []
        for f in fields:
            unit = table[f][0]
            heads.append(f"{f} [{unit}]" if unit and units_in_header else f)
        lines.append(", ".join(heads))
    scope = dict(state, _visible=len(gpus))
    for i, g in gpus:
        row = []
        for f in fields:
            unit, fn = table[f]
            value = fn(g, i, scope)
            if unit and "nounits" not in opts and not value.startswith("["):
                value = f"{value} {unit}" if unit != "%" else f"{value} %"
            row.append(value)
        lines.append(", ".join(row))
    return "\n".join(lines) + "\n"
