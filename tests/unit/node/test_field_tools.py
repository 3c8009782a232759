"""DCGM diagnostics (dcgmi diag -j) and perftest GPUDirect bandwidth (ib_write_bw):
the parsers on the tools' documented output, and the checks end to end against hwsim."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hwsim_node import make_node, run_suite

from rackready.site.inventory import provisioned
from rackready_lab.hwsim.faults import apply_fault
from rackready_lab.hwsim.state import build_state
from validation.probes.dcgm import parse_diag_json
from validation.probes.nvidia_smi import ParseError
from validation.probes.perftest import parse_bw

# DCGM 4 `dcgmi diag -r 2 -j` (keys of DCGM's nvvs/include/NvvsJsonStrings.h), GPU 1 failing
DCGM4 = {
    "DCGM Diagnostic": {"test_categories": [
        {"category": "Deployment", "tests": [
            {"name": "software", "results": [
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Pass"}],
             "test_summary": {"status": "Pass"}}]},
        {"category": "Hardware", "tests": [
            {"name": "memory", "results": [
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
                {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Fail",
                 "warnings": [{"error_category": 2, "error_id": 95, "error_severity": 2,
                               "warning": "GPU 1 had an uncorrectable memory error"}]}],
             "test_summary": {"status": "Fail"}}]}]},
    "metadata": {"DCGM Version": "4.4.1", "Driver Version Detected": "580.159.04"},
}
# DCGM 3: "DCGM GPU Diagnostic", results per gpu_ids ("0,1") or gpu_id
DCGM3 = {"DCGM GPU Diagnostic": {"test_categories": [
    {"category": "Deployment", "tests": [
        {"name": "Denylist", "results": [{"status": "PASS"}]}]},
    {"category": "Integration", "tests": [
        {"name": "PCIe", "results": [{"gpu_ids": "0,1", "status": "Skip"}]}]},
    {"category": "Hardware", "tests": [
        {"name": "GPU Memory", "results": [{"gpu_id": "0", "status": "Warn"}]}]}]}}

PERFTEST = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF		Device         : mlx5_0
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 8388608    5000             391.25             390.87               0.005824
---------------------------------------------------------------------------------------
"""


def test_dcgm4_json_one_result_per_plugin_and_gpu_with_the_failure_named() -> None:
    res = parse_diag_json(json.dumps(DCGM4))
    assert [(r.plugin, r.gpu, r.status) for r in res] == [
        ("software", "0", "Pass"), ("software", "1", "Pass"),
        ("memory", "0", "Pass"), ("memory", "1", "Fail")]
    assert res[-1].warnings == ("GPU 1 had an uncorrectable memory error",)
    assert res[-1].category == "Hardware"


def test_dcgm3_json_gpu_ids_and_upper_case_status() -> None:
    res = parse_diag_json(json.dumps(DCGM3))
    assert [(r.plugin, r.gpu, r.status) for r in res] == [
        ("Denylist", "all", "Pass"), ("PCIe", "0", "Skip"), ("PCIe", "1", "Skip"),
        ("GPU Memory", "0", "Warn")]


# DCGM 3.x `dcgmi diag -r 3 -j` with `null` between tests and results: the shape and key
# names of the DCGM 3 capture in NVIDIA/DCGM issue 139 ("DCGM GPU Diagnostic", gpu_id
# strings, tab-indented), with the unfilled slots dcgmi's jsoncpp arrays leave where a
# test did not run at that level or a GPU is not in the group. Made from that documented
# format (nvvs/include/NvvsJsonStrings.h), not captured.
DCGM3_NULLS = """{
\t"DCGM GPU Diagnostic" :
\t{
\t\t"test_categories" :
\t\t[
\t\t\t{
\t\t\t\t"category" : "Deployment",
\t\t\t\t"tests" :
\t\t\t\t[
\t\t\t\t\t{ "name" : "Denylist", "results" : [ { "status" : "Pass" } ] },
\t\t\t\t\tnull,
\t\t\t\t\t{ "name" : "Persistence Mode", "results" : [ { "status" : "Pass" } ] }
\t\t\t\t]
\t\t\t},
\t\t\tnull,
\t\t\t{
\t\t\t\t"category" : "Hardware",
\t\t\t\t"tests" :
\t\t\t\t[
\t\t\t\t\tnull,
\t\t\t\t\t{
\t\t\t\t\t\t"name" : "GPU Memory",
\t\t\t\t\t\t"results" :
\t\t\t\t\t\t[
\t\t\t\t\t\t\tnull,
\t\t\t\t\t\t\t{ "gpu_id" : "1", "status" : "Fail",
\t\t\t\t\t\t\t  "warnings" : [ null, { "warning" : "GPU 1 had an uncorrectable memory error" } ] }
\t\t\t\t\t\t]
\t\t\t\t\t},
\t\t\t\t\tnull
\t\t\t\t]
\t\t\t}
\t\t]
\t},
\t"version" : "3.3.8"
}
"""


