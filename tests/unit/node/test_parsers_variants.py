# ruff: noqa: E501  (tool output samples keep their real column widths)
"""Parsers against the field's variety of tool output.

Each sample is written from the tool's own source or documentation, named in the
test's docstring; none comes from a machine of ours (the captured H200 VM has no
NVMe, no md, no MIG and nccl-tests 2.19). Parsers report shapes; what an unknown
shape means (unknown, never a hardware fault) is the checks' call, tested here too.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from test_checks_gpu import FIX, FakeContext, make_ctx

from validation.judge import judge
from validation.model import CheckResult
from validation.probes import nccl_tests, nvidia_smi, storage
from validation.probes.nvidia_smi import ParseError

# --- nvme list -o json ------------------------------------------------------------

HOST = {"HostNQN": "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0033-4810-8058-b3c04f4c3133",
        "HostID": "4c4c4544-0033-4810-8058-b3c04f4c3133"}


def _ctrl(i: int, namespaces: list) -> dict:
    return {"Controller": f"nvme{i}", "Cntlid": "6", "SerialNumber": f"S6CKNE0W{i:03d}",
            "ModelNumber": "SAMSUNG MZWLO3T8HCLS-00A07", "Firmware": "OPPA4B5Q",
            "Transport": "pcie", "Address": f"0000:{0xc1 + i:02x}:00.0", "Slot": str(17 + i),
            "Namespaces": namespaces, "Paths": []}


def _ns(i: int) -> dict:
    return {"NameSpace": f"nvme{i}n1", "Generic": f"ng{i}n1", "NSID": 1, "UsedBytes": 0,
            "MaximumLBA": 7501476528, "PhysicalSize": 3840755982336, "SectorSize": 512}


def nvme_211_multipath(n: int) -> str:
    """nvme-cli 2.11/2.12 `nvme list -o json` (json_print_list_items -> json_detail_list,
    nvme-print-json.c): with native multipath the namespace sits in the subsystem's
    "Namespaces" and the controller's own list is empty."""
    subs = [{"Subsystem": f"nvme-subsys{i}",
             "SubsystemNQN": f"nqn.1994-11.com.samsung:nvme:PM1743:2.5-inch:S6CKNE0W{i:03d}",
             "Controllers": [_ctrl(i, [])], "Namespaces": [_ns(i)]} for i in range(n)]
    return json.dumps({"Devices": [{**HOST, "Subsystems": subs}]})


def nvme_212_private(n: int) -> str:
    """nvme-cli 2.12 without multipath (nvme_core.multipath=N): namespaces under each
    controller, the subsystem's list empty (same json_detail_list)."""
    subs = [{"Subsystem": f"nvme-subsys{i}", "SubsystemNQN": "nqn.x",
             "Controllers": [_ctrl(i, [_ns(i)])], "Namespaces": []} for i in range(n)]
    return json.dumps({"Devices": [{**HOST, "Subsystems": subs}]})


def nvme_210_simple(n: int) -> str:
    """nvme-cli 2.0-2.10 without -v (json_simple_list -> json_list_item_obj) and 1.x:
    a flat list of namespaces with DevicePath."""
    return json.dumps({"Devices": [
        {"NameSpace": 1, "DevicePath": f"/dev/nvme{i}n1", "GenericPath": f"/dev/ng{i}n1",
         "Firmware": "OPPA4B5Q", "ModelNumber": "SAMSUNG MZWLO3T8HCLS-00A07",
         "SerialNumber": f"S6CKNE0W{i:03d}", "UsedBytes": 0, "MaximumLBA": 7501476528,
         "PhysicalSize": 3840755982336, "SectorSize": 512} for i in range(n)]})


@pytest.mark.parametrize("render", [nvme_211_multipath, nvme_212_private, nvme_210_simple])
def test_nvme_list_every_nvme_cli_layout_finds_the_drives(render):
    drives = storage.parse_nvme_list(render(8))
    assert [d.device for d in drives] == [f"/dev/nvme{i}n1" for i in range(8)]
    assert drives[5].serial == "S6CKNE0W005" and drives[5].model == "SAMSUNG MZWLO3T8HCLS-00A07"
    assert drives[0].size_bytes == 3840755982336 and drives[0].firmware == "OPPA4B5Q"


