# ruff: noqa: E501  (tool output samples keep their real column widths)
"""Parsers and checks of the host-health classes, on the documented formats and variants.

Samples are written from each format's source or specification (named in each test's
docstring); none comes from a machine of ours (the captured H200 VM has no NVSwitch
driver, NVMe, EDAC or DIMM table to copy). Parsers report shapes; an unknown shape is a
ParseError (the check errors), never a hardware fault.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
from test_checks_gpu import make_ctx, run

from validation.judge import component, judge, remediation
from validation.model import CheckResult
from validation.probes import host_memory, nvme_health, nvswitch
from validation.probes.nvidia_smi import ParseError
from validation.workloads import membw


@pytest.fixture(autouse=True)
def _no_node_tools(tmp_path, monkeypatch):
    """The memory checks run ras-mc-ctl, edac-util and dmidecode where installed: none here,
    so a developer machine's own tools never answer for the sample node."""
    empty = tmp_path / "no-tools"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


# --- NVSwitch SXid lines ----------------------------------------------------------

SXID_LOG = """\
Nov 30 01:02:03 gpu01 kernel: [  812.1] nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal, Link 28 LTSSM Fault Up
Nov 30 01:02:03 gpu01 kernel: [  812.1] nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Severity 5 Engine instance 28 Sub-engine instance 00
Nov 30 01:02:03 gpu01 kernel: [  812.1] nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Data {0x00000000, 0x00000000, 0x00000000}
[  901.5] nvidia-nvswitch4: SXid (PCI:0000:c6:00.0): 19084, Non-fatal, Link 29 AN1 Heartbeat Timeout Error (First)
[  902.0] nvidia-nvswitch2: SXid (0000:c4:00.0): 12028, Link 33 egress non-posted PRIV error
[  903.0] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
"""


def test_sxid_lines_fatal_nonfatal_details_and_older_wording():
    """Line shapes from NVIDIA's Xid guide ("What is an SXid message") and logs the Fabric
    Manager guide quotes: the event line carries Fatal/Non-fatal, then Severity and Data
    detail lines repeat it; a line with neither word (older wording, no PCI: prefix) is
    kept with severity unknown; an XID line is not an SXid."""
    ev = nvswitch.parse_sxids(SXID_LOG)
    assert [(e.instance, e.bus, e.sxid, e.severity) for e in ev] == [
        (0, "0000:c2:00.0", 20034, "fatal"), (4, "0000:c6:00.0", 19084, "non-fatal"),
        (2, "0000:c4:00.0", 12028, "unknown")]
    assert ev[0].text == "Link 28 LTSSM Fault Up"
    assert nvswitch.parse_sxids("") == []


def test_sxid_detail_lines_read_apart_from_their_heads_on_a_public_capture():
    """A public capture (leptonai/gpud's SXid README, tests/fixtures/field/kernel-log): three
    switches log SXid 20034 at once, heads and their Severity/Data lines interleaved; on
    switch 2 a "Severity 1 Engine instance 60" line stands without its head. Each event once,
    on its switch: switch 0 links 63 and 62, switch 1 link 48, switch 2 links 60 (read from
    its record: Severity 1 = fatal) and 37. Before: switch 2's link 60 was no event."""
    log = (Path(__file__).resolve().parents[2] / "fixtures" / "field" / "kernel-log"
           / "sxid-gpud-readme.txt").read_text()
    ev = nvswitch.parse_sxids(log)
    assert sorted((e.instance, e.bus, e.sxid, e.severity) for e in ev) == [
        (0, "0000:05:00.0", 20034, "fatal"), (0, "0000:05:00.0", 20034, "fatal"),
        (1, "0000:06:00.0", 20034, "fatal"),
        (2, "0000:07:00.0", 20034, "fatal"), (2, "0000:07:00.0", 20034, "fatal")]


# Made from the nvswitch driver's source, not captured (NVIDIA/open-gpu-kernel-modules
# 595.45.04 src/common/nvswitch: intr_nvswitch.h NVSWITCH_REPORT_CORRECTABLE "Correctable,
# Link %02d %s%s" and NVSWITCH_REPORT_CONTAIN + _CONTAIN_DATA, a second record of the same
# event without a head; error_nvswitch.c _nvswitch_dump_error_entry "Severity %d Engine
# instance %02d ..." + "Data {...}"; SOE "SOE HALTED" + "SOE HALT data[%d] = ..."; the SXid
# printed %05d).
SXID_DRIVER_SHAPES = """Dec 01 10:00:00 gpu02 kernel: nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 22013, Correctable, Link 12 Minion Link DLREQ interrupt
Dec 01 10:00:00 gpu02 kernel: nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 22013, Severity 0 Engine instance 12 Sub-engine instance 00
Dec 01 10:00:00 gpu02 kernel: nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 22013, Data {0x0000000c, 0x0000000c, 0x00000000, 0x0000000c, 0x80000302, 0x00000000, 0x00000000, 0x00000000, 0x00000000}
Dec 01 10:00:01 gpu02 kernel: nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 12028, Fatal, Link 36 egress non-posted PRIV error (First)
Dec 01 10:00:01 gpu02 kernel: nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 12028, Severity 1 Engine instance 36 Sub-engine instance 00
Dec 01 10:00:01 gpu02 kernel: nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 12028, Data {0x00000001, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000}
Dec 01 10:00:01 gpu02 kernel: nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 12028, Severity 1 Engine instance 36 Sub-engine instance 00
Dec 01 10:00:01 gpu02 kernel: nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 12028, Data {0x00000001, 0x00c0ffee, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000}
Dec 01 10:00:02 gpu02 kernel: nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 26006, SOE HALTED
Dec 01 10:00:02 gpu02 kernel: nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 26006, SOE HALT data[0] = 0x0000000000000042
Dec 01 10:00:02 gpu02 kernel: nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 26006, SOE HALT data[1] = 0x0000000000000000
"""