def test_dcgm3_json_with_null_entries_reads_the_tests_around_them() -> None:
    """Before: one null between tests made the whole diagnostic unparsed (dcgm.diag
    errored). A null is an unfilled slot, no entry: every real result is read."""
    res = parse_diag_json(DCGM3_NULLS)
    assert [(r.category, r.plugin, r.gpu, r.status) for r in res] == [
        ("Deployment", "Denylist", "all", "Pass"),
        ("Deployment", "Persistence Mode", "all", "Pass"),
        ("Hardware", "GPU Memory", "1", "Fail")]
    assert res[-1].warnings == ("GPU 1 had an uncorrectable memory error",)


@pytest.mark.parametrize("doc", [
    {"DCGM GPU Diagnostic": {"test_categories": [None, None]}},
    {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware",
                                                  "tests": [None, None]}]}},
    {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "GPU Memory", "results": [None]}]}]}},
])
def test_dcgm3_json_of_nulls_only_is_still_refused(doc: dict) -> None:
    """Nulls skipped, nothing left: no results at all, unparsed (never an empty pass)."""
    with pytest.raises(ParseError, match="no test results"):
        parse_diag_json(json.dumps(doc))


@pytest.mark.parametrize("text", ["", "Successfully ran diagnostic for group.", "{}",
                                  json.dumps({"DCGM Diagnostic": {"test_categories": []}}),
                                  json.dumps({"DCGM Diagnostic": {"test_categories": [
                                      {"category": "x", "tests": [{"name": "y", "results": [
                                          {"entity_id": 0, "status": "Maybe"}]}]}]}})])
def test_dcgm_unparsable_is_an_error_not_a_pass(text: str) -> None:
    with pytest.raises(ParseError, match="unparsed"):
        parse_diag_json(text)


def test_perftest_gbits_table() -> None:
    (row,) = parse_bw(PERFTEST)
    assert (row.size_bytes, row.iterations, row.peak_gbps, row.avg_gbps) == \
        (8388608, 5000, 391.25, 390.87)


def test_perftest_mb_per_sec_is_converted_to_gbps() -> None:
    # without --report_gbits perftest reports MB/sec in 2^20 bytes
    text = PERFTEST.replace("Gb/sec", "MB/sec").replace("390.87", "46595.00")
    (row,) = parse_bw(text)
    assert row.avg_gbps == pytest.approx(46595 * 1048576 * 8 / 1e9, abs=0.01)


@pytest.mark.parametrize("text", ["", PERFTEST.splitlines()[4],
                                  PERFTEST.replace("#bytes", "#size")])
def test_perftest_unparsable_is_an_error(text: str) -> None:
    with pytest.raises(ParseError, match="unparsed"):
        parse_bw(text)


def _site(node: Any, nics: list[str]) -> dict[str, Any]:
    # what the controller ships: the role variables that provisioned the node
    return {**provisioned({}, Path("roles")), "nccl_nvls_enable": False, "fabric": "roce",
            "node": node.state()["node"], "rdma_devices": nics,
            "workloads": {"device": "cpu"}}


def _run(tmp: Path, only: str, state: dict[str, Any] | None = None,
         level: str = "standard") -> tuple[Any, dict[str, Any]]:
    st = state or build_state("xe9680-h200", "gpu01", "roce", provisioned=True)
    node = make_node(tmp, "xe9680-h200", "gpu01", "roce", st)
    compute = [n["bdf"] for n in st["nics"] if n["role"] == "compute"]
    return run_suite(node, tmp / "out", "xe9680-h200-lab", _site(node, compute),
                     "--level", level, "--only", only, timeout_s=120)