def test_nvme_list_no_drives_and_unknown_shape():
    assert storage.parse_nvme_list(json.dumps({"Devices": [{**HOST, "Subsystems": []}]})) == []
    with pytest.raises(ParseError, match="unknown nvme-cli format"):
        storage.parse_nvme_list(json.dumps({"Devices": [{"Name": "/dev/nvme0n1"}]}))


# --- /proc/mdstat -------------------------------------------------------------------

MDSTAT = """Personalities : [raid1] [raid0]
md0 : active (auto-read-only) raid1 nvme1n1[1] nvme0n1[0]
      1875243008 blocks super 1.2 [2/2] [UU]
      bitmap: 0/14 pages [0KB], 65536KB chunk

md1 : active (read-only) raid0 nvme3n1[1] nvme2n1[0]
      7501211648 blocks super 1.2 512k chunks

md127 : inactive nvme4n1[0](S) nvme5n1[1](S)
      7501211648 blocks super 1.2

unused devices: <none>
"""


def test_mdstat_read_only_and_inactive_arrays():
    """Linux drivers/md/md.c md_seq_show: "active"/"inactive", then "(read-only)" or
    "(auto-read-only)" when set, then the personality only while running."""
    arrays = {a.name: a for a in storage.parse_mdstat(MDSTAT)}
    assert (arrays["md0"].level, arrays["md0"].active, arrays["md0"].members) == (
        "raid1", True, ("nvme1n1", "nvme0n1"))
    assert (arrays["md0"].expected, arrays["md0"].working, arrays["md0"].missing) == (2, 2, 0)
    assert (arrays["md1"].level, arrays["md1"].active) == ("raid0", True)
    assert (arrays["md127"].level, arrays["md127"].active) == (None, False)
    assert arrays["md127"].members == ("nvme4n1", "nvme5n1")


# --- nvidia-smi ---------------------------------------------------------------------

CSV = """index, pci.bus_id, serial, pcie.link.gen.current, pcie.link.gen.max, \
clocks_throttle_reasons.active, power.limit [W], ecc.errors.uncorrected.volatile.total
0, 00000000:18:00.0, 1653124039736, 1, 5, [Requested functionality has been deprecated], \
700.00 W, [N/A]
1, 00000000:2A:00.0, [Not Supported], 1, 5, [Unknown Error], [N/A], 0
"""


def test_bracketed_csv_values_are_none():
    """nvidia-smi --help-query-gpu / --format=csv: values the GPU cannot give print in
    brackets ("[N/A]", "[Not Supported]", "[Unknown Error]", and since R535 "[Requested
    functionality has been deprecated]" for clocks_throttle_reasons.*)."""
    rows = nvidia_smi.parse_query_csv(CSV)
    assert rows[0]["clocks_throttle_reasons.active"] is None
    assert rows[0]["ecc.errors.uncorrected.volatile.total"] is None
    assert rows[1]["serial"] is None and rows[1]["power.limit"] is None
    assert rows[1]["ecc.errors.uncorrected.volatile.total"] == "0"  # a real zero stays
    assert nvidia_smi._int(rows[0]["ecc.errors.uncorrected.volatile.total"]) is None
    assert rows[0]["pcie.link.gen.current"] == "1" and rows[0]["pcie.link.gen.max"] == "5"


def test_gpu_index_is_the_order_nvidia_smi_lists_not_minor_number():
    """nvidia-smi -q -x lists <gpu> in its index order (PCI bus order); the capture's
    minor numbers swapped must not move the index."""
    xml = (FIX / "nvidia-smi-q-x.xml").read_text()
    xml = xml.replace("<minor_number>0</minor_number>", "<minor_number>X</minor_number>")
    xml = xml.replace("<minor_number>1</minor_number>", "<minor_number>0</minor_number>")
    xml = xml.replace("<minor_number>X</minor_number>", "<minor_number>1</minor_number>")
    gpus = nvidia_smi.parse_query_xml(xml).gpus
    assert [(g.index, g.bus_id, g.minor_number) for g in gpus] == [
        (0, "00000000:00:06.0", 1), (1, "00000000:00:07.0", 0)]


def test_pcie_max_link_gen_is_read_beside_the_idle_current():
    """nvidia-smi -q "PCIe Generation: Max / Current / Device Current / Device Max /
    Host Max" (R535+ XML pcie_gen/*): an idle card reads Current 1, Max 5."""
    xml = (FIX / "nvidia-smi-q-x.xml").read_text().replace(
        "<current_link_gen>5</current_link_gen>", "<current_link_gen>1</current_link_gen>")
    g = nvidia_smi.parse_query_xml(xml).gpus[0]
    assert (g.pcie_gen, g.pcie_gen_max) == (1, 5)