def test_sxid_correctable_heads_supplementary_records_and_soe_data_lines():
    """Before: the Correctable event read as severity unknown (judged fatal), and each SOE
    HALT data line as one more event. Now: one non-fatal event on switch 1, one fatal on
    switch 3 (its second record, no head, not counted again), one on switch 0."""
    ev = nvswitch.parse_sxids(SXID_DRIVER_SHAPES)
    assert [(e.instance, e.sxid, e.severity) for e in ev] == [
        (1, 22013, "non-fatal"), (3, 12028, "fatal"), (0, 26006, "unknown")]
    assert ev[0].text == "Link 12 Minion Link DLREQ interrupt"


def test_nvswitch_bus_key_forms():
    assert nvswitch.bus_key("00000000:C5:00.0") == "0000:c5:00.0"
    assert nvswitch.bus_key("c5:00.0") == "0000:c5:00.0"
    assert nvswitch.bus_key("0000:c5:00.0") == "0000:c5:00.0"


def _switch_root(ctx, bdfs: list[str]) -> None:
    for i, bdf in enumerate(bdfs):
        d = ctx.path(f"/proc/driver/nvidia-nvswitch/devices/{bdf}")
        d.mkdir(parents=True)
        (d / "information").write_text(f"Model: \t\t NVIDIA NVSwitch\nDevice Minor: \t {i}\n"
                                       f"Bus Location: \t {bdf}\n")


def test_nvswitch_sxid_check_names_the_switch_and_its_bus(tmp_path):
    ctx = make_ctx(tmp_path)
    _switch_root(ctx, ["0000:c2:00.0", "0000:c3:00.0", "0000:c4:00.0", "0000:c5:00.0"])
    ctx.path("/var/log/kern.log").write_text(SXID_LOG)
    res = run("nvswitch.sxid", ctx)
    fatal = {mm.labels["nvswitch"]: mm.value for mm in res.measurements
             if mm.name == "nvswitch.sxid_fatal"}
    # switch 4 is not in the driver's list: its SXid still names it (from nvidia-nvswitch4)
    assert fatal == {"0": 1, "1": 0, "2": 1, "3": 0, "4": 0}
    bad = [v for v in judge([res], ctx.profile) if v.outcome == "fail"]
    assert {(v.metric, v.labels["nvswitch"]) for v in bad} == {
        ("nvswitch.sxid_fatal", "0"), ("nvswitch.sxid_fatal", "2"),
        ("nvswitch.sxid_nonfatal", "4")}
    v0 = next(v for v in bad if v.labels["nvswitch"] == "0")
    assert "NVSwitch 0 (PCI 0000:c2:00.0)" in v0.message and "Fabric Manager" in v0.remediation


def test_nvswitch_sxid_check_clean_log_passes(tmp_path):
    ctx = make_ctx(tmp_path)
    _switch_root(ctx, ["0000:c2:00.0", "0000:c3:00.0"])
    res = run("nvswitch.sxid", ctx)
    verdicts = [v for v in judge([res], ctx.profile) if v.metric.startswith("nvswitch.sxid")]
    assert len(verdicts) == 4 and all(v.outcome == "pass" for v in verdicts)


# --- nvme smart-log -o json -------------------------------------------------------

SMART_1X = {"critical_warning": 0, "temperature": 311, "avail_spare": 100, "spare_thresh": 10,
            "percent_used": 1, "data_units_read": 28167888, "data_units_written": 19397424,
            "host_read_commands": 561183142, "host_write_commands": 171788833,
            "controller_busy_time": 1354, "power_cycles": 2385, "power_on_hours": 1363,
            "unsafe_shutdowns": 133, "media_errors": 0, "num_err_log_entries": 608,
            "warning_temp_time": 0, "critical_comp_time": 0}


def test_smart_log_nvme_cli_1x_and_2x_integers():
    """nvme-cli 1.x/2.x json_smart_log (nvme-print-json.c): integers, temperature in Kelvin."""
    s = nvme_health.parse_smart_log(json.dumps(SMART_1X))
    assert (s.critical_warning, s.temperature_c, s.percentage_used, s.media_errors,
            s.error_log_entries, s.avail_spare, s.spare_thresh) == (0, 37.9, 1, 0, 608, 100, 10)


