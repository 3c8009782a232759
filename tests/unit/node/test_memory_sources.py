# ruff: noqa: E501  (tool output samples keep their real line lengths)
"""Host memory formats beside sysfs: `ras-mc-ctl --errors`, `edac-util -v`, `dmidecode -t
memory`, and the raw SMBIOS table, on public captures (tests/fixtures/field/*/README.md says
where each comes from) and the documented variants of each tool's versions; the checks that
read them, with stub tools on PATH. Garbage is unparsed: an error, never "no errors" and never
"0 DIMMs"."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_checks_gpu import make_ctx, run

from validation.judge import judge
from validation.probes.dmidecode import parse_dmidecode_memory
from validation.probes.edac_util import parse_edac_util
from validation.probes.host_memory import parse_smbios_memory
from validation.probes.nvidia_smi import ParseError
from validation.probes.rasdaemon import no_database, parse_ras_mc_errors

FIELD = Path(__file__).resolve().parents[2] / "fixtures" / "field"


def _field(tool: str, name: str) -> str:
    return (FIELD / tool / name).read_text()


# --- dmidecode -t memory and the SMBIOS table ------------------------------------------

def test_dmidecode_text_of_real_servers_across_versions():
    """linuxhw/DMI captures: HPE ProLiant DL380 Gen11 and Dell PowerEdge R750 (dmidecode 3.4:
    `64 GB`, `Configured Memory Speed`, empty slots end at Type Detail), R640 (3.1: `MT/s` but
    `Configured Clock Speed`), R730 (2.12: `MHz`, `Configured Clock Speed`, empty slots with
    `Unknown` / `Not Specified` fields)."""
    hpe = parse_dmidecode_memory(_field("dmidecode", "hpe-proliant-dl380-gen11-dmidecode-3.4.txt"))
    assert len(hpe) == 32 and sum(d.populated for d in hpe) == 8
    fitted = [d for d in hpe if d.populated]
    assert {(d.size_mib, d.speed_mts, d.configured_mts, d.part) for d in fitted} == {
        (32768, 5600, 5200, "MTC20F2085S1RC56BG1")}
    assert hpe[0].locator == "PROC 1 DIMM 1" and hpe[0].size_mib == 0
    assert (hpe[0].speed_mts, hpe[0].manufacturer, hpe[0].bank) == (None, "", "")
    r750 = parse_dmidecode_memory(_field("dmidecode", "dell-poweredge-r750-dmidecode-3.4.txt"))
    assert [d.locator for d in r750 if d.populated] == ["A1", "A2", "A3", "A4", "B1", "B2", "B3", "B4"]
    assert {(d.size_mib, d.configured_mts) for d in r750 if d.populated} == {(65536, 3200)}
    r640 = parse_dmidecode_memory(_field("dmidecode", "dell-poweredge-r640-dmidecode-3.1.txt"))
    assert {(d.size_mib, d.speed_mts, d.configured_mts) for d in r640 if d.populated} == {
        (32768, 2666, 2666)}
    r730 = parse_dmidecode_memory(_field("dmidecode", "dell-poweredge-r730-dmidecode-2.12.txt"))
    assert sum(d.populated for d in r730) == 16
    assert {(d.speed_mts, d.configured_mts) for d in r730 if d.populated} == {(2400, 2133)}
    empty = next(d for d in r730 if not d.populated)
    assert (empty.size_mib, empty.speed_mts, empty.part) == (0, None, "")


@pytest.mark.parametrize("name", ["supermicro-x9dbl", "synology-rs3614xsp"])
def test_smbios_table_and_dmidecode_text_of_one_machine_agree(name):
    """u-root's dmidecode testdata: a `dmidecode --dump-bin` file (the 32-byte entry point, then
    the structure table at offset 32: what /sys/firmware/dmi/tables/DMI holds) and dmidecode
    3.2's text of the same dump. Both parsers give the same records."""
    dump = (FIELD / "smbios" / f"{name}.dump-bin").read_bytes()
    assert dump[:4] == b"_SM_"
    table = parse_smbios_memory(dump[32:])
    text = parse_dmidecode_memory(_field("dmidecode", f"{name}-dmidecode-3.2.txt"))
    assert table == text and table
    if name == "supermicro-x9dbl":
        assert [d.size_mib for d in table] == [4096, 4096, 16384, 4096, 4096, 16384]
        assert (table[0].locator, table[0].bank, table[0].serial, table[0].part) == (
            "P1-DIMM1A", "P0_Node0_Channel0_Dimm0", "AEEE0705", "AL12P72A8BLK0M")