MIG_NVLINK_S = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-4039dfe4-0c97-4b1e-683e-eb7d42699053)
\t NVLink is not supported for Devices in MIG mode.
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-dd3b269a-8f3a-d2d5-1518-2713ba03fcf7)
\t Link 0: 26.562 GB/s
"""


def test_nvlink_status_in_mig_mode_is_unknown():
    """`nvidia-smi nvlink -s` on a GPU in MIG mode prints nvidia-smi's refusal ("... not
    supported for Devices in MIG mode") instead of link lines."""
    st = nvidia_smi.read_nvlink_status(MIG_NVLINK_S)
    assert st.unknown == {0: "NVLink is not supported for Devices in MIG mode."}
    assert st.links == {1: {0: 26.562}}
    assert st.uuids[1] == "GPU-dd3b269a-8f3a-d2d5-1518-2713ba03fcf7"
    assert nvidia_smi.parse_nvlink_status(MIG_NVLINK_S) == {1: {0: 26.562}}  # never 0 up
    whole = nvidia_smi.read_nvlink_status("NVLink is not supported\n")
    assert whole.note == "NVLink is not supported" and not whole.links
    assert nvidia_smi.parse_nvlink_errors("NVLink is not supported\n") == {}


@pytest.mark.parametrize("message", [
    "NVML: Unable to retrieve NVLink information as all links are inActive",  # gpud#1085
    "NVML:Unable to retrieve Nvlink information as all links are inActive",  # ogkm#1150
    "\t NVML: Unable to retrieve NVLink information as all links are inactive",
])
def test_nvlink_status_all_links_inactive_is_zero_up_not_unknown(message):
    """NVML's message under a GPU line when all its links are down (leptonai/gpud issue
    1085, NVIDIA/open-gpu-kernel-modules issue 1150) is a state: 0 links up. The sample
    is the capture with GPU 1's link lines replaced (test_checks_gpu.all_inactive)."""
    from test_checks_gpu import all_inactive

    st = nvidia_smi.read_nvlink_status(all_inactive(1, message))
    assert st.links[1] == {} and st.all_inactive == frozenset({1})
    assert len(st.links[0]) == 18 and not st.unknown and st.note is None


@pytest.mark.parametrize("line", [
    "\tNVLink is not supported for Devices in MIG mode.",
    "\tSome message of a driver we have not seen",
])
def test_nvlink_status_other_messages_stay_unknown(line):
    """Not "all links inactive" nor "no NVLink": MIG mode or a wording we do not know make
    that GPU unknown (the check errors), never 0 up and never silently dropped."""
    text = ("GPU 0: NVIDIA H200 (UUID: GPU-a)\n" + line + "\n"
            "GPU 1: NVIDIA H200 (UUID: GPU-b)\n\t Link 0: 26.562 GB/s\n")
    st = nvidia_smi.read_nvlink_status(text)
    assert 0 not in st.links
    assert st.unknown[0] == line.strip() and st.links == {1: {0: 26.562}}
    assert not st.all_inactive


# canonical/checkbox pull 2727: `nvidia-smi nvlink -s` on a GPU without NVLink, exit 0
NO_NVLINK_S = """GPU 0: NVIDIA JMJWOA-Generic-GPU (UUID: GPU-483cccbe-9d80-0d7b-5c48-12e6c8696e50)
Device does not have or support Nvlink
"""


def test_nvlink_status_no_nvlink_is_zero_links_not_unknown():
    """Before: read as unknown (the check errored "NVLink state unknown"). nvidia-smi
    states a fact: this GPU has no NVLink, 0 links. Per GPU (the capture; a second GPU
    with links beside it, made from the same format), and alone for the whole output."""
    st = nvidia_smi.read_nvlink_status(NO_NVLINK_S)
    assert st.links == {0: {}} and st.no_nvlink == frozenset({0}) and not st.unknown
    assert st.note is None and st.uuids[0] == "GPU-483cccbe-9d80-0d7b-5c48-12e6c8696e50"
    mixed = NO_NVLINK_S + "GPU 1: NVIDIA H200 (UUID: GPU-b)\n\t Link 0: 26.562 GB/s\n"
    assert nvidia_smi.parse_nvlink_status(mixed) == {0: {}, 1: {0: 26.562}}
    whole = nvidia_smi.read_nvlink_status("Device does not have or support Nvlink\n")
    assert whole.no_nvlink_any == "Device does not have or support Nvlink"
    assert whole.note is None and not whole.unknown
    # -e says the same: no counters, never zeros, never a parse error
    assert nvidia_smi.parse_nvlink_errors("Device does not have or support Nvlink\n") == {}
    # link lines and the denial under one GPU contradict each other: unknown
    both = NO_NVLINK_S + "\t Link 0: 26.562 GB/s\n"
    assert 0 in nvidia_smi.read_nvlink_status(both).unknown