def test_smart_log_2x_verbose_object_strings_and_renamed_keys():
    """nvme-cli 2.x verbose: critical_warning is an object with "value"; 128-bit counters
    as decimal strings; human-mode temperature strings; percentage_used spelling."""
    d = {**SMART_1X, "critical_warning": {"value": 4, "available_spare": 0, "temp_threshold": 0,
                                          "reliability_degraded": 1, "ro": 0},
         "media_errors": "340282366920938463463374607431768211455",
         "num_err_log_entries": "1,024", "temperature": "45 °C (318 K)"}
    del d["percent_used"]
    d["percentage_used"] = "103%"
    s = nvme_health.parse_smart_log(json.dumps(d))
    assert s.critical_warning == 4 and s.media_errors == 2**128 - 1
    assert s.error_log_entries == 1024 and s.temperature_c == 45.0 and s.percentage_used == 103
    assert nvme_health.parse_smart_log(json.dumps({**SMART_1X, "temperature": "318 K"})
                                       ).temperature_c == 44.9


@pytest.mark.parametrize("text,match", [
    ("Failed to open /dev/nvme9", "not JSON"),
    (json.dumps({"Devices": []}), "no critical_warning"),
    (json.dumps({"critical_warning": 0}), "no percent_used"),
    (json.dumps({**SMART_1X, "media_errors": "lots"}), "media_errors unreadable"),
    (json.dumps({**SMART_1X, "temperature": "hot"}), "temperature unreadable"),
])
def test_smart_log_unknown_shapes_are_parse_errors(text, match):
    with pytest.raises(ParseError, match=match):
        nvme_health.parse_smart_log(text)


# --- SMBIOS type 17 (DSP0134), built here independently of hwsim's renderer -----------

def _t17(length: int, size: int, speed: int = 4800, conf: int = 4400, ext_size: int = 0,
         ext_speed: int = 0, ext_conf: int = 0, loc: str = "A1", serial: str = "80CE0123") -> bytes:
    """A type 17 structure of the given formatted length (0x1C: SMBIOS 2.3-2.6, 0x28: 2.8,
    0x5C: 3.3+), strings 1 locator, 2 bank, 3 maker, 4 serial, 5 asset, 6 part."""
    f = bytearray(max(length, 0x5C))
    struct.pack_into("<BBH", f, 0, 17, length, 0x1100)
    struct.pack_into("<H", f, 0x0C, size)
    f[0x10], f[0x11], f[0x12] = 1, 2, 0x22
    struct.pack_into("<H", f, 0x15, speed)
    f[0x17], f[0x18], f[0x19], f[0x1A] = 3, 4, 5, 6
    struct.pack_into("<I", f, 0x1C, ext_size)
    struct.pack_into("<H", f, 0x20, conf)
    struct.pack_into("<I", f, 0x54, ext_speed)
    struct.pack_into("<I", f, 0x58, ext_conf)
    strings = [loc, "CPU1", "Hynix", serial, "Not Specified", "HMCG94AGBRA181N"]
    return bytes(f[:length]) + b"\x00".join(s.encode() for s in strings) + b"\x00\x00"


def _other(typ: int) -> bytes:
    return struct.pack("<BBH", typ, 8, 0x10) + b"\x01\x02\x03\x04" + b"Dell Inc.\x00\x00"


END = struct.pack("<BBH", 127, 4, 0xFEFF) + b"\x00\x00"


def test_smbios_memory_devices_across_versions():
    """DSP0134 type 17: 2.8 with a 64 GB module (0x7FFF + extended size in MB), 2.3 layout
    (length 0x1C: no configured speed), KB-granular size (bit 15), 3.3 extended speeds
    (0xFFFF), an empty slot (size 0), unknown size (0xFFFF); other types skipped."""
    table = b"".join([
        _other(0), _other(16),
        _t17(0x28, 0x7FFF, ext_size=65536, loc="A1"),
        _t17(0x1C, 16384, speed=3200, loc="A2"),
        _t17(0x28, 0x8000 | 28672, loc="A3"),
        _t17(0x5C, 0x7FFF, speed=0xFFFF, conf=0xFFFF, ext_size=131072, ext_speed=8800,
             ext_conf=8000, loc="A4"),
        _t17(0x28, 0, speed=0, conf=0, loc="A5"),
        _t17(0x28, 0xFFFF, loc="A6"),
        END, _t17(0x28, 1024, loc="after-end"),
    ])
    d = host_memory.parse_smbios_memory(table)
    assert [x.locator for x in d] == ["A1", "A2", "A3", "A4", "A5", "A6"]
    assert [x.size_mib for x in d] == [65536, 16384, 28, 131072, 0, None]
    assert (d[0].speed_mts, d[0].configured_mts, d[0].serial, d[0].part) == (
        4800, 4400, "80CE0123", "HMCG94AGBRA181N")
    assert d[1].configured_mts is None and d[1].speed_mts == 3200
    assert (d[3].speed_mts, d[3].configured_mts) == (8800, 8000)
    assert [x.populated for x in d] == [True, True, True, True, False, False]


def test_smbios_truncated_table_is_a_parse_error():
    with pytest.raises(ParseError, match="unterminated"):
        host_memory.parse_smbios_memory(_t17(0x28, 1024)[:-2])
    with pytest.raises(ParseError, match="bad structure length"):
        host_memory.parse_smbios_memory(b"\x11\x02\x00\x00\x00\x00")


def test_hwsim_smbios_table_reads_back_and_an_empty_slot_shows():
    from rackready_lab.hwsim.cli.host_render import smbios_table
    from rackready_lab.hwsim.faults import apply_fault
    from rackready_lab.hwsim.state import build_state

    st = apply_fault(build_state("dl380a-gen12-h200nvl", "n1"), "dimm-missing", "PROC 2 DIMM 7")
    d = host_memory.parse_smbios_memory(smbios_table(st))
    assert len(d) == 32 and sum(x.populated for x in d) == 31
    gone = next(x for x in d if not x.populated)
    assert gone.locator == "PROC 2 DIMM 7" and gone.size_mib == 0
    assert {x.configured_mts for x in d if x.populated} == {5200}


