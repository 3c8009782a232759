"""`nvidia-smi -q` and `-q -x` from the state, by cloning the real capture.

The capture's first GPU is the template: every simulated GPU is a copy of it
with the fields the state owns replaced (gpu_fields). Everything else stays
byte-for-byte as the real tool printed it.
"""

from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET
from typing import Any

from .common import read_capture, smi_bus_id, smi_timestamp

XML_HEADER = '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">\n'

# (bit, xml tag suffix, text path under "Clocks Event Reasons")
EVENT_REASONS = [
    (0x1, "gpu_idle", "Idle"),
    (0x2, "applications_clocks_setting", "Applications Clocks Setting"),
    (0x4, "sw_power_cap", "SW Power Cap"),
    (0x8, "hw_slowdown", "HW Slowdown"),
    (0x40, "hw_thermal_slowdown", "HW Slowdown/HW Thermal Slowdown"),
    (0x80, "hw_power_brake_slowdown", "HW Slowdown/HW Power Brake Slowdown"),
    (0x10, "sync_boost", "Sync Boost"),
    (0x20, "sw_thermal_slowdown", "SW Thermal Slowdown"),
    (0x100, "display_clocks_setting", "Display Clock Setting"),
]
ECC_FIELDS = [("sram_correctable", "SRAM Correctable"),
              ("sram_uncorrectable_parity", "SRAM Uncorrectable Parity"),
              ("sram_uncorrectable_secded", "SRAM Uncorrectable SEC-DED"),
              ("dram_correctable", "DRAM Correctable"),
              ("dram_uncorrectable", "DRAM Uncorrectable")]

# `-q -d NAME`: the top-level sections each display name keeps.
DISPLAY_SECTIONS = {
    "PERFORMANCE": ["Performance State", "Clocks Event Reasons", "Clocks Event Reasons Counters",
                    "Sparse Operation Mode"],
    "MEMORY": ["FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage"],
    "ECC": ["ECC Mode", "ECC Errors"],
    "TEMPERATURE": ["Temperature"],
    "POWER": ["GPU Power Readings", "GPU Memory Power Readings", "Module Power Readings"],
    "CLOCK": ["Clocks", "Applications Clocks", "Default Applications Clocks", "Deferred Clocks",
              "Max Clocks", "Max Customer Boost Clocks", "Clock Policy"],
    "PAGE_RETIREMENT": ["Retired Pages"],
    "ROW_REMAPPER": ["Remapped Rows"],
    "UTILIZATION": ["Utilization"],
    "COMPUTE": ["Compute Mode"],
}


def yes_no(flag: bool) -> str:
    return "Yes" if flag else "No"