def test_nvlink_status_gpu_line_without_anything_under_it_is_unknown():
    st = nvidia_smi.read_nvlink_status("GPU 0: NVIDIA H200 (UUID: GPU-a)\n"
                                       "GPU 1: NVIDIA H200 (UUID: GPU-b)\n\t Link 0: <inactive>\n")
    assert st.unknown == {0: "no link line under the GPU line"}
    assert st.links == {1: {0: None}}


# --- nccl-tests ----------------------------------------------------------------------

# nccl-tests 2.10/2.11 all_reduce_perf (src/all_reduce.cu print_header, common.cu:
# "%12li  %12li  %8s  %6s" then "  %7s  %6.2f  %6.2f  %5.0le" twice; no banner).
OLD_ALL_REDUCE = """# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 \
iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  41130 on  dgx-h100 device  0 [0x18] NVIDIA H100 80GB HBM3
#
#                                                       out-of-place                       in-place
#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                       (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum    52.10   20.13   35.22  0e+00    51.77   20.25   35.44  0e+00
   134217728      33554432     float     sum   1153.2  116.39  203.68  0e+00   1149.9  116.72  204.26  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 119.65
"""

# all_gather_perf of the same versions: no redop column (src/all_gather.cu).
OLD_ALL_GATHER = """#                                                  out-of-place                       in-place
#       size         count      type     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     8388608        262144     float    101.3   82.81   72.46  0e+00    99.87   84.00   73.50  0e+00
"""

# broadcast_perf of the same versions: a root column instead of redop (src/broadcast.cu).
OLD_BROADCAST = """#       size         count      type    root     time   algbw   busbw  error     time   algbw   busbw  error
     8388608       2097152     float       0    60.21  139.32  139.32  0e+00    59.80  140.28  140.28    N/A
"""


@pytest.mark.parametrize("text,op,first", [
    (OLD_ALL_REDUCE, "all_reduce", (1048576, "float", 35.22)),
    (OLD_ALL_GATHER, "all_gather", (8388608, "float", 72.46)),
    (OLD_BROADCAST, "broadcast", (8388608, "float", 139.32)),
])
def test_nccl_tests_pre_2_13_layouts(text, op, first):
    rows, layout = nccl_tests.parse(text, op)
    assert layout == "pre-2.13"
    assert (rows[0].size_bytes, rows[0].dtype, rows[0].oop_busbw) == first
    assert rows[0].op == op and rows[0].oop_wrong is None  # "error" is not a count


def test_nccl_tests_current_layout_matches_the_capture():
    rows, layout = nccl_tests.parse((FIX / "nccl-tests-all_reduce.txt").read_text())
    assert layout == "2.13+" and len(rows) == 7 and rows[-1].oop_busbw == 348.68
    assert rows[0].op == "all_reduce" and rows[0].oop_wrong == 0


@pytest.mark.parametrize("text", [
    "",
    "NCCL failure common.cu:958 'unhandled cuda error'\n",
    # a header whose rows have one column more than it names: never silently zero rows
    "#  size count type redop time algbw busbw #wrong time algbw busbw #wrong\n"
    "  1048576  262144  float  sum  -1  23.4  44.7  44.7  0  21.5  48.7  48.7  0\n",
])
def test_nccl_tests_unknown_shape_is_unparsed(text):
    with pytest.raises(ParseError, match="unparsed nccl-tests output"):
        nccl_tests.parse(text, "all_reduce")


FIELD = Path(__file__).resolve().parents[2] / "fixtures" / "field" / "nccl-tests"