DMIDECODE_2X = """\
# dmidecode 2.9
SMBIOS 2.6 present.

Handle 0x1100, DMI type 17, 28 bytes
Memory Device
\tArray Handle: 0x1000
\tTotal Width: 72 bits
\tData Width: 64 bits
\tSize: 16384 MB
\tForm Factor: DIMM
\tSet: 1
\tLocator: DIMM_A1
\tBank Locator: Not Specified
\tType: DDR3
\tType Detail: Synchronous Registered (Buffered)
\tSpeed: 1333 MHz
\tManufacturer: 00CE04B300CE
\tSerial Number: 8512A1B3
\tAsset Tag: 01112361
\tPart Number: M393B2K70CM0-YF8

Handle 0x1101, DMI type 17, 28 bytes
Memory Device
\tSize: 512 kB
\tLocator: DIMM_A2
\tSpeed: Unknown

Handle 0x1102, DMI type 17, 28 bytes
Memory Device
\tSize: No Module Installed
\tLocator: DIMM_A3
\tBank Locator: Not Specified
\tSpeed: Unknown
\tManufacturer: NO DIMM

Handle 0x1103, DMI type 17, 28 bytes
Memory Device
\tSize: Unknown
\tLocator: DIMM_A4
"""


def test_dmidecode_2x_sizes_in_mb_and_kb_mhz_speeds_and_placeholders():
    """dmidecode 2.9 dmi_memory_device_size (`%u MB`, `%u kB`, `No Module Installed`,
    `Unknown`) and dmi_memory_device_speed (`%u MHz`); written from dmidecode-2-9 dmidecode.c,
    not captured. An empty slot's BIOS placeholder strings are kept as given."""
    d = parse_dmidecode_memory(DMIDECODE_2X)
    assert [(x.locator, x.size_mib, x.speed_mts) for x in d] == [
        ("DIMM_A1", 16384, 1333), ("DIMM_A2", 1, None), ("DIMM_A3", 0, None), ("DIMM_A4", None, None)]
    assert d[0].configured_mts is None and d[0].bank == "" and d[2].manufacturer == "NO DIMM"


@pytest.mark.parametrize("text, match", [
    ("hello\n", "unparsed dmidecode output"),
    ("", "unparsed dmidecode output"),
    ("/dev/mem: Permission denied\n", "unparsed dmidecode output"),
    ("# dmidecode 3.4\nHandle 0x1100, DMI type 17, 40 bytes\nMemory Device\n\tSize: 16 bananas\n\tLocator: A1\n",
     "memory size"),
    ("# dmidecode 3.4\nHandle 0x1100, DMI type 17, 40 bytes\nMemory Device\n\tSize: 16 GB\n\tLocator: A1\n\tSpeed: fast\n",
     "memory speed"),
    ("# dmidecode 3.4\nHandle 0x1100, DMI type 17, 20 bytes\nMemory Device\n", "without Size"),
])
def test_dmidecode_unknown_shapes_are_unparsed_never_zero_dimms(text, match):
    with pytest.raises(ParseError, match=match):
        parse_dmidecode_memory(text)


def test_dmidecode_table_without_memory_devices_is_empty():
    # dmidecode decoded a table (its header says so) in which no type 17 exists: a VM
    assert parse_dmidecode_memory("# dmidecode 3.4\nGetting SMBIOS data from sysfs.\n"
                                  "SMBIOS 3.3.0 present.\n\nHandle 0x0000, DMI type 0, 26 bytes\n"
                                  "BIOS Information\n\tVendor: Dell Inc.\n") == []


# --- ras-mc-ctl --errors -------------------------------------------------------------------

def test_rasdaemon_memory_controller_events_of_a_real_server():
    """openstreetmap/operations issue 759 (snap-02, 2022-10-16): the first five rows of the
    reporter's `Memory controller events:` list (i10nm labels, rasdaemon 0.6.x)."""
    r = parse_ras_mc_errors(_field("rasdaemon", "osm-snap-02-errors.txt"))
    assert len(r.mc) == 5 and not r.mce
    assert {(e.count, e.kind, e.labels, e.location, e.uncorrected) for e in r.mc} == {
        (1, "Corrected", ("CPU_SrcID#1_MC#1_Chan#1_DIMM#0",), "3:1:0:-1", False)}