def _verdicts(result: dict[str, Any], metric: str) -> list[dict[str, Any]]:
    return [v for v in result["verdicts"] if v["metric"] == metric]


def test_dcgm_diag_through_hwsim_passes_every_plugin_on_every_gpu(tmp_path: Path) -> None:
    proc, result = _run(tmp_path, "dcgm.diag")
    assert result, proc.stderr[-2000:]
    vs = _verdicts(result, "dcgm.diag_result")
    # -r 2: software, memory, pcie on 8 GPUs
    assert len(vs) == 24 and all(v["outcome"] == "pass" for v in vs), vs[:2]
    assert proc.returncode == 0 and result["outcome"] == "PASS"
    assert (tmp_path / "out/artifacts/dcgmi-diag-r2.json").is_file()


def test_dcgm_diag_burnin_runs_level_3(tmp_path: Path) -> None:
    proc, result = _run(tmp_path, "dcgm.diag", level="burnin")
    assert result, proc.stderr[-2000:]
    plugins = {v["labels"]["plugin"] for v in _verdicts(result, "dcgm.diag_result")}
    assert {"targeted_stress", "targeted_power", "memory_bandwidth"} <= plugins
    assert (tmp_path / "out/artifacts/dcgmi-diag-r3.json").is_file()


def test_dcgm_diag_ecc_fault_fails_the_memory_plugin_on_that_gpu(tmp_path: Path) -> None:
    st = apply_fault(build_state("xe9680-h200", "gpu01", "roce", provisioned=True),
                     "ecc-uncorrectable", "3")
    proc, result = _run(tmp_path, "dcgm.diag", st)
    assert proc.returncode == 1 and result["outcome"] == "FAIL"
    bad = [(v["labels"]["plugin"], v["labels"]["gpu"]) for v in
           _verdicts(result, "dcgm.diag_result") if v["outcome"] == "fail"]
    assert bad == [("memory", "3")]


def test_gpudirect_bw_through_hwsim_one_figure_per_compute_rail(tmp_path: Path) -> None:
    proc, result = _run(tmp_path, "rdma.gpudirect_bw")
    assert result, proc.stderr[-2000:]
    vs = _verdicts(result, "rdma.gpudirect_bw_gbps")
    assert sorted(v["labels"]["nic"] for v in vs) == [f"mlx5_{i}" for i in range(8)]
    assert sorted(v["labels"]["gpu"] for v in vs) == [str(i) for i in range(8)]
    assert all(v["outcome"] == "pass" and 370 <= v["value"] <= 400 for v in vs), vs
    assert proc.returncode == 0 and result["outcome"] == "PASS"


def test_gpudirect_bw_down_port_fails_naming_the_device(tmp_path: Path) -> None:
    st = apply_fault(build_state("xe9680-h200", "gpu01", "roce", provisioned=True),
                     "ib-port-down", "mlx5_2")
    proc, result = _run(tmp_path, "rdma.gpudirect_bw", st)
    assert proc.returncode == 1 and result["outcome"] == "FAIL"
    bad = [v for v in _verdicts(result, "rdma.gpudirect_bw_gbps") if v["outcome"] == "fail"]
    assert [v["labels"]["nic"] for v in bad] == ["mlx5_2"]


def test_gpudirect_bw_downtrained_gpu_reports_less(tmp_path: Path) -> None:
    st = apply_fault(build_state("xe9680-h200", "gpu01", "roce", provisioned=True),
                     "pcie-downtrained", "0")
    proc, result = _run(tmp_path, "rdma.gpudirect_bw", st)
    vs = {v["labels"]["gpu"]: v for v in _verdicts(result, "rdma.gpudirect_bw_gbps")}
    assert vs["0"]["outcome"] == "fail" and vs["0"]["value"] < 360, vs["0"]
    assert vs["1"]["outcome"] == "pass"


# --- nccl-tests in the lab: hwsim's prebuilt stand-in --------------------------------------