# --- EDAC sysfs ---------------------------------------------------------------------

def _write(p: Path, text: object) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(f"{text}\n")


def test_edac_dimm_rank_and_csrow_layouts(tmp_path):
    """Kernel admin-guide/ras.rst: mcN/dimmN (or rankN) with dimm_label, size,
    dimm_ce_count, dimm_ue_count; older drivers' csrowN/chM_ce_count + ue_count; noinfo."""
    mc = tmp_path / "mc"
    for name, label, ce, ue in (("dimm0", "CPU_SrcID#0_MC#0_Chan#0_DIMM#0", 2, 0),
                                ("dimm10", "A3", 0, 1), ("dimm2", "", 0, 0)):
        _write(mc / f"mc0/{name}/dimm_label", label)
        _write(mc / f"mc0/{name}/size", 65536)
        _write(mc / f"mc0/{name}/dimm_ce_count", ce)
        _write(mc / f"mc0/{name}/dimm_ue_count", ue)
    for f, v in (("ce_count", 2), ("ue_count", 1), ("ue_noinfo_count", 3)):
        _write(mc / f"mc0/{f}", v)
    _write(mc / "mc1/rank0/dimm_label", "B1")
    _write(mc / "mc1/rank0/dimm_ue_count", 0)
    _write(mc / "mc10/csrow0/ch0_ce_count", 5)
    _write(mc / "mc10/csrow0/ch0_dimm_label", "DIMM_A1")
    _write(mc / "mc10/csrow0/ch1_ce_count", 0)
    _write(mc / "mc10/csrow0/ue_count", 2)
    mcs = host_memory.read_edac(mc)
    assert [m.name for m in mcs] == ["mc0", "mc1", "mc10"]
    assert [(d.name, d.label, d.ce, d.ue) for d in mcs[0].dimms] == [
        ("dimm0", "CPU_SrcID#0_MC#0_Chan#0_DIMM#0", 2, 0), ("dimm2", "", 0, 0),
        ("dimm10", "A3", 0, 1)]
    assert mcs[0].ue_noinfo == 3 and mcs[1].dimms[0].label == "B1"
    assert [(d.name, d.label, d.ce, d.ue) for d in mcs[2].dimms] == [
        ("csrow0/ch0", "DIMM_A1", 5, 2), ("csrow0/ch1", "", 0, 0)]
    assert host_memory.read_edac(tmp_path / "absent") == []


# --- machine checks ------------------------------------------------------------------

MCE_LOG = """\
[ 1201.0] mce: [Hardware Error]: Machine check events logged
[ 1202.0] mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 7: cc00008000010090
[ 1202.0] mce: [Hardware Error]: TSC 0 ADDR 4a3c21000 MISC 0
[ 1203.0] mce: [Hardware Error]: CPU 56: Machine Check: 0 Bank 13: bc0000000000009f
[ 1204.0] mce: [Hardware Error]: CPU 0: Machine Check Exception: 5 Bank 4: b200000000070f0f
[ 1300.0] {1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1
[ 1300.0] {1}[Hardware Error]: event severity: corrected
[ 1300.0] {1}[Hardware Error]:  Error 0, type: corrected
[ 1300.0] {1}[Hardware Error]:   section_type: memory error
[ 1300.0] {1}[Hardware Error]:   node:0 card:0 module:0 rank:0 bank:5 device:0 row:1 column:8 DIMM location: A7
[ 1310.0] {2}[Hardware Error]: event severity: recoverable
[ 1310.0] {2}[Hardware Error]:   physical_address: 0x0000004a3c21000
[ 1310.0] {2}[Hardware Error]:   DIMM location: PROC 1 DIMM 3
"""


def test_mce_and_firmware_first_records():
    """x86 mce/core.c __print_mce ("Machine Check" + MCi_STATUS, bit 61 UC; "Exception"
    for an exception) and "events logged"; APEI GHES (efi/cper.c) severity + DIMM location."""
    ev = host_memory.parse_hw_errors(MCE_LOG)
    assert [(e.source, e.uncorrected, e.cpu, e.bank, e.dimm) for e in ev] == [
        ("mce", False, "3", "7", ""),
        ("mce", True, "56", "13", ""), ("mce", True, "0", "4", ""),
        ("ghes", False, "", "", "A7"), ("ghes", True, "", "", "PROC 1 DIMM 3")]
    assert host_memory.parse_hw_errors("mce: [Hardware Error]: TSC 0\n") == []


# One corrected record as the kernel logs it: mce_notify_irq's notice (with the "mce: "
# prefix of arch/x86/kernel/cpu/mce/core.c, or bare "[Hardware Error]: " of older kernels),
# then the record itself (__print_mce), then AMD's decoding of the same record
# (drivers/edac/mce_amd.c amd_decode_mce) where that decoder is loaded.
NOTICE_AND_RECORD = """\
[  333.2] mce: [Hardware Error]: Machine check events logged
[  333.2] [Hardware Error]: Machine check events logged
[  333.2] mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 15: dc2040000000011b
[  333.2] [Hardware Error]: Corrected error, no action required.
[  333.2] [Hardware Error]: CPU:0 (19:1:1) MC15_STATUS[Over|CE|MiscV|AddrV|-|-|SyndV|CECC|-|-|-]: 0xdc2040000000011b
[  334.0] [Hardware Error]: CPU:4 (19:1:1) MC5_STATUS[-|UE|MiscV|AddrV|PCC|-|-|-|-|-|-]: 0xbe00000000800400
"""