def capture_variant(op: str = "all_gather", header=None, row=None) -> str:
    """The real 2.19.6 capture with its column header and/or rows rewritten by the
    given functions: how 2.13-2.19 options and point releases print the same run."""
    out = []
    for ln in (FIX / f"nccl-tests-{op}.txt").read_text().splitlines():
        if ln.startswith("#") and ln.split()[1:3] == ["size", "count"] and header:
            ln = header(ln)
        elif ln[:1] == " " and ln.split()[0].isdigit() and row:
            ln = row(ln)
        out.append(ln)
    return "\n".join(out) + "\n"


def test_nccl_tests_1_0_layouts_from_the_source():
    """nccl-tests 1.0 (fixtures/field/nccl-tests/README.md): `bytes N type op` lead, time
    in ms, and broadcast with the out-of-place half only. Before: "unparsed"."""
    rows, layout = nccl_tests.parse((FIELD / "v1.0.0-all_reduce_perf.txt").read_text(),
                                    "all_reduce")
    assert layout == "1.x" and [r.size_bytes for r in rows] == [1048576, 33554432]
    assert rows[1].oop_busbw == 26.59 and rows[1].oop_time_us == pytest.approx(1262.0)
    assert rows[1].oop_wrong is None  # res is a deviation
    (row,), _ = nccl_tests.parse((FIELD / "v1.0.0-broadcast_perf.txt").read_text(),
                                 "broadcast")
    assert row.oop_busbw == 23.93 and math.isnan(row.ip_busbw) and row.ip_wrong is None


def test_nccl_tests_2_10_alltoall_blank_redop_column():
    """2.10/2.11 alltoall_perf names a redop column its rows leave blank. Before:
    every row unmatched -> "unparsed"."""
    rows, layout = nccl_tests.parse((FIELD / "v2.10.0-alltoall_perf.txt").read_text(),
                                    "alltoall")
    assert layout == "pre-2.13"
    assert [(r.size_bytes, r.oop_busbw, r.ip_busbw) for r in rows] == [
        (1048576, 26.06, 26.06), (134217728, 113.74, 113.74)]


BLANK_REDOP = {"row": lambda ln: ln.replace("    none", "        ", 1)}
CPUTIME = {"header": lambda ln: ln.replace("  time", "cputime")}
TIMESTAMP = {"header": lambda ln: ln + "           timestamp",
             "row": lambda ln: ln + "  2026-11-30 01:02:03"}
PER_ITER = {"header": lambda ln: ln.replace(
    "#wrong", "#wrong    i_min    i_max    i_p99    i_cv%"),
    "row": lambda ln: re.sub(r"(\s+0)(?=\s|$)", r"\1    16.1    17.3    17.2     2.1", ln)}
MILLION_WRONG = {"row": lambda ln: re.sub(r"\s0$", " 1e+06", ln)}


@pytest.mark.parametrize("edits,expect", [
    # 2.13.0-2.13.3 all_gather/alltoall/broadcast pass "" as opName (src/all_gather.cu)
    (BLANK_REDOP, {}),
    # -C 1 (report_cputime, 2.13.6+): common.cu / util.cu name the column "cputime"
    (CPUTIME, {}),
    # report_timestamps (2.18+, util.cu writeTimestamp "%Y-%m-%d %H:%M:%S")
    (TIMESTAMP, {}),
    # per-iteration timing (2.19 util.cu writeResultHeader / writePerIterReport)
    (PER_ITER, {}),
    # #wrong is printed "%6g": a million wrong elements reads 1e+06, not an exception
    (MILLION_WRONG, {"ip_wrong": 1000000}),
])
def test_nccl_tests_2_13_to_2_19_variants_generated_from_the_capture(edits, expect):
    """Before: each raised ParseError "unparsed" (or ValueError on 1e+06)."""
    rows, layout = nccl_tests.parse(capture_variant(**edits))
    assert layout == "2.13+" and len(rows) == 7 and rows[0].op == "all_gather"
    assert (rows[-1].size_bytes, rows[-1].oop_busbw, rows[-1].ip_busbw) == (
        4294967296, 286.23, 310.19)
    assert rows[0].oop_time_us == 16.42
    for field, value in expect.items():
        assert getattr(rows[-1], field) == value