def test_rasdaemon_mce_records_amd_and_intel():
    """NixOS/infra pull 523 (AMD, 0.8.x: every section stated empty, 3 corrected UMC records),
    mchehab/rasdaemon issue 121 (0.8.0, a `..` timestamp, Error_overflow), andikleen/mcelog issue 116
    (an Intel i10nm record the reporter's terminal wrapped over 8 lines; the sections the
    issue elided before it are stated empty here) and mchehab/rasdaemon issue 155 (0.6.8, Debian 12:
    no ARM/devlink/disk sections, all empty). `cpu=`/`bank=` are left out when 0."""
    nix = parse_ras_mc_errors(_field("rasdaemon", "nixos-haumea-amd-mce-errors.txt"))
    assert [(m.cpu, m.bank, m.uncorrected) for m in nix.mce] == [(0, 17, False)] * 3
    assert not nix.mc
    amd = parse_ras_mc_errors(_field("rasdaemon", "rasdaemon-121-amd-0.8.0-errors.txt"))
    assert [(m.cpu, m.bank, m.uncorrected) for m in amd.mce] == [(0, 21, False)]
    wrapped = "No Memory errors.\n\n" + _field("rasdaemon", "mcelog-116-intel-wrapped-errors.txt")
    intel = parse_ras_mc_errors(wrapped)
    assert [(m.cpu, m.bank, m.uncorrected) for m in intel.mce] == [(32, 13, False)]
    none = parse_ras_mc_errors(_field("rasdaemon", "rasdaemon-155-debian12-no-errors.txt"))
    assert (none.mc, none.mce, none.extlog) == ((), (), ())


RAS_VARIANTS = """\
Memory controller events:
1 2026-11-28 17:04:51 +0000 2 Uncorrected error(s): memory read error at PROC 1 DIMM 3 location: 0:1:0:-1, addr 19914502144, grain 6, syndrome 0  err_code:0x0010:0x009f socket:0 imc:0 rank:0
2 2026-11-28 17:05:02 +0000 1 Corrected error(s): memory scrubbing error at A1 or A2 location: 1:0:-1:-1, addr 0, grain 1, syndrome 0
3 2026-11-28 17:05:09 +0000 1 Fatal error(s): memory read error at any memory location: 2:-1:-1:-1, addr 0, grain 1, syndrome 0
4 2026-11-28 17:05:10 +0000 1 Deferred error(s):  at mc#3csrow#0channel#1 location: 3:0:1:-1, addr 0, grain 1, syndrome 0

PCIe AER events:
1 2026-11-28 17:06:00 +0000 0000:3b:00.0 Corrected error: Receiver Error

Extlog events:
1 2026-11-28 17:07:00 +0000 error: type=multi-bit ECC, severity=fatal, address=0x4a3c21000, fru_id=00000000-0000-0000-0000-000000000000, fru_text='B5',

MCE events:
1 2026-11-28 17:08:00 +0000 error: MEMORY CONTROLLER RD_CHANNEL0_ERR, mcg mcgstatus=0, mci Uncorrected_error, status=0xbe00000000800090, cpu=0x00000038, bank=0x0000000d
2 2026-11-28 17:08:01 +0000 error: Internal unclassified error, mcg mcgstatus=0

No SIGNAL event.

"""


def test_rasdaemon_event_types_labels_and_sections():
    """ras-mc-ctl.in errors() at 0.8.5: mc_event types (ras-mc-handler.c: Uncorrected, Fatal,
    Deferred count as uncorrected), labels joined by " or " (edac_mc.c when the driver cannot
    pick one DIMM), "any memory"; an Extlog record (get_extlog_severity); MCE status bit 61;
    a record stating no severity; other sections skipped. Written from the source, not
    captured."""
    r = parse_ras_mc_errors(RAS_VARIANTS)
    assert [(e.count, e.uncorrected, e.labels) for e in r.mc] == [
        (2, True, ("PROC 1 DIMM 3",)), (1, False, ("A1", "A2")), (1, True, ()),
        (1, True, ("mc#3csrow#0channel#1",))]
    assert [(x.severity, x.dimm, x.uncorrected) for x in r.extlog] == [("fatal", "B5", True)]
    assert [(m.cpu, m.bank, m.uncorrected) for m in r.mce] == [(56, 13, True), (0, 0, None)]