def test_mce_notices_are_not_records_and_amd_records_count_once():
    """Before: each "Machine check events logged" notice counted as a corrected error
    (two notices + one record = 3). Now only records count: the CPU 0 bank 15 record once
    (kernel line and AMD's decoding of it), and AMD's own UE record on CPU 4."""
    ev = host_memory.parse_hw_errors(NOTICE_AND_RECORD)
    assert [(e.cpu, e.bank, e.uncorrected) for e in ev] == [("0", "15", False), ("4", "5", True)]
    only_notices = "mce: [Hardware Error]: Machine check events logged\n" * 3
    assert host_memory.parse_hw_errors(only_notices) == []


def test_memory_errors_check_counts_records_not_notices(tmp_path):
    ctx = make_ctx(tmp_path)
    ctx.path("/var/log/kern.log").write_text(NOTICE_AND_RECORD)
    res = run("host.memory_errors", ctx)
    got = {(mm.name, mm.labels.get("mce_at")): mm.value for mm in res.measurements
           if mm.name.startswith("host.mce")}
    assert got == {("host.mce_corrected", None): 1,
                   ("host.mce_uncorrected", "CPU 4 bank 5"): 1}


# Four corrected errors of one bank, identical records (CPU 2, bank 17, MCi_STATUS
# 9c2040000000011b, ADDR 319deb440) logged hours apart: the four events rasdaemon lists in
# NixOS/infra pull 523 (ras-mc-ctl --errors on an AMD Zen 2 host, cpuid 0x00870f10), written
# as `journalctl -k` prints them: the kernel's record (arch/x86/kernel/cpu/mce/core.c
# __print_mce) and AMD's decoding of it (drivers/edac/mce_amd.c) at the same time. Made
# from those documented formats and rasdaemon's fields, not captured.
REPEATED_CE = "".join(
    f"{t} haumea kernel: mce: [Hardware Error]: Machine check events logged\n"
    f"{t} haumea kernel: mce: [Hardware Error]: CPU 2: Machine Check: 0 Bank 17: "
    "9c2040000000011b\n"
    f"{t} haumea kernel: mce: [Hardware Error]: TSC 0 ADDR 319deb440 MISC d01b0fff01000000 \n"
    f"{t} haumea kernel: [Hardware Error]: Corrected error, no action required.\n"
    f"{t} haumea kernel: [Hardware Error]: CPU:2 (17:71:0) "
    "MC17_STATUS[Over|CE|MiscV|AddrV|-|-|SyndV|CECC|-|-|-]: 0x9c2040000000011b\n"
    for t in ("Dec 19 03:52:38", "Dec 20 09:33:02", "Dec 20 10:00:20", "Dec 20 20:44:46"))


def test_identical_corrected_records_at_different_times_are_distinct_events():
    """Before: any repeat of the last CPU/bank/status merged into it as if decoded twice,
    so four corrected errors read as one. A record decoded twice is the same record from
    another decoder at the same time; the same record at another time is another event."""
    ev = host_memory.parse_hw_errors(REPEATED_CE)
    assert [(e.cpu, e.bank, e.uncorrected) for e in ev] == [("2", "17", False)] * 4
    # dmesg times, and no times at all: the kernel never prints one record twice itself
    kernel = "mce: [Hardware Error]: CPU 2: Machine Check: 0 Bank 17: 9c2040000000011b\n"
    assert len(host_memory.parse_hw_errors(kernel * 4)) == 4
    dmesg = "".join(f"[{t:12.6f}] {kernel}" for t in (100.0, 100.5, 230.25))
    assert len(host_memory.parse_hw_errors(dmesg)) == 3


def test_memory_errors_check_counts_each_repeated_corrected_record(tmp_path):
    ctx = make_ctx(tmp_path)
    ctx.path("/var/log/kern.log").write_text(REPEATED_CE)
    res = run("host.memory_errors", ctx)
    got = [mm.value for mm in res.measurements if mm.name == "host.mce_corrected"]
    assert got == [4]


FIELD = Path(__file__).resolve().parents[2] / "fixtures" / "field" / "kernel-log"


def test_edac_sbridge_report_is_one_corrected_error_on_its_dimm():
    """A public capture (kernel Documentation/firmware-guide/acpi/apei/einj.rst, see
    tests/fixtures/field/kernel-log/README.md): sb_edac's dump of the record ("EDAC sbridge
    MC3: CPU 0: Machine Check Event: 0 Bank 7: ...") and the EDAC core's report of it
    (drivers/edac/edac_mc.c: "EDAC MC3: 1 CE memory read error on <label> (...)") are one
    corrected error on that DIMM. Before: neither line matched, the host looked clean."""
    ev = host_memory.parse_hw_errors((FIELD / "edac-sbridge-einj.txt").read_text())
    assert [(e.source, e.uncorrected, e.cpu, e.bank, e.dimm, e.count) for e in ev] == [
        ("edac", False, "0", "7", "CPU_SrcID#0_Channel#0_DIMM#0", 1)]