def _nccl_build(node: Any, tmp: Path) -> Path:
    """<validation_tools_nccl_tests_dir>/build as hwsim's nccl-tests package lays it out."""
    import sys

    from validation.workloads.busbw import OPS

    build = tmp / "nccl-tests" / "build"
    build.mkdir(parents=True)
    for op in OPS:
        f = build / f"{op}_perf"
        f.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rackready_lab.hwsim.cli.nccl_tests '
                     f'{op} "$@"\n')
        f.chmod(0o755)
    return build


def test_nccl_tests_package_installs_every_op_into_the_roles_default_dir() -> None:
    import yaml

    from rackready_lab.hwsim.packages import package_specs
    from validation.workloads.busbw import OPS

    (pkg,) = [p for p in package_specs() if p.name == "nccl-tests"]
    default = yaml.safe_load(Path("roles/validation_tools/defaults/main.yml").read_text())
    build = default["validation_tools_nccl_tests_dir"] + "/build"
    assert sorted(pkg.tools) == sorted(f"{build}/{op}_perf" for op in OPS)
    assert pkg.version.startswith(default["validation_tools_nccl_tests_version"] + "-")


def _nccl_run(tmp: Path, state: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    st = state or build_state("xe9680-h200", "gpu01", "roce", provisioned=True)
    node = make_node(tmp, "xe9680-h200", "gpu01", "roce", st)
    build = _nccl_build(node, tmp)
    compute = [n["bdf"] for n in st["nics"] if n["role"] == "compute"]
    site = {**_site(node, compute), "validation_tools_nccl_tests_dir": str(build.parent)}
    return run_suite(node, tmp / "out", "xe9680-h200-lab", site, "--level", "standard",
                     "--only", "nccl_tests", timeout_s=120)


def test_nccl_tests_check_through_hwsim_passes_with_measurements(tmp_path: Path) -> None:
    proc, result = _nccl_run(tmp_path)
    assert result, proc.stderr[-2000:]
    status = {c["check"]: c["status"] for c in result["checks"]}
    assert status == {"nccl_tests": "ok"}, result["checks"]
    busbw = [v for v in _verdicts(result, "nccl.busbw") if v["labels"].get("impl") == "nccl-tests"]
    from validation.workloads.busbw import OPS

    assert {v["labels"]["op"] for v in busbw} == set(OPS)
    assert {v["labels"]["ranks"] for v in busbw} == {"8"}
    assert all(v["outcome"] == "pass" for v in busbw)
    assert _verdicts(result, "nccl.correct") and proc.returncode == 0, proc.stderr[-2000:]
    head = (tmp_path / "out/artifacts/nccl-tests-all_reduce.txt").read_text().splitlines()[:2]
    assert "nccl-tests version 2.19.6" in head[0] and "SIMULATED" in head[1]


def test_nccl_tests_nvlink_down_halves_busbw_and_fails(tmp_path: Path) -> None:
    st = apply_fault(build_state("xe9680-h200", "gpu01", "roce", provisioned=True),
                     "nvlink-down", "0")
    proc, result = _nccl_run(tmp_path, st)
    bad = [v for v in _verdicts(result, "nccl.busbw") if v["outcome"] == "fail"]
    assert bad and proc.returncode == 1 and result["outcome"] == "FAIL"


def test_the_client_waits_for_its_server_to_listen_or_exit_not_a_fixed_time() -> None:
    """rdma.gpudirect_bw starts each rail's client once the server listens (the kernel's
    TCP table, nothing connects) or has exited (hwsim's answers at once), at most 0.5 s."""
    import socket
    import subprocess
    import sys
    import time

    from validation.checks.rdma_perf import LISTEN_WAIT_S, await_server, listening

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert not listening(port)  # bound, not listening
        s.listen(1)
        assert listening(port)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], text=True)
    try:
        start = time.monotonic()
        await_server(sleeper, port)  # neither listening nor exited: the whole wait
        assert time.monotonic() - start >= LISTEN_WAIT_S
    finally:
        sleeper.kill()
        sleeper.wait()
    start = time.monotonic()
    await_server(sleeper, port, limit_s=30)  # exited: no wait
    assert time.monotonic() - start < 5