def test_rasdaemon_0_4_prints_the_memory_header_alone_when_empty():
    # v0.4.x errors(): "Memory controller events:" always, rows under it, no other section
    assert parse_ras_mc_errors("Memory controller events:\n").mc == ()


@pytest.mark.parametrize("text", [
    "", "garbage\n", "No PCIe AER errors.\n\nNo MCE errors.\n",  # no memory section
    "Memory controller events:\nsomething went wrong\n",
    "Memory controller events:\n1 2026-11-28 17:04:51 +0000 memory broke\n",
    "Can't call method \"execute\" on an undefined value at /usr/sbin/ras-mc-ctl line 1132.\n",
])
def test_rasdaemon_unknown_shapes_are_unparsed_never_no_errors(text):
    with pytest.raises(ParseError, match="unparsed"):
        parse_ras_mc_errors(text)


def test_rasdaemon_without_a_database_is_said_so():
    assert no_database("ras-mc-ctl: Error: mc_event table missing from "
                       "/var/lib/rasdaemon/ras-mc_event.db. Run 'rasdaemon --record'.\n")
    assert no_database("DBD::SQLite::db prepare failed: no such table: mc_event at "
                       "/usr/sbin/ras-mc-ctl line 1131.\n")
    assert not no_database("Out of memory!\n")


# --- edac-util -v ---------------------------------------------------------------------------

def test_edac_util_capture_two_amd_controllers():
    """s905060/site-reliability-engineer-handbook how_to_identify_defective_dimm_from_edac_
    error_on_.md: an AMD F10h server, two controllers, csrow0-7 with channels labelled ch0/ch1
    (no dimm_label set), 7 corrected errors on mc1 csrow6 ch0."""
    counts = parse_edac_util(_field("edac-util", "amd-f10h-two-mcs-v.txt"))
    assert len(counts) == 52
    assert [(c.mc, c.csrow, c.labels, c.uncorrected, c.count) for c in counts if c.count] == [
        ("mc1", "csrow6", ("ch0",), False, 7)]
    ue = next(c for c in counts if c.mc == "mc1" and c.csrow == "csrow6" and c.uncorrected)
    assert ue.labels == ("ch0", "ch1")


def test_edac_util_versions_and_statements():
    """edac-util.c default_report: 0.16+ (`No errors to report.` after zeros; a DIMM-layer
    driver shows its noinfo lines alone) and 0.9 (`label0|label1: n Uncorrected Errors`)."""
    new = parse_edac_util("mc0: 0 Uncorrected Errors with no DIMM info\n"
                          "mc0: 0 Corrected Errors with no DIMM info\n"
                          "edac-util: No errors to report.\n")
    assert [(c.mc, c.csrow, c.count) for c in new] == [("mc0", "", 0), ("mc0", "", 0)]
    old = parse_edac_util("mc0: 0 Uncorrected Errors with no DIMM info\n"
                          "mc0: 3 Corrected Errors with no DIMM info\n"
                          "mc0: csrow0: DIMM_A1|DIMM_B1: 1 Uncorrected Errors\n"
                          "mc0: csrow0: DIMM_A1: 2 Corrected Errors\n"
                          "mc0: csrow0: DIMM_B1: 0 Corrected Errors\n")
    assert [(c.csrow, c.labels, c.uncorrected, c.count) for c in old][1:] == [
        ("", (), False, 3), ("csrow0", ("DIMM_A1", "DIMM_B1"), True, 1),
        ("csrow0", ("DIMM_A1",), False, 2), ("csrow0", ("DIMM_B1",), False, 0)]


@pytest.mark.parametrize("text", ["", "\n", "edac-util: Fatal: Unable to get EDAC data\n",
                                  "mc0: lots of errors\n"])
def test_edac_util_unknown_shapes_are_unparsed(text):
    with pytest.raises(ParseError, match="unparsed edac-util"):
        parse_edac_util(text)


# --- the checks, with stub tools on PATH ------------------------------------------------------

def _tools(tmp_path: Path, monkeypatch, **outputs: tuple[int, str, str]) -> None:
    """Stub executables answering (rc, stdout, stderr); PATH holds only them."""
    bindir = tmp_path / "stub-bin"
    bindir.mkdir(exist_ok=True)
    for name, (rc, out, err) in outputs.items():
        (bindir / f"{name}.out").write_text(out)
        (bindir / f"{name}.err").write_text(err)
        script = bindir / name.replace("_", "-")
        script.write_text(f"#!/bin/sh\ncat '{bindir}/{name}.out'\ncat '{bindir}/{name}.err' >&2\n"
                          f"exit {rc}\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")