def test_edac_sbridge_storm_counts_each_report_with_its_count():
    """A public capture (oberstet/scratchbox, Ubuntu 3.19 on an Ivy Bridge-EP): a CMCI
    storm where sb_edac printed 12 record dumps and then their 12 reports in the same order
    ("5 CE ... OVERFLOW", "2 CE", ten "1 CE"). Each report is one record with its count
    (18 corrected errors), each dump paired with one report, never counted again."""
    ev = host_memory.parse_hw_errors((FIELD / "edac-sbridge-cmci-storm.txt").read_text())
    assert len(ev) == 12 and sum(e.count for e in ev) == 18
    assert {(e.source, e.uncorrected, e.cpu, e.bank, e.dimm) for e in ev} == {
        ("edac", False, "24", "7", "CPU_SrcID#2_Channel#2_DIMM#0")}
    assert [e.count for e in ev][:2] == [5, 1]


# skx_edac / i10nm_edac (drivers/edac/skx_common.c skx_mce_check_error: the record dump at
# KERN_DEBUG, "0x"-prefixed; skx_mce_output_error -> edac_mc_handle_error, the label
# CPU_SrcID#<socket>_MC#<imc>_Chan#<ch>_DIMM#<dimm>): made from that source, not captured.
# A report of core_err_cnt 0 is still one error; a report without its dump (a log that
# keeps no debug level) stands alone; UE is uncorrected.
SKX_LOG = """[ 1201.1] EDAC skx MC0: HANDLING MCE MEMORY ERROR
[ 1201.1] EDAC skx MC0: CPU 0: Machine Check Event: 0x0 Bank 255: 0x940000000000009f
[ 1201.1] EDAC skx MC0: TSC 0x0
[ 1201.1] EDAC skx MC0: ADDR 0x30aa905a80
[ 1201.1] EDAC skx MC0: MISC 0x0
[ 1201.1] EDAC skx MC0: PROCESSOR 0:0x806f8 TIME 1681559382 SOCKET 0 APIC 0x0
[ 1201.1] EDAC MC0: 0 CE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x30aa905 offset:0xa80 grain:32 syndrome:0x0 -  err_code:0x0000:0x009f  SystemAddress:0x30aa905a80 ProcessorSocketId:0x0 MemoryControllerId:0x0 ChannelAddress:0x605520980 ChannelId:0x1)
[ 2300.0] EDAC MC2: 3 CE memory read error on CPU_SrcID#1_MC#2_Chan#0_DIMM#0 (channel:0 slot:0 page:0x1f2e3d offset:0x40 grain:32 syndrome:0x0 -  err_code:0x0000:0x009f  SystemAddress:0x1f2e3d040 ProcessorSocketId:0x1 MemoryControllerId:0x2 ChannelAddress:0x3e5c7a040 ChannelId:0x0)
[ 2400.0] EDAC i10nm MC1: HANDLING MCE MEMORY ERROR
[ 2400.0] EDAC i10nm MC1: CPU 7: Machine Check Exception: 0x5 Bank 13: 0xbd800000000c0090
[ 2400.0] EDAC MC1: 1 UE memory read error on CPU_SrcID#0_MC#1_Chan#1_DIMM#0 (channel:1 slot:0 page:0x5a0b1c offset:0x0 grain:32 -  err_code:0x0000:0x0090  SystemAddress:0x5a0b1c000 ProcessorSocketId:0x0 MemoryControllerId:0x1 ChannelAddress:0xb41638000 ChannelId:0x1)
"""


def test_edac_skx_and_i10nm_reports_with_counts_and_dimms(tmp_path):
    """Before: none matched (a clean host). Now: 1 (the "0 CE" record), 3 and 1 UE, each
    on its DIMM label, judged by host.memory_errors as machine-check records."""
    ev = host_memory.parse_hw_errors(SKX_LOG)
    assert [(e.uncorrected, e.cpu, e.bank, e.dimm, e.count) for e in ev] == [
        (False, "0", "255", "CPU_SrcID#0_MC#0_Chan#1_DIMM#0", 1),
        (False, "", "", "CPU_SrcID#1_MC#2_Chan#0_DIMM#0", 3),
        (True, "7", "13", "CPU_SrcID#0_MC#1_Chan#1_DIMM#0", 1)]
    ctx = make_ctx(tmp_path)
    ctx.path("/var/log/kern.log").write_text(SKX_LOG)
    res = run("host.memory_errors", ctx)
    got = {(mm.name, mm.labels.get("mce_at")): mm.value for mm in res.measurements
           if mm.name.startswith("host.mce")}
    assert got == {("host.mce_corrected", None): 4,
                   ("host.mce_uncorrected", "CPU_SrcID#0_MC#1_Chan#1_DIMM#0"): 1}