def gpu_fields(g: dict[str, Any], state: dict[str, Any]) -> list[tuple[str | None, str | None,
                                                                      str]]:
    """(xml path, text path, value) for every field the state owns."""
    bus = g["bdf"][5:7].upper()
    pcie = g["pcie"]
    driver = state["driver"]["version"]
    sm = f"{g['sm_mhz']} MHz"
    maxsm = f"{g['max_sm_mhz']} MHz"
    pw = f"{g['power_limit_w']:.2f} W"
    f: list[tuple[str | None, str | None, str]] = [
        ("product_name", "Product Name", g["name"]),
        ("persistence_mode", "Persistence Mode", g["persistence_mode"]),
        ("serial", "Serial Number", g["serial"]),
        ("uuid", "GPU UUID", g["uuid"]),
        ("pdi", "GPU PDI", g["pdi"]),
        ("minor_number", "Minor Number", str(g["minor"])),
        ("vbios_version", "VBIOS Version", g["vbios"]),
        ("board_id", "Board ID", g["board_id"]),
        ("board_part_number", "Board Part Number", g["board_part"]),
        ("gpu_part_number", "GPU Part Number", g["gpu_part"]),
        ("platformInfo/module_id", "Platform Info/Module Id", str(g["module_id"])),
        ("inforom_version/img_version", "Inforom Version/Image Version", g["inforom"]),
        # The capture ran in a VM (Pass-Through); lab nodes are bare metal.
        ("gpu_virtualization_mode/virtualization_mode",
         "GPU Virtualization Mode/Virtualization Mode", "None"),
        ("gsp_firmware_version", "GSP Firmware Version", driver),
        ("pci/pci_bus", None, bus), (None, "PCI/Bus", "0x" + bus),
        ("pci/pci_device", None, "00"), (None, "PCI/Device", "0x00"),
        ("pci/pci_device_id", None, g["device_id"] + "10DE"),
        (None, "PCI/Device Id", "0x" + g["device_id"] + "10DE"),
        ("pci/pci_sub_system_id", None, g["subsys_id"] + "10DE"),
        (None, "PCI/Sub System Id", "0x" + g["subsys_id"] + "10DE"),
        ("pci/pci_bus_id", "PCI/Bus Id", smi_bus_id(g["bdf"])),
        ("pci/pci_gpu_link_info/pcie_gen/max_link_gen",
         "PCI/GPU Link Info/PCIe Generation/Max", str(pcie["gen_max"])),
        ("pci/pci_gpu_link_info/pcie_gen/current_link_gen",
         "PCI/GPU Link Info/PCIe Generation/Current", str(pcie["gen_cur"])),
        ("pci/pci_gpu_link_info/pcie_gen/device_current_link_gen",
         "PCI/GPU Link Info/PCIe Generation/Device Current", str(pcie["gen_cur"])),
        ("pci/pci_gpu_link_info/pcie_gen/max_device_link_gen",
         "PCI/GPU Link Info/PCIe Generation/Device Max", str(pcie["gen_max"])),
        ("pci/pci_gpu_link_info/link_widths/max_link_width",
         "PCI/GPU Link Info/Link Width/Max", f"{pcie['width_max']}x"),
        ("pci/pci_gpu_link_info/link_widths/current_link_width",
         "PCI/GPU Link Info/Link Width/Current", f"{pcie['width_cur']}x"),
        ("pci/replay_counter", "PCI/Replays Since Reset", str(pcie["replays"])),
        ("fb_memory_usage/total", "FB Memory Usage/Total", f"{g['memory_mib']} MiB"),
        ("fb_memory_usage/free", "FB Memory Usage/Free", f"{g['memory_mib'] - 615} MiB"),
        ("ecc_mode/current_ecc", "ECC Mode/Current", g["ecc_mode"]),
        ("ecc_mode/pending_ecc", "ECC Mode/Pending", g.get("ecc_mode_pending", g["ecc_mode"])),
        ("mig_mode/current_mig", "MIG Mode/Current", g.get("mig_mode", "Disabled")),
        ("mig_mode/pending_mig", "MIG Mode/Pending",
         g.get("mig_mode_pending", g.get("mig_mode", "Disabled"))),
        ("remapped_rows/remapped_row_corr", "Remapped Rows/Correctable Error",
         str(g["remapped_rows"]["correctable"])),
        ("remapped_rows/remapped_row_unc", "Remapped Rows/Uncorrectable Error",
         str(g["remapped_rows"]["uncorrectable"])),
        ("remapped_rows/remapped_row_pending", "Remapped Rows/Pending",
         yes_no(g["remapped_rows"]["pending"])),
        ("remapped_rows/remapped_row_failure", "Remapped Rows/Remapping Failure Occurred",
         yes_no(g["remapped_rows"]["failure"])),
        ("temperature/gpu_temp", "Temperature/GPU Current Temp", f"{g['temp_c']} C"),
        ("temperature/memory_temp", "Temperature/Memory Current Temp", f"{g['mem_temp_c']} C"),
        ("gpu_power_readings/average_power_draw", "GPU Power Readings/Average Power Draw",
         f"{g['power_draw_w']:.2f} W"),
        ("gpu_power_readings/instant_power_draw", "GPU Power Readings/Instantaneous Power Draw",
         f"{g['power_draw_w']:.2f} W"),
        ("clocks/graphics_clock", "Clocks/Graphics", sm),
        ("clocks/sm_clock", "Clocks/SM", sm),
        ("applications_clocks/graphics_clock", "Applications Clocks/Graphics", maxsm),
        ("default_applications_clocks/graphics_clock", "Default Applications Clocks/Graphics",
         maxsm),
        ("max_clocks/graphics_clock", "Max Clocks/Graphics", maxsm),
        ("max_clocks/sm_clock", "Max Clocks/SM", maxsm),
        ("max_customer_boost_clocks/graphics_clock", "Max Customer Boost Clocks/Graphics", maxsm),
        ("fabric/state", "Fabric/State", g["fabric"]["state"]),
        ("fabric/status", "Fabric/Status", g["fabric"]["status"]),
    ]
    for tag, label in (("current_power_limit", "Current Power Limit"),
                       ("requested_power_limit", "Requested Power Limit"),
                       ("default_power_limit", "Default Power Limit"),
                       ("max_power_limit", "Max Power Limit")):
        f.append((f"gpu_power_readings/{tag}", f"GPU Power Readings/{label}", pw))
    f.append(("gpu_power_readings/min_power_limit", "GPU Power Readings/Min Power Limit",
              f"{g['power_min_w']:.2f} W"))
    for bit, tag, label in EVENT_REASONS:
        value = "Active" if g["clocks_event_reasons"] & bit else "Not Active"
        f.append((f"clocks_event_reasons/clocks_event_reason_{tag}",
                  f"Clocks Event Reasons/{label}", value))
    for kind, xkind in (("volatile", "Volatile"), ("aggregate", "Aggregate")):
        for key, label in ECC_FIELDS:
            f.append((f"ecc_errors/{kind}/{key}", f"ECC Errors/{xkind}/{label}",
                      str(g["ecc"][kind][key])))
    return f