def _edac_dimm(ctx, mc: int, dimm: int, label: str, ce: int = 0, ue: int = 0) -> None:
    base = ctx.path(f"/sys/devices/system/edac/mc/mc{mc}/dimm{dimm}")
    base.mkdir(parents=True, exist_ok=True)
    for name, value in (("dimm_label", label), ("dimm_ce_count", ce), ("dimm_ue_count", ue)):
        (base / name).write_text(f"{value}\n")


RAS_EARLIER_BOOT = """\
Memory controller events:
1 2026-11-28 17:04:51 +0000 2 Uncorrected error(s): memory read error at B5 location: 2:1:0:-1, addr 19914502144, grain 6, syndrome 0  err_code:0x0010:0x009f
2 2026-11-29 09:00:00 +0000 3 Corrected error(s): memory read error at A1 location: 0:0:0:-1, addr 19914502144, grain 6, syndrome 0

No MCE errors.
"""


def _fails(res, ctx) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in judge([res], ctx.profile):
        if v.outcome == "fail":
            out.setdefault(v.metric, []).append(v.message + " | " + v.remediation)
    return out


def test_rasdaemon_records_fail_the_dimm_after_the_counters_reset(tmp_path, monkeypatch):
    """An error rasdaemon recorded is an error: B5's two uncorrected errors of an earlier boot
    fail the node though sysfs reads 0. A1's corrected errors, counted by sysfs (3) and by
    rasdaemon (3), count 3, not 6: the larger per DIMM, never the sum."""
    ctx = make_ctx(tmp_path)
    _edac_dimm(ctx, 0, 0, "A1", ce=3)
    _edac_dimm(ctx, 2, 1, "B5")
    _tools(tmp_path, monkeypatch, ras_mc_ctl=(0, RAS_EARLIER_BOOT, ""),
           edac_util=(0, "mc0: 0 Uncorrected Errors with no DIMM info\n"
                         "mc0: 0 Corrected Errors with no DIMM info\n"
                         "mc0: csrow0: 0 Uncorrected Errors\n"
                         "mc0: csrow0: A1: 3 Corrected Errors\n", ""))
    res = run("host.memory_errors", ctx)
    got = {(mm.name, dict(mm.labels).get("dimm")): (mm.value, dict(mm.labels).get("source"))
           for mm in res.measurements if mm.name.startswith("host.edac_")}
    assert got[("host.edac_uncorrected", "B5")] == (2, "rasdaemon+sysfs")
    assert got[("host.edac_corrected", "A1")] == (3, "edac-util+rasdaemon+sysfs")
    fails = _fails(res, ctx)
    assert list(fails) == ["host.edac_uncorrected"]
    assert "host.edac_uncorrected = 2" in fails["host.edac_uncorrected"][0]
    assert "DIMM slot B5 (EDAC mc2/dimm1)" in fails["host.edac_uncorrected"][0]
    src = next(mm for mm in res.measurements if mm.name == "host.memory_error_sources")
    assert src.value == "sysfs-edac,edac-util,rasdaemon,kernel-log"
    assert dict(src.labels)["not_read"] == "none"


def test_rasdaemon_alone_names_a_dimm_sysfs_never_listed_and_its_machine_checks(tmp_path,
                                                                                monkeypatch):
    """No EDAC driver loaded now (0 controllers: the sysfs limits are not applicable), yet
    rasdaemon's records still name the DIMM and the machine-check site: they are judged."""
    ctx = make_ctx(tmp_path)
    _tools(tmp_path, monkeypatch, ras_mc_ctl=(0, RAS_VARIANTS, ""))
    res = run("host.memory_errors", ctx)
    fails = _fails(res, ctx)
    text = " ".join(" ".join(v) for v in fails.values())
    assert "DIMM slot PROC 1 DIMM 3" in text
    assert "CPU 56 bank 13" in text and "CPU 0 bank 0" in text and "hardware error at B5" in text


def test_a_tool_present_whose_output_does_not_parse_errors_the_check(tmp_path, monkeypatch):
    ctx = make_ctx(tmp_path)
    _tools(tmp_path, monkeypatch, ras_mc_ctl=(0, "Segmentation fault\n", ""))
    with pytest.raises(ParseError, match="unparsed ras-mc-ctl"):
        run("host.memory_errors", ctx)