# amd64_edac reports the record mce_amd just decoded (drivers/edac/mce_amd.c
# amd_decode_mce -> amd64_edac.c decode_umc_error -> edac_mc_handle_error, the label
# mc#<n>csrow#<r>channel#<c> where no DIMM label is set), and ghes_edac the firmware-first
# record cper.c just printed: made from those sources, not captured. Each is one error.
REPORTED_TWICE = """[  333.2] mce: [Hardware Error]: Machine check events logged
[  333.2] [Hardware Error]: Corrected error, no action required.
[  333.2] [Hardware Error]: CPU:0 (17:1:1) MC15_STATUS[Over|CE|MiscV|AddrV|-|-|SyndV|CECC|-|-|-]: 0xdc2040000000011b
[  333.2] [Hardware Error]: Error Addr: 0x0000000065aa27c0
[  333.2] [Hardware Error]: Unified Memory Controller Ext. Error Code: 0
[  333.3] EDAC MC0: 1 CE on mc#0csrow#0channel#0 (csrow:0 channel:0 page:0x10b544 offset:0xfc0 grain:64 syndrome:0x4020)
[  333.3] [Hardware Error]: cache level: L3/GEN, tx: GEN, mem-tx: RD
[ 1300.0] {1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1
[ 1300.0] {1}[Hardware Error]: event severity: corrected
[ 1300.0] {1}[Hardware Error]:   section_type: memory error
[ 1300.0] {1}[Hardware Error]:   node:0 card:0 module:0 rank:0 bank:5 device:0 row:1 column:8 DIMM location: A7
[ 1300.0] EDAC MC0: 1 CE Single-bit ECC on A7 (node:0 card:0 module:0 rank:0 bank:5 device:0 row:1 column:8 page:0x4a3c21 offset:0x0 grain:1 syndrome:0x0)
"""


def test_edac_reports_of_records_already_read_are_not_counted_again():
    ev = host_memory.parse_hw_errors(REPORTED_TWICE)
    assert [(e.source, e.uncorrected, e.cpu, e.bank, e.dimm, e.count) for e in ev] == [
        ("mce", False, "0", "15", "mc#0csrow#0channel#0", 1),
        ("ghes", False, "", "", "A7", 1)]


def test_memory_errors_check_names_the_dimm_slot(tmp_path):
    ctx = make_ctx(tmp_path)
    base = ctx.path("/sys/devices/system/edac/mc/mc2/dimm1")
    _write(base / "dimm_label", "B5")
    _write(base / "dimm_ue_count", 1)
    _write(base / "dimm_ce_count", 0)
    ctx.path("/var/log/kern.log").write_text(MCE_LOG)
    res = run("host.memory_errors", ctx)
    bad = [v for v in judge([res], ctx.profile) if v.outcome == "fail"]
    msgs = {v.metric: [] for v in bad}
    for v in bad:
        msgs[v.metric].append(v.message + " | " + v.remediation)
    assert any("DIMM slot B5" in t and "replace" in t for t in msgs["host.edac_uncorrected"])
    where = " ".join(msgs["host.mce_uncorrected"])
    assert "PROC 1 DIMM 3" in where and "CPU 56 bank 13" in where and "CPU 0 bank 4" in where


def test_memory_errors_check_clean_node_passes(tmp_path):
    ctx = make_ctx(tmp_path)
    res = run("host.memory_errors", ctx)
    assert {(mm.name, mm.value) for mm in res.measurements} == {
        ("host.edac_controllers", 0), ("host.mce_uncorrected", 0), ("host.mce_corrected", 0),
        ("host.memory_error_sources", "sysfs-edac (no controller),kernel-log")}
    fact = next(mm for mm in res.measurements if mm.name == "host.memory_error_sources")
    assert dict(fact.labels)["not_read"] == ("edac-util: not installed; "
                                            "ras-mc-ctl: not installed")
    assert not [v for v in judge([res], ctx.profile) if v.outcome == "fail"]


def test_dimm_check_against_the_profile_names_the_slot(tmp_path):
    ctx = make_ctx(tmp_path)
    slots = [_t17(0x28, 0x7FFF, ext_size=65536, loc=f"{s}{i}", serial=f"S{s}{i}")
             for s in "AB" for i in range(1, 17)]
    slots[20] = _t17(0x28, 0x7FFF, ext_size=32768, loc="B5", serial="SB5")  # wrong size
    slots[7] = _t17(0x28, 0, speed=0, conf=0, loc="A8")  # empty
    slots[3] = _t17(0x28, 0x7FFF, ext_size=65536, conf=3600, loc="A4", serial="SA4")  # slow
    table = ctx.path("/sys/firmware/dmi/tables/DMI")
    table.parent.mkdir(parents=True)
    table.write_bytes(_other(0) + b"".join(slots) + END)
    res = run("host.dimms", ctx)
    bad = {(v.metric, v.message) for v in judge([res], ctx.profile) if v.outcome == "fail"}
    text = " ".join(msg for _, msg in bad)
    assert "host.dimm_count = 31 on empty DIMM slots A8" in text
    assert "host.dimm_size_gib = 32 GiB on DIMM slot B5 (serial SB5)" in text
    assert "host.dimm_speed_mts = 3600 MT/s on DIMM slot A4" in text
    assert {m for m, _ in bad} == {"host.dimm_count", "host.dimm_size_gib",
                                   "host.dimm_speed_mts", "host.memory_total_gib"}


def test_dimm_check_without_a_table_is_skipped_never_passed(tmp_path):
    from validation.checks.registry import CheckSkipped

    with pytest.raises(CheckSkipped, match="no SMBIOS table"):
        run("host.dimms", make_ctx(tmp_path))


# --- component wording and remediation ---------------------------------------------------