def render_xml(state: dict[str, Any], gpus: list[dict[str, Any]]) -> str:
    root = ET.fromstring(read_capture("nvidia-smi-q-x.xml"))
    template = root.find("gpu")
    assert template is not None  # the capture always has one
    for old in root.findall("gpu"):
        root.remove(old)
    root.find("timestamp").text = smi_timestamp()  # type: ignore[union-attr]
    root.find("driver_version").text = state["driver"]["version"]  # type: ignore[union-attr]
    root.find("cuda_version").text = state["driver"]["cuda"]  # type: ignore[union-attr]
    root.find("attached_gpus").text = str(len(gpus))  # type: ignore[union-attr]
    for n, g in enumerate(gpus):
        el = copy.deepcopy(template)
        el.set("id", smi_bus_id(g["bdf"]))
        for path, _, value in gpu_fields(g, state):
            if path is not None:
                node = el.find(path)
                if node is None:
                    raise KeyError(f"capture XML lacks {path}")
                node.text = value
        el.tail = "\n\n" if n == len(gpus) - 1 else "\n\n\t"
        root.append(el)
    if not gpus:
        root[-1].tail = "\n\n"
    return XML_HEADER + ET.tostring(root, encoding="unicode") + "\n"


_LINE = re.compile(r"^( *)(\S.*?)(\s+: )(.*)$")
_HEAD = re.compile(r"^( *)(\S.*?)\s*$")


def _capture_text_parts(name: str) -> tuple[list[str], list[str]]:
    """(header lines, first GPU block lines incl. its blank line) of a -q capture."""
    lines = read_capture(name).split("\n")
    starts = [i for i, line in enumerate(lines) if line.startswith("GPU ")]
    end = starts[1] if len(starts) > 1 else len(lines) - 1
    return lines[: starts[0]], lines[starts[0]: end]


def _fill_text_block(block: list[str], values: dict[str, str], keep: set[str] | None,
                     base: int = 1) -> list[str]:
    """Replace the values at the given key paths; base: indent level of depth 0."""
    out: list[str] = []
    stack: list[str] = []
    keeping = True
    for line in block[1:]:
        m = _LINE.match(line) or _HEAD.match(line)
        if not m or not line.strip():
            out.append(line)
            continue
        depth = len(m.group(1)) // 4 - base
        stack[depth:] = [m.group(2)]
        if depth == 0 and keep is not None:
            keeping = m.group(2) in keep
        if not keeping:
            continue
        path = "/".join(stack)
        if path in values and m.lastindex == 4:
            line = m.group(1) + m.group(2) + m.group(3) + values[path]
        out.append(line)
    return out


def render_text(state: dict[str, Any], gpus: list[dict[str, Any]],
                display: str | None = None) -> str:
    header, block = _capture_text_parts("nvidia-smi-q.txt")
    keep = None
    if display:
        keep = set()
        for name in display.split(","):
            keep.update(DISPLAY_SECTIONS[name])
    head_values = {"Timestamp": smi_timestamp(), "Driver Version": state["driver"]["version"],
                   "CUDA Version": state["driver"]["cuda"], "Attached GPUs": str(len(gpus))}
    out = _fill_text_block(["-"] + header, head_values, None, base=0)
    for g in gpus:
        values = {t: v for _, t, v in gpu_fields(g, state) if t is not None}
        out.append("GPU " + smi_bus_id(g["bdf"]))
        out.extend(_fill_text_block(block, values, keep))
    return "\n".join(out) + "\n"
