"""Parsers for nvidia-smi output: -q -x, --query-gpu CSV, topo -m, nvlink -s / -e.

Pure functions of the text; "N/A" becomes None so a value that the GPU does
not report is never mistaken for zero.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field


class ParseError(ValueError):
    """The text is not the format the parser expects."""


# What nvidia-smi prints for a value it cannot give, bare (XML, -q) or bracketed (CSV):
# "[N/A]", "[Not Supported]", "[Unknown Error]", "[Requested functionality has been
# deprecated]", "[Insufficient Permissions]", "[GPU requires reset]", ...
_NO_VALUE = {"n/a", "", "not supported", "unknown error", "insufficient permissions",
             "requested functionality has been deprecated", "gpu requires reset",
             "gpu is lost", "not found", "unknown"}


def _na(text: str | None) -> str | None:
    """A value nvidia-smi could not give -> None (never a number)."""
    if text is None:
        return None
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):  # CSV brackets every non-value
        return None
    return None if text.lower() in _NO_VALUE else text


def _int(text: str | None) -> int | None:
    v = _na(text)
    if v is None:
        return None
    m = re.match(r"-?\d+", v)
    return int(m.group()) if m else None


def _float(text: str | None) -> float | None:
    v = _na(text)
    if v is None:
        return None
    m = re.match(r"-?\d+(\.\d+)?", v)
    return float(m.group()) if m else None


def _yes(text: str | None) -> bool | None:
    v = _na(text)
    return None if v is None else v.lower() in ("yes", "active", "enabled", "true")


@dataclass(frozen=True)
class GpuInfo:
    index: int
    bus_id: str  # as nvidia-smi prints it: 00000000:00:06.0
    name: str
    serial: str | None
    uuid: str
    vbios: str
    memory_total_mib: int | None
    persistence_mode: str | None
    mig_mode: str | None
    ecc_mode: str | None
    ecc_uncorrected_volatile: int | None  # dram + sram; pre-Ampere: double_bit total
    ecc_uncorrected_aggregate: int | None
    ecc_corrected_volatile: int | None  # dram + sram; pre-Ampere: single_bit total
    retired_pages: int | None  # single + double bit; None where the GPU has row remapping
    retired_pages_pending: bool | None
    remapped_rows_correctable: int | None
    remapped_rows_uncorrectable: int | None
    remapped_rows_pending: bool | None
    remapped_rows_failure: bool | None
    pcie_gen: int | None
    pcie_gen_max: int | None
    pcie_width: int | None
    pcie_width_max: int | None
    pcie_replay: int | None
    power_limit_w: float | None
    temperature_c: float | None
    fabric_state: str | None
    fabric_status: str | None
    clock_events: dict[str, bool] = field(default_factory=dict)  # short name -> active
    # /dev/nvidiaN: NVIDIA does not promise it equals nvidia-smi's index (kept, not used)
    minor_number: int | None = None
    # board power now: average_power_draw (R550+), else instant_power_draw (R550+ GPUs before
    # Ampere print the average N/A), else power_draw (R530-R545; older power_readings)
    power_draw_w: float | None = None
    ecc_corrected_aggregate: int | None = None


@dataclass(frozen=True)
class SmiReport:
    driver_version: str
    cuda_version: str | None
    gpus: tuple[GpuInfo, ...]


# XML clock event element suffix -> the short names the metrics use
_CLOCK_EVENTS = {
    "gpu_idle": "idle",
    "applications_clocks_setting": "app_clocks",
    "sw_power_cap": "sw_power_cap",
    "hw_slowdown": "hw_slowdown",
    "hw_thermal_slowdown": "hw_thermal",
    "hw_power_brake_slowdown": "hw_power_brake",
    "sync_boost": "sync_boost",
    "sw_thermal_slowdown": "sw_thermal",
    "display_clocks_setting": "display_clocks",
}


def _min(*vals: int | None) -> int | None:
    present = [v for v in vals if v is not None]
    return min(present) if present else None


def _sum(*vals: int | None) -> int | None:
    present = [v for v in vals if v is not None]
    return sum(present) if present else None


# Ampere and later: dram_* / sram_* counts under volatile|aggregate
_ECC_NOW = {True: ("dram_uncorrectable", "sram_uncorrectable_parity",
                   "sram_uncorrectable_secded", "sram_uncorrectable"),
            False: ("dram_correctable", "sram_correctable")}
# before Ampere (nvidia-smi's XML for Volta/Turing and older drivers): single_bit (corrected)
# and double_bit (uncorrected), each per memory (device_memory, register_file, l1_cache,
# l2_cache, texture_memory, texture_shm, cbu) plus their total
_ECC_PARTS = ("device_memory", "register_file", "l1_cache", "l2_cache", "texture_memory",
              "texture_shm", "cbu")


def _ecc(g: ET.Element, scope: str, uncorrected: bool) -> int | None:
    """ECC error count of one GPU in `scope` (volatile | aggregate), either layout."""
    now = _sum(*(_int(g.findtext(f"ecc_errors/{scope}/{tag}")) for tag in _ECC_NOW[uncorrected]))
    if now is not None:
        return now
    bits = f"ecc_errors/{scope}/{'double_bit' if uncorrected else 'single_bit'}"
    total = _int(g.findtext(f"{bits}/total"))
    return total if total is not None else _sum(
        *(_int(g.findtext(f"{bits}/{part}")) for part in _ECC_PARTS))


# nvidia-smi's own `power.draw` is the 1 s average on Ampere and newer and the instant
# reading before Ampere (--help-query-gpu), hence average, then instant, then the old tag;
# 580 names the section gpu_power_readings, drivers before R530 power_readings.
_POWER_DRAW = ("average_power_draw", "instant_power_draw", "power_draw")
_POWER_SECTIONS = ("gpu_power_readings", "power_readings")


def parse_query_xml(text: str) -> SmiReport:
    """Parse `nvidia-smi -q -x`."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ParseError(f"nvidia-smi -q -x: not XML ({exc})") from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"nvidia-smi -q -x: root is <{root.tag}>, not <nvidia_smi_log>")
    gpus = []
    # nvidia-smi lists <gpu> elements in its own index order (PCI bus id order), the
    # order of `--query-gpu=index` and `nvidia-smi nvlink -s`; minor_number is not it.
    for idx, g in enumerate(root.findall("gpu")):
        def t(path: str, g: ET.Element = g) -> str | None:
            return g.findtext(path)

        events: dict[str, bool] = {}
        reasons = g.find("clocks_event_reasons")
        if reasons is None:  # drivers before 535 say "throttle"
            reasons = g.find("clocks_throttle_reasons")
        for child in reasons if reasons is not None else ():
            suffix = re.sub(r"^clocks_(event|throttle)_reason_", "", child.tag)
            if suffix in _CLOCK_EVENTS:
                events[_CLOCK_EVENTS[suffix]] = (child.text or "").strip() == "Active"
        gpus.append(GpuInfo(
            index=idx,
            bus_id=g.get("id", ""),
            name=(t("product_name") or "").strip(),
            serial=_na(t("serial")),
            uuid=(t("uuid") or "").strip(),
            vbios=(t("vbios_version") or "").strip(),
            memory_total_mib=_int(t("fb_memory_usage/total")),
            persistence_mode=_na(t("persistence_mode")),
            mig_mode=_na(t("mig_mode/current_mig")),
            ecc_mode=_na(t("ecc_mode/current_ecc")),
            ecc_uncorrected_volatile=_ecc(g, "volatile", uncorrected=True),
            ecc_uncorrected_aggregate=_ecc(g, "aggregate", uncorrected=True),
            ecc_corrected_volatile=_ecc(g, "volatile", uncorrected=False),
            ecc_corrected_aggregate=_ecc(g, "aggregate", uncorrected=False),
            retired_pages=_sum(
                _int(t("retired_pages/multiple_single_bit_retirement/retired_count")),
                _int(t("retired_pages/double_bit_retirement/retired_count")),
            ),
            retired_pages_pending=_yes(t("retired_pages/pending_retirement")),
            remapped_rows_correctable=_int(t("remapped_rows/remapped_row_corr")),
            remapped_rows_uncorrectable=_int(t("remapped_rows/remapped_row_unc")),
            remapped_rows_pending=_yes(t("remapped_rows/remapped_row_pending")),
            remapped_rows_failure=_yes(t("remapped_rows/remapped_row_failure")),
            pcie_gen=_int(t("pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
            # "Max": the most the GPU and the slot allow together; older drivers print
            # N/A there, so the device/host maxima stand in.
            pcie_gen_max=_int(t("pci/pci_gpu_link_info/pcie_gen/max_link_gen"))
            or _min(_int(t("pci/pci_gpu_link_info/pcie_gen/max_device_link_gen")),
                    _int(t("pci/pci_gpu_link_info/pcie_gen/max_host_link_gen"))),
            pcie_width=_int(t("pci/pci_gpu_link_info/link_widths/current_link_width")),
            pcie_width_max=_int(t("pci/pci_gpu_link_info/link_widths/max_link_width")),
            pcie_replay=_int(t("pci/replay_counter")),
            power_limit_w=_float(t("gpu_power_readings/current_power_limit")
                                 or t("power_readings/power_limit")),
            temperature_c=_float(t("temperature/gpu_temp")),
            fabric_state=_na(t("fabric/state")),
            fabric_status=_na(t("fabric/status")),
            clock_events=events,
            minor_number=_int(t("minor_number")),
            power_draw_w=next((v for v in map(_float, (
                t(f"{sect}/{tag}") for tag in _POWER_DRAW for sect in _POWER_SECTIONS))
                if v is not None), None),
        ))
    return SmiReport(
        driver_version=(root.findtext("driver_version") or "").strip(),
        cuda_version=_na(root.findtext("cuda_version")),
        gpus=tuple(gpus),
    )


def parse_query_csv(text: str) -> list[dict[str, str | None]]:
    """Parse `nvidia-smi --query-gpu=... --format=csv` (or --query-remapped-rows).

    Keys are the query field names without the unit suffix ("memory.total");
    values keep their unit text ("143771 MiB"); "[N/A]" becomes None.
    """
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    if not rows or not rows[0]:
        raise ParseError("nvidia-smi CSV: empty")
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in rows[0]]
    out = []
    for row in rows[1:]:
        if len(row) != len(header):
            raise ParseError(f"nvidia-smi CSV: {len(row)} fields, header has {len(header)}")
        out.append({h: _na(v) for h, v in zip(header, row, strict=True)})
    return out


@dataclass(frozen=True)
class Topology:
    gpus: tuple[str, ...]  # "GPU0", ...
    matrix: dict[tuple[str, str], str]  # (GPU0, GPU1) -> "NV18"; (GPU0, NIC3) -> "PXB"; ...
    numa: dict[str, str | None]  # GPU0 -> NUMA affinity
    # NIC columns in header order ("NIC0", ...) and their RDMA device names from the
    # "NIC Legend" ("NIC3" -> "mlx5_3"); older drivers head the columns with the device
    # name itself ("mlx5_0"), which then maps to itself
    nics: dict[str, str] = field(default_factory=dict)
    cpu_affinity: dict[str, str | None] = field(default_factory=dict)  # GPU0 -> "0-55,112-167"


# Device columns: GPUn, NICn, or (drivers before the NIC legend) the RDMA name itself.
_TOPO_DEVICE = re.compile(r"(GPU|NIC)\d+|mlx\d+_\w+")


def _topo_cells(line: str) -> list[str]:
    """One matrix line's cells. nvidia-smi separates them with tabs; a capture pasted
    into an issue or a web page often has them turned into runs of spaces (a cell such
    as "CPU Affinity" has single spaces inside, so two or more spaces separate)."""
    sep = "\t" if "\t" in line else r" {2,}"
    return [c.strip() for c in re.split(sep, line) if c.strip()]


def _topo_trailer(line: str, cells: list[str], n_devices: int,
                  extra: list[str], header: str) -> dict[str, str]:
    """A GPU row's cells after the device columns, by header name ("CPU Affinity",
    "NUMA Affinity", "GPU NUMA ID").

    The CPU Affinity cell may be empty (a GPU whose CPU affinity NVML cannot report:
    VMs, some Grace hosts); it is the cell right after the last device column, so it is
    taken by position and the empty value kept. The cells after it are taken as the
    non-empty ones in order: nvidia-smi pads them with extra tabs (`0\t\tN/A`, `0-7\t\tN/A`
    by driver), so an empty cell there is padding, never a value.
    """
    if "CPU Affinity" not in extra or extra.index("CPU Affinity") != 0:
        return dict(zip(extra, [c for c in cells[n_devices:] if c], strict=False))
    if "\t" in line:
        fields = [c.strip() for c in line.split("\t")][1 + n_devices:]
        if not fields:
            return {}
        cpu, rest = fields[0], [c for c in fields[1:] if c]
    else:  # spaces: an empty CPU cell shows as the next value standing in NUMA's column
        rest = [c for c in cells[n_devices:] if c]
        cpu = rest.pop(0) if rest else ""
        spans = [m.start() for m in re.finditer(r"\S+(?: \S+)*", line)][1 + n_devices:]
        numa_at = header.find("NUMA Affinity")
        if cpu and spans and numa_at > 0 and spans[0] >= numa_at:
            rest, cpu = [cpu, *rest], ""
    return dict(zip(extra, [cpu, *rest], strict=False))


def parse_topo(text: str) -> Topology:
    """Parse `nvidia-smi topo -m`: the GPU rows (NIC rows repeat the GPU-NIC cells),
    each GPU's CPU and NUMA affinity, and the NIC legend."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # the header is printed underlined
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ParseError("topo -m: empty")
    cols = _topo_cells(lines[0])
    devices = [c for c in cols if _TOPO_DEVICE.fullmatch(c)]
    if not any(d.startswith("GPU") for d in devices):
        raise ParseError("topo -m: no GPU columns in the header")
    extra = cols[len(devices):]  # "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"
    legend = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)\s*$", text, re.M))
    nics = {d: legend.get(d, d) for d in devices if not d.startswith("GPU")}
    matrix: dict[tuple[str, str], str] = {}
    numa: dict[str, str | None] = {}
    cpus: dict[str, str | None] = {}
    gpus = []
    for ln in lines[1:]:
        parts = _topo_cells(ln)
        if not parts or not re.fullmatch(r"GPU\d+", parts[0]):
            continue
        row, cells = parts[0], parts[1:]
        gpus.append(row)
        for dev, cell in zip(devices, cells, strict=False):
            if dev != row:
                matrix[(row, dev)] = cell
        rest = _topo_trailer(ln, cells, len(devices), extra, lines[0])
        if "NUMA Affinity" in rest:
            numa[row] = _na(rest["NUMA Affinity"])
        if "CPU Affinity" in rest:
            cpus[row] = _na(rest["CPU Affinity"])
    return Topology(gpus=tuple(gpus), matrix=matrix, numa=numa, nics=nics, cpu_affinity=cpus)


def nv_links(cell: str) -> int:
    """Links in a topo -m cell: NV18 -> 18; anything else (SYS, PIX) -> 0."""
    m = re.fullmatch(r"NV(\d+)", cell.strip())
    return int(m.group(1)) if m else 0


_GPU_HDR = re.compile(r"^GPU (\d+): (.*?) \(UUID: ([^)]+)\)")
# NVML's message for a GPU whose every NVLink is down, under that GPU's line (seen as
# "NVML: Unable to retrieve NVLink information as all links are inActive", also spelled
# "NVML:Unable to retrieve Nvlink ..." and "inactive"): a state, 0 links up.
_ALL_INACTIVE = re.compile(r"all links are inactive", re.I)
# What nvidia-smi prints instead of link lines when it cannot say (MIG mode, a driver
# that cannot read NVLink): the state is unknown, never "0 links up".
_UNSUPPORTED = re.compile(r"not supported|MIG mode|Unable to retrieve|Not Supported", re.I)
# NVML's statement that a GPU has no NVLink at all (a PCIe card; exit status 0, under the
# GPU line or alone: canonical/checkbox pull 2727): a fact, 0 links, never unknown.
_NO_NVLINK = re.compile(r"does not have or support nvlink", re.I)
_LINK = re.compile(r"\s*Link (\d+): (.*)$")


@dataclass(frozen=True)
class NvlinkStatus:
    links: dict[int, dict[int, float | None]]  # gpu index -> link -> GB/s (None: inactive)
    unknown: dict[int, str]  # gpu index -> nvidia-smi's words for why it cannot say
    uuids: dict[int, str]  # gpu index -> UUID from the GPU line
    note: str | None = None  # a message for the whole output (no GPU line at all)
    # GPUs nvidia-smi says have every link inactive (their `links` entry is empty)
    all_inactive: frozenset[int] = frozenset()
    # GPUs nvidia-smi says have no NVLink ("Device does not have or support Nvlink"; their
    # `links` entry is empty: 0 links)
    no_nvlink: frozenset[int] = frozenset()
    # the same statement alone, for the whole output (no GPU line): no GPU has NVLink
    no_nvlink_any: str | None = None


def _link_speed(text: str) -> float | None:
    speed = re.match(r"([\d.]+) GB/s", text.strip())
    return float(speed.group(1)) if speed else None


def read_nvlink_status(text: str) -> NvlinkStatus:
    """Parse `nvidia-smi nvlink -s`, keeping what nvidia-smi could not say apart.

    Empty output (no GPU exposes NVLink, a 1-GPU VM slice) has no links and nothing
    unknown; the check decides what either means. Under a GPU line, anything that is
    neither a link line nor the all-inactive message (MIG mode, "not supported", a
    wording we do not know) makes that GPU unknown; so does a GPU with no line at all.
    "Device does not have or support Nvlink" is a statement, not an unknown: that GPU
    (or, alone, every GPU) has no NVLink, 0 links.
    """
    links: dict[int, dict[int, float | None]] = {}
    unknown: dict[int, str] = {}
    uuids: dict[int, str] = {}
    inactive: set[int] = set()
    absent: set[int] = set()
    if not text.strip():
        return NvlinkStatus(links, unknown, uuids)
    gpu: int | None = None
    for ln in text.splitlines():
        if m := _GPU_HDR.match(ln):
            gpu = int(m.group(1))
            links[gpu] = {}
            uuids[gpu] = m.group(3).strip()
        elif m := _LINK.match(ln):
            if gpu is None:
                raise ParseError("nvlink -s: link line before any GPU line")
            links[gpu][int(m.group(1))] = _link_speed(m.group(2))
        elif not ln.strip():
            continue
        elif gpu is None:
            if _NO_NVLINK.search(ln):
                return NvlinkStatus({}, {}, {}, no_nvlink_any=ln.strip())
            if _UNSUPPORTED.search(ln):
                return NvlinkStatus({}, {}, {}, ln.strip())
        elif _ALL_INACTIVE.search(ln):
            inactive.add(gpu)
        elif _NO_NVLINK.search(ln):
            absent.add(gpu)
        else:
            unknown.setdefault(gpu, ln.strip())
    if not links:
        raise ParseError("nvlink -s: no GPU found")
    for g, found in links.items():
        if found and g in absent:  # links listed and denied: nothing to trust
            unknown.setdefault(g, "link lines and 'Device does not have or support Nvlink'")
        if not found and g not in inactive and g not in absent and g not in unknown:
            unknown[g] = "no link line under the GPU line"
    for g in unknown:  # a GPU nvidia-smi could not say about has no trustworthy links
        links.pop(g, None)
        inactive.discard(g)
        absent.discard(g)
    return NvlinkStatus(links, unknown, uuids, all_inactive=frozenset(inactive),
                        no_nvlink=frozenset(absent))


def parse_nvlink_status(text: str) -> dict[int, dict[int, float | None]]:
    """{gpu: {link: GB/s or None when inactive}}; a GPU whose links are all inactive, or
    that has no NVLink, has {} (0 up); GPUs nvidia-smi cannot say about (MIG mode) are
    left out."""
    return read_nvlink_status(text).links


def parse_nvlink_errors(text: str) -> dict[int, dict[int, dict[str, int]]]:
    """Parse `nvidia-smi nvlink -e`: {gpu: {link: {"replay": n, "recovery": n, "crc": n}}}.

    Empty output (no NVLink exposed) gives {}.
    """
    if not text.strip():
        return {}
    out: dict[int, dict[int, dict[str, int]]] = {}
    gpu: int | None = None
    for ln in text.splitlines():
        if m := _GPU_HDR.match(ln):
            gpu = int(m.group(1))
            out[gpu] = {}
        elif gpu is None and (_UNSUPPORTED.search(ln) or _NO_NVLINK.search(ln)):
            return {}  # no counters to read (MIG mode, no NVLink): nothing, never zeros
        elif m := re.match(r"\s*Link (\d+): (\w+) Errors: (\d+)", ln):
            if gpu is None:
                raise ParseError("nvlink -e: counter line before any GPU line")
            kind = m.group(2).lower()
            out[gpu].setdefault(int(m.group(1)), {})[kind] = int(m.group(3))
    if not out:
        raise ParseError("nvlink -e: no GPU found")
    return out


def short_bus_id(bus_id: str) -> str:
    """00000000:00:06.0 -> 0000:00:06.0 (the form sysfs and lspci use)."""
    bus_id = bus_id.strip().lower()
    dom, _, rest = bus_id.partition(":")
    return f"{dom[-4:]}:{rest}" if rest else bus_id