def test_parts_are_named_for_the_technician():
    assert component({"drive": "/dev/nvme3n1", "serial": "S7J1NA0W123456"}) == \
        "NVMe drive /dev/nvme3n1 (serial S7J1NA0W123456)"
    assert component({"nvswitch": "2", "bus_id": "0000:e6:00.0"}) == \
        "NVSwitch 2 (PCI 0000:e6:00.0)"
    assert component({"dimm": "A3", "edac": "mc0/dimm2"}) == "DIMM slot A3 (EDAC mc0/dimm2)"
    assert "replace NVMe drive" in remediation("nvme.media_errors", {"drive": "/dev/nvme1n1",
                                                                     "serial": "X"})
    # the SXid text, not the GPU XID catalog's
    assert "Fabric Manager" in remediation("nvswitch.sxid_fatal", {"nvswitch": "0"})


# --- memory bandwidth workload -----------------------------------------------------------

def test_cpulist_and_numa_nodes_from_sysfs(tmp_path):
    assert membw.parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert membw.parse_cpulist("") == []
    allowed = sorted(os.sched_getaffinity(0))
    _write(tmp_path / "node0/cpulist", ",".join(map(str, allowed)))
    _write(tmp_path / "node1/cpulist", "")  # a memory-only node (CXL/HBM): no CPU to drive it
    assert membw.numa_nodes(tmp_path) == {0: allowed}
    assert membw.numa_nodes(tmp_path / "absent") == {0: allowed}


def test_one_thread_per_core_and_llc(tmp_path):
    for c, sib in ((0, "0,2"), (1, "1,3"), (2, "0,2"), (3, "1,3")):
        _write(tmp_path / f"cpu{c}/topology/thread_siblings_list", sib)
        _write(tmp_path / f"cpu{c}/cache/index3/size", "105M")
        _write(tmp_path / f"cpu{c}/cache/index3/shared_cpu_list", "0-3")
    assert membw.one_per_core([0, 1, 2, 3], tmp_path) == [0, 1]
    assert membw.llc_bytes([0, 1, 2, 3], tmp_path) == 105 << 20


def test_triad_measures_a_positive_bandwidth():
    cpus = sorted(os.sched_getaffinity(0))[:2]
    r = membw.triad_node(0, cpus, 16 << 20, reps=3)
    assert r.best_gbs > 0 and len(r.times_s) == 3 and r.array_bytes >= 16 << 20


def test_membw_floor_fails_a_slow_node(tmp_path):
    ctx = make_ctx(tmp_path)
    res = CheckResult("host.membw", "ok", 0.0, (
        host_measure("host.membw_triad", 92.5, {"numa": "1", "cores": "56"}),
        host_measure("host.membw_triad", 231.0, {"numa": "0", "cores": "56"})), "", ())
    bad = [v for v in judge([res], ctx.profile) if v.outcome == "fail"]
    assert [v.labels["numa"] for v in bad] == ["1"] and "NUMA node 1" in bad[0].message


def host_measure(name, value, labels):
    from validation.checks.common import m

    return m(name, value, labels)


def test_health_delta_catches_sxids_and_memory_errors_during_the_run(tmp_path):
    from validation.checks.health_delta import read_counters

    ctx = make_ctx(tmp_path)
    _switch_root(ctx, ["0000:c2:00.0", "0000:c3:00.0"])
    dimm = ctx.path("/sys/devices/system/edac/mc/mc0/dimm0")
    _write(dimm / "dimm_label", "A1")
    _write(dimm / "dimm_ue_count", 0)
    # an SXid and a corrected MCE from before the run: already there at the start, no delta
    ctx.path("/var/log/kern.log").write_text(SXID_LOG.splitlines()[0] + "\n")
    ctx.cache["health.start"] = read_counters(ctx)
    _write(dimm / "dimm_ue_count", 1)
    ctx.path("/var/log/kern.log").write_text(
        SXID_LOG.splitlines()[0] + "\n" + SXID_LOG.splitlines()[0].replace("c2:00.0", "c3:00.0")
        .replace("nvswitch0", "nvswitch1") + "\n"
        + "[ 1204.0] mce: [Hardware Error]: CPU 0: Machine Check Exception: 5 Bank 4: b200000000070f0f\n")
    res = run("health.delta", ctx)
    # (the sysroot holds no IB port: those counters fail as not measured, not listed here)
    bad = sorted((v.metric, v.value, v.message) for v in judge([res], ctx.profile)
                 if v.outcome == "fail" and v.metric.startswith("health.delta.")
                 and "not measured" not in v.message)
    assert [(m, val) for m, val, _ in bad] == [("health.delta.edac_uncorrected", 1.0),
                                              ("health.delta.mce_uncorrected", 1.0),
                                              ("health.delta.sxid", 1.0)]
    assert "DIMM slot A1" in bad[0][2] and "NVSwitch 1 (PCI 0000:c3:00.0)" in bad[2][2]


def test_a_gpu_slice_is_not_the_bare_metal_host():
    from validation.profile import load_profile, scope

    full = load_profile("xe9680-h200")
    assert "bare-metal" in full.requires
    assert "bare-metal" in scope(full, gpus=8).requires
    assert "bare-metal" not in scope(full, gpus=2).requires
    assert "bare-metal" not in scope(full, without=("bare-metal",)).requires