def test_rasdaemon_not_recording_is_a_source_not_read(tmp_path, monkeypatch):
    ctx = make_ctx(tmp_path)
    _tools(tmp_path, monkeypatch,
           ras_mc_ctl=(255, "", "ras-mc-ctl: Error: mc_event table missing from "
                                "/var/lib/rasdaemon/ras-mc_event.db. Run 'rasdaemon --record'.\n"),
           edac_util=(0, "", "edac-util: Error: No memory controller data found.\n"))
    res = run("host.memory_errors", ctx)
    assert not _fails(res, ctx)
    src = next(mm for mm in res.measurements if mm.name == "host.memory_error_sources")
    assert dict(src.labels)["not_read"] == (
        "edac-util: no memory controller; ras-mc-ctl: rasdaemon has no event database "
        "(not recording)")


def test_dimms_from_dmidecode_where_the_table_cannot_be_read(tmp_path, monkeypatch):
    """No /sys/firmware/dmi/tables/DMI: dmidecode's text (the R750 capture: 8 of 32 slots
    fitted) is read instead, the fact says so, and the empty slots are named."""
    ctx = make_ctx(tmp_path)
    _tools(tmp_path, monkeypatch,
           dmidecode=(0, _field("dmidecode", "dell-poweredge-r750-dmidecode-3.4.txt"), ""))
    res = run("host.dimms", ctx)
    vals = {mm.name: mm.value for mm in res.measurements}
    assert vals["host.dimm_source"] == "dmidecode" and vals["host.dimm_count"] == 8
    fails = _fails(res, ctx)
    assert "empty DIMM slots A5,A6,A7,A8,A9,A10" in fails["host.dimm_count"][0]


def test_dmidecode_garbage_errors_the_dimm_check_never_zero_dimms(tmp_path, monkeypatch):
    ctx = make_ctx(tmp_path)
    _tools(tmp_path, monkeypatch, dmidecode=(0, "sh: 1: oops\n", ""))
    with pytest.raises(ParseError, match="unparsed dmidecode"):
        run("host.dimms", ctx)


def test_hwsim_stand_ins_read_back_through_the_parsers():
    from rackready_lab.hwsim.cli import dmidecode, edac_util, ras_mc_ctl
    from rackready_lab.hwsim.cli.host_render import smbios_table
    from rackready_lab.hwsim.faults import apply_fault
    from rackready_lab.hwsim.state import build_state

    st = build_state("dl380a-gen12-h200nvl", "n1")
    assert parse_dmidecode_memory(dmidecode.memory(st)) == parse_smbios_memory(smbios_table(st))
    assert parse_ras_mc_errors(ras_mc_ctl.errors(st)).mc == ()
    assert not any(c.count for c in parse_edac_util(edac_util.report(st)))
    st = apply_fault(st, "ras-logged-errors", "PROC 2 DIMM 7")
    assert [(e.labels, e.count, e.uncorrected) for e in parse_ras_mc_errors(
        ras_mc_ctl.errors(st)).mc] == [(("PROC 2 DIMM 7",), 2, True)]


def test_edac_util_unlabelled_channels_meet_their_sysfs_csrow_not_each_other(tmp_path,
                                                                             monkeypatch):
    """The F10h capture names channels `ch0`/`ch1` (no dimm_label): each is its controller's
    csrow channel, the one sysfs's csrow layout reads, so mc1 csrow6 ch0's 7 corrected
    errors count once and no csrow's `ch0` merges with another's."""
    ctx = make_ctx(tmp_path)
    cs = ctx.path("/sys/devices/system/edac/mc/mc1/csrow6")
    cs.mkdir(parents=True)
    for name, value in (("ch0_ce_count", 7), ("ch1_ce_count", 0), ("ue_count", 0),
                        ("ch0_dimm_label", ""), ("ch1_dimm_label", "")):
        (cs / name).write_text(f"{value}\n")
    _tools(tmp_path, monkeypatch, edac_util=(0, _field("edac-util", "amd-f10h-two-mcs-v.txt"), ""))
    res = run("host.memory_errors", ctx)
    ce = [(dict(mm.labels)["dimm"], mm.value, dict(mm.labels)["source"])
          for mm in res.measurements if mm.name == "host.edac_corrected" and mm.value]
    assert ce == [("mc1 csrow6/ch0", 7, "edac-util+sysfs")]
    assert len([mm for mm in res.measurements if mm.name == "host.edac_corrected"]) == 32