@pytest.mark.parametrize("text", [
    # a header of no known layout (an unknown column): its rows are never read
    "#  size count type redop root time algbw busbw #wrong  lat time algbw busbw #wrong\n"
    "  1048576  262144  float  sum  -1  23.4  44.7  44.7  0 1.0  21.5  48.7  48.7  0\n",
    # a header without the figures' columns (raised IndexError before)
    "#  size count type time\n  1048576 262144 float 23.4\n",
    # a root column that is not a number, a redop that is one
    "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
    "  1048576  262144  float  12  sum  23.4  44.7  44.7  0  21.5  48.7  48.7  0\n",
    # the figures are not numbers
    "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
    "  1048576  262144  float  sum  -1  23.4  fast  44.7  0  21.5  48.7  48.7  0\n",
])
def test_nccl_tests_unknown_layouts_are_unparsed_never_an_exception(text):
    with pytest.raises(ParseError, match="unparsed nccl-tests output"):
        nccl_tests.parse(text, "all_reduce")


class NcclCtx(FakeContext):
    text = ""

    def run(self, cmd, timeout_s=60, artifact=None, ok_codes=(0,)):
        return self.text


def _perf_dir(tmp_path):
    build = tmp_path / "nccl-tests" / "build"
    build.mkdir(parents=True)
    from validation.workloads.busbw import OPS

    for op in OPS:
        (build / f"{op}_perf").write_text("")
    return build


def test_nccl_tests_check_with_unknown_output_is_unparsed_not_slow(tmp_path):
    """The check raises the parser's "unparsed": the runner records an error, which the
    judge reports as a check that could not parse its probe, never a fabric fault."""
    from validation.checks.workload_checks import nccl_tests_check

    build = _perf_dir(tmp_path)
    base = make_ctx(tmp_path)
    # found through the role's own variable, as the controller ships it in the site file
    ctx = NcclCtx(profile=base.profile, level="quick", sysroot=base.sysroot,
                  out=tmp_path / "out",
                  site={"validation_tools_nccl_tests_dir": str(build.parent)})
    ctx.cache["workloads.gpu_count"] = 8
    ctx.text = "# nccl-tests 3.0 (some future layout)\n 1048576 | float | 44.7 GB/s\n"
    with pytest.raises(ParseError, match="unparsed") as exc:
        list(nccl_tests_check(ctx))
    ctx.text = OLD_ALL_REDUCE
    got = [(m.name, m.value) for m in nccl_tests_check(ctx)]
    assert ("nccl.busbw", 203.68) in got
    # 2.13.0-2.13.3 rows with a blank redop: measured, not "unparsed" (before: ParseError)
    ctx.text = capture_variant(**BLANK_REDOP)
    got = [(m.name, m.labels["size_bytes"], m.value) for m in nccl_tests_check(ctx)
           if m.name == "nccl.busbw"]
    assert ("nccl.busbw", "4294967296", 286.23) in got
    result = CheckResult("nccl_tests", "error", 0.0, (), f"ParseError: {exc.value}",
                         ("gpu", "multi-gpu", "nccl-tests"))
    verdicts = [v for v in judge([result], ctx.profile) if v.outcome == "fail"]
    assert [v.metric for v in verdicts] == ["check.status"]
    assert "could not parse its probe" in verdicts[0].message


def test_nccl_tests_version_line_is_read():
    from validation.checks.workload_checks import nccl_tests_version

    text = (FIX / "nccl-tests-all_reduce.txt").read_text()
    assert nccl_tests_version(text) == "2.19.6"
    assert nccl_tests_version(OLD_ALL_REDUCE) is None


def test_required_nccl_tests_absent_fails_naming_what_is_missing(tmp_path):
    from validation.checks.registry import CheckSkipped
    from validation.checks.workload_checks import nccl_tests_check

    base = make_ctx(tmp_path)
    ctx = NcclCtx(profile=base.profile, level="quick", sysroot=base.sysroot,
                  out=tmp_path / "out",
                  site={"validation_tools_nccl_tests_dir": str(tmp_path / "none")})
    with pytest.raises(CheckSkipped, match="all_reduce_perf") as exc:
        list(nccl_tests_check(ctx))
    assert str(tmp_path / "none" / "build") in str(exc.value)
    # the profile requires nccl-tests: a skip is a failed node, with the reason
    result = CheckResult("nccl_tests", "skipped", 0.0, (), str(exc.value),
                         ("gpu", "multi-gpu", "nccl-tests"))
    bad = [v for v in judge([result], ctx.profile) if v.outcome == "fail"]
    assert bad and "all_reduce_perf" in bad[0].message


