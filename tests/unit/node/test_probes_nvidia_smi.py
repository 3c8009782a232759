"""nvidia-smi parsers on the real H200 capture, and on faulty variants generated from it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from validation.probes import nvidia_smi as ns

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "hgx-h200-2gpu"


def cap(name: str) -> str:
    return (FIX / name).read_text()


def test_xml_agrees_with_query_csv_capture():
    # two independent captures of the same GPUs: the XML parser must agree with the CSV
    rep = ns.parse_query_xml(cap("nvidia-smi-q-x.xml"))
    rows = ns.parse_query_csv(cap("nvidia-smi-query-gpu.csv"))
    assert len(rep.gpus) == len(rows) == 2
    assert rep.driver_version == rows[0]["driver_version"] == "580.159.04"
    assert rep.cuda_version == "13.0"
    for g, row in zip(rep.gpus, rows, strict=True):
        assert g.index == int(row["index"])
        assert g.name == row["name"] == "NVIDIA H200"
        assert g.uuid == row["uuid"] and g.serial == row["serial"]
        assert g.bus_id == row["pci.bus_id"]
        assert g.vbios == row["vbios_version"]
        assert f"{g.memory_total_mib} MiB" == row["memory.total"]
        assert g.ecc_mode == row["ecc.mode.current"]
        assert g.ecc_uncorrected_volatile == int(row["ecc.errors.uncorrected.volatile.total"])
        assert g.pcie_gen == int(row["pcie.link.gen.current"])
        assert g.pcie_width == int(row["pcie.link.width.current"])
        assert g.power_limit_w == float(row["power.limit"].split()[0])
        assert g.persistence_mode == row["persistence_mode"]
        assert g.mig_mode == row["mig.mode.current"]
        assert g.remapped_rows_pending is (row["remapped_rows.pending"] == "Yes")
        assert g.remapped_rows_failure is (row["remapped_rows.failure"] == "Yes")
        # retired pages are N/A on Hopper (row remapping): None, never a false 0
        assert row["retired_pages.pending"] is None and g.retired_pages is None


def test_xml_health_fields_of_capture():
    g0, g1 = ns.parse_query_xml(cap("nvidia-smi-q-x.xml")).gpus
    assert g0.fabric_state == "Completed" and g0.fabric_status == "Success"
    assert g0.pcie_replay == 1 and g1.pcie_replay == 0  # as captured
    # clocks_event_reasons.active 0x1 in the CSV = GPU idle only
    assert g0.clock_events["idle"] is True
    assert not any(v for k, v in g0.clock_events.items() if k != "idle")
    assert g0.remapped_rows_uncorrectable == 0 and g0.ecc_uncorrected_aggregate == 0


def _gpu0_block(xml: str) -> tuple[int, int]:
    start = xml.index('<gpu id="00000000:00:06.0">')
    return start, xml.index("</gpu>", start)


def fault_xml(**edits: str) -> str:
    """Edit GPU 0 of the capture: tag -> new text (first occurrence inside GPU 0)."""
    xml = cap("nvidia-smi-q-x.xml")
    start, end = _gpu0_block(xml)
    block = xml[start:end]
    for tag, value in edits.items():
        block, n = re.subn(rf"<{tag}>[^<]*</{tag}>", f"<{tag}>{value}</{tag}>", block, count=1)
        assert n == 1, tag
    return xml[:start] + block + xml[end:]


def test_xml_faults_generated_from_capture():
    xml = fault_xml(dram_uncorrectable="3", remapped_row_pending="Yes", current_link_gen="3",
                    current_link_width="8x", state="In Progress",
                    clocks_event_reason_hw_slowdown="Active", current_ecc="Disabled")
    g0, g1 = ns.parse_query_xml(xml).gpus
    assert g0.ecc_uncorrected_volatile == 3 and g1.ecc_uncorrected_volatile == 0
    assert g0.remapped_rows_pending is True
    assert (g0.pcie_gen, g0.pcie_width) == (3, 8)
    assert g0.fabric_state == "In Progress"
    assert g0.clock_events["hw_slowdown"] is True
    assert g0.ecc_mode == "Disabled"


def test_xml_rejects_garbage():
    with pytest.raises(ns.ParseError):
        ns.parse_query_xml("nvidia-smi: command failed")
    with pytest.raises(ns.ParseError):
        ns.parse_query_xml("<html></html>")


def test_remapped_rows_csv_capture():
    rows = ns.parse_query_csv(cap("nvidia-smi-remapped-rows.csv"))
    assert [r["gpu_bus_id"] for r in rows] == ["00000000:00:06.0", "00000000:00:07.0"]
    assert all(r["remapped_rows.uncorrectable"] == "0" for r in rows)


def test_csv_field_count_mismatch_is_an_error():
    with pytest.raises(ns.ParseError):
        ns.parse_query_csv("a, b\n1\n")


def test_topo_capture():
    topo = ns.parse_topo(cap("nvidia-smi-topo-m.txt"))
    assert topo.gpus == ("GPU0", "GPU1")
    assert topo.matrix[("GPU0", "GPU1")] == "NV18"
    assert ns.nv_links(topo.matrix[("GPU1", "GPU0")]) == 18
    assert topo.numa == {"GPU0": "0", "GPU1": "0"}


def test_topo_empty_cpu_affinity_keeps_the_numa_node():
    """A GPU whose CPU affinity NVML cannot report (a VM, some Grace hosts) prints an empty
    CPU Affinity cell: two tabs in a row. Derived in code from the driver-580 capture (its
    cpulist removed, not captured; nvidia-smi's documented tab layout); the NUMA column
    must not shift into the CPU one (it read as no NUMA node)."""
    text = cap("nvidia-smi-topo-m.txt").replace("\t0-31\t", "\t\t")
    assert "\t\t0\t\tN/A" in text
    topo = ns.parse_topo(text)
    assert topo.numa == {"GPU0": "0", "GPU1": "0"}
    assert topo.cpu_affinity == {"GPU0": None, "GPU1": None}


def test_topo_empty_cpu_affinity_pasted_as_spaces():
    """The same empty cell in a capture whose tabs became spaces (the 8x H100 matrix of
    sgl-project/sglang issue 30401, the cpulist blanked in code): the NUMA value stands in
    its own column."""
    topology = FIX.parent / "topology" / "hgx-h100-8nic-spaces.txt"
    text = topology.read_text().replace("0-47,96-143", " " * len("0-47,96-143"))
    topo = ns.parse_topo(text)
    assert [topo.numa[f"GPU{i}"] for i in range(8)] == ["0"] * 4 + ["1"] * 4
    assert topo.cpu_affinity["GPU0"] is None
    assert topo.cpu_affinity["GPU4"] == "48-95,144-191"


def test_topo_padding_tabs_after_a_short_cpulist():
    """Older drivers pad a short cpulist with two tabs (`0-7\t\tN/A\t\tN/A`: a single
    Tesla P4, Project-HAMi/HAMi pull 99): padding, never an empty NUMA cell."""
    text = ("\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            "GPU0\t X \t0-7\t\tN/A\t\tN/A\n")
    topo = ns.parse_topo(text)
    assert topo.cpu_affinity == {"GPU0": "0-7"}
    assert topo.numa == {"GPU0": None}


def test_topo_degraded_pair_generated():
    # a lost NVLink bond shows as fewer links (NV17) or a PCIe path (SYS)
    text = cap("nvidia-smi-topo-m.txt").replace("NV18", "SYS", 1)
    topo = ns.parse_topo(text)
    assert ns.nv_links(topo.matrix[("GPU0", "GPU1")]) == 0
    assert ns.nv_links(topo.matrix[("GPU1", "GPU0")]) == 18


def test_nvlink_status_capture_and_inactive_link():
    st = ns.parse_nvlink_status(cap("nvidia-smi-nvlink-s.txt"))
    assert sorted(st) == [0, 1]
    assert len(st[0]) == 18 and set(st[0].values()) == {26.562}
    # nvidia-smi prints "<inactive>" for a link that is down
    down = cap("nvidia-smi-nvlink-s.txt").replace("Link 7: 26.562 GB/s", "Link 7: <inactive>", 1)
    st = ns.parse_nvlink_status(down)
    assert st[0][7] is None and sum(v is not None for v in st[0].values()) == 17
    assert st[1][7] == 26.562


def test_nvlink_errors_capture_and_generated_fault():
    err = ns.parse_nvlink_errors(cap("nvidia-smi-nvlink-e.txt"))
    assert sorted(err) == [0, 1] and len(err[0]) == 18
    assert all(c == {"replay": 0, "recovery": 0, "crc": 0}
               for links in err.values() for c in links.values())
    text = cap("nvidia-smi-nvlink-e.txt")
    gpu1 = text.index("GPU 1:")
    text = text[:gpu1] + text[gpu1:].replace("Link 4: CRC Errors: 0", "Link 4: CRC Errors: 12", 1)
    err = ns.parse_nvlink_errors(text)
    assert err[1][4]["crc"] == 12 and err[0][4]["crc"] == 0


def test_short_bus_id():
    assert ns.short_bus_id("00000000:00:06.0") == "0000:00:06.0"


def test_nvlink_empty_output_means_no_nvlink():
    # measured on a 1-GPU H200 VM slice (device run): `nvidia-smi nvlink -s` and `-e` print
    # nothing at all when no NVLink is exposed
    assert ns.parse_nvlink_status("") == {} and ns.parse_nvlink_errors("\n") == {}
    with pytest.raises(ns.ParseError):
        ns.parse_nvlink_status("Failed to initialize NVML\n")


def pre_ampere_ecc(sbe: int, dbe: int, aggregate_dbe: int) -> str:
    """The capture's -q -x with each <ecc_errors> rewritten in the layout nvidia-smi prints
    for GPUs before Ampere (volatile|aggregate -> single_bit|double_bit -> per-memory
    counts + total; NVML's SBE/DBE totals, nvml.h NVML_FI_DEV_ECC_SBE_VOL_TOTAL ...)."""
    def bits(kind: str, n: int) -> str:
        parts = "".join(f"<{t}>{v}</{t}>" for t, v in (
            ("device_memory", n), ("register_file", 0), ("l1_cache", 0), ("l2_cache", 0),
            ("texture_memory", "N/A"), ("texture_shm", "N/A"), ("cbu", "N/A")))
        return f"<{kind}>{parts}<total>{n}</total></{kind}>"

    block = (f"<ecc_errors><volatile>{bits('single_bit', sbe)}{bits('double_bit', dbe)}"
             f"</volatile><aggregate>{bits('single_bit', sbe + 5)}"
             f"{bits('double_bit', aggregate_dbe)}</aggregate></ecc_errors>")
    return re.sub(r"<ecc_errors>.*?</ecc_errors>", block,
                  (FIX / "nvidia-smi-q-x.xml").read_text(), flags=re.S)


def test_pre_ampere_ecc_layout_is_read():
    """Before: every ECC count None (silently not measured)."""
    g = ns.parse_query_xml(pre_ampere_ecc(sbe=3, dbe=1, aggregate_dbe=2)).gpus[0]
    assert (g.ecc_uncorrected_volatile, g.ecc_uncorrected_aggregate) == (1, 2)
    assert (g.ecc_corrected_volatile, g.ecc_corrected_aggregate) == (3, 8)
    now = ns.parse_query_xml((FIX / "nvidia-smi-q-x.xml").read_text()).gpus[0]
    assert (now.ecc_uncorrected_volatile, now.ecc_corrected_aggregate) == (0, 0)


def test_pre_ampere_ecc_check_fails_the_gpu_and_unknown_layout_errors(tmp_path):
    from test_checks_gpu import fails, make_ctx, run

    ctx = make_ctx(tmp_path, **{"nvidia-smi_-q_-x": pre_ampere_ecc(0, 1, 1)})
    bad = {(v.metric, v.labels["gpu"]) for v in fails(run("gpu.health", ctx), ctx)}
    assert ("gpu.ecc_uncorrected_volatile", "0") in bad
    unknown = re.sub(r"<ecc_errors>.*?</ecc_errors>", "<ecc_errors><hbm>1</hbm></ecc_errors>",
                     (FIX / "nvidia-smi-q-x.xml").read_text(), flags=re.S)
    ctx = make_ctx(tmp_path / "u", **{"nvidia-smi_-q_-x": unknown})
    with pytest.raises(ns.ParseError, match="unparsed.*GPU 0, 1"):
        run("gpu.health", ctx)


def _power_section(section: str, average: str, instant: str) -> str:
    """The capture's GPU 0 with its power section as driver 580 prints it (nvsmi_device_v12
    DTD: `gpu_power_readings` -> `average_power_draw`, `instant_power_draw`, no
    `power_draw`), renamed to `section` and with the two readings given."""
    xml = cap("nvidia-smi-q-x.xml")
    start, end = _gpu0_block(xml)
    block = re.sub(
        r"<gpu_power_readings>.*?</gpu_power_readings>",
        f"<{section}><power_state>P0</power_state>"
        f"<average_power_draw>{average}</average_power_draw>"
        f"<instant_power_draw>{instant}</instant_power_draw>"
        f"<current_power_limit>700.00 W</current_power_limit></{section}>",
        xml[start:end], count=1, flags=re.S)
    return xml[:start] + block + xml[end:]


def test_power_draw_only_instant_or_only_under_power_readings():
    """Driver 580 prints the board power only as `average_power_draw` / `instant_power_draw`
    (made from the tool's documented format: nvsmi_device_v12.dtd and nvidia-smi
    --help-query-gpu, `power.draw` = the 1 s average on Ampere+, the instant reading before
    Ampere, whose average 580 prints N/A; not captured). Before: a GPU with the average N/A,
    or its readings under `power_readings`, read as no power at all."""
    instant_only = ns.parse_query_xml(_power_section("gpu_power_readings", "N/A", "41.37 W"))
    assert instant_only.gpus[0].power_draw_w == 41.37
    older_name = ns.parse_query_xml(_power_section("power_readings", "N/A", "39.50 W"))
    assert older_name.gpus[0].power_draw_w == 39.50
    both = ns.parse_query_xml(_power_section("power_readings", "52.25 W", "53.00 W"))
    assert both.gpus[0].power_draw_w == 52.25  # the average first, as nvidia-smi's power.draw
    none = ns.parse_query_xml(_power_section("gpu_power_readings", "N/A", "N/A"))
    assert none.gpus[0].power_draw_w is None  # N/A stays none, never 0 W
    # the capture reads as before: GPU 0's average (79.72 W), GPU 1's average
    g0, g1 = ns.parse_query_xml(cap("nvidia-smi-q-x.xml")).gpus
    assert (g0.power_draw_w, g1.power_draw_w) == (79.72, 78.60)
