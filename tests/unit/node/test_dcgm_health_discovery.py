"""DCGM's view of the node: `dcgmi discovery -l` and `dcgmi health -c [-j]`, the parsers on
the captures in tests/fixtures/field/dcgm (README there: which are captured, which are
made from DCGM's source) and the checks dcgm.discovery and dcgm.health end to end
against hwsim's dcgmi."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hwsim_node import make_node, run_suite

from rackready.site.inventory import provisioned
from rackready_lab.hwsim.cli.dcgmi import chunks
from rackready_lab.hwsim.faults import apply_fault
from rackready_lab.hwsim.state import build_state
from validation.probes.dcgm_discovery import parse_discovery
from validation.probes.dcgm_health import parse_health_json, parse_health_text
from validation.probes.nvidia_smi import ParseError

FIELD = Path(__file__).resolve().parents[2] / "fixtures" / "field" / "dcgm"


def _read(name: str) -> str:
    return (FIELD / name).read_text()


# --- dcgmi discovery -l -------------------------------------------------------------

def test_discovery_dcgm_3_2_6_capture_eight_a100_no_switches() -> None:
    """Captured: NVIDIA/DCGM issue 83 (dcgmi 3.2.6, 8x A100-SXM4-80GB in a VM)."""
    d = parse_discovery(_read("discovery-3.2.6-a100x8.txt"))
    assert [g.dcgm_id for g in d.gpus] == [str(i) for i in range(8)]
    assert d.gpus[0].name == "NVIDIA A100-SXM4-80GB"
    assert d.gpus[0].bus_id == "0000:10:1c.0"  # the short lower-case form nvidia-smi's reads use
    assert d.gpus[7].uuid == "GPU-59e925d1-5f83-fc83-c0e5-a80a31d2ddf3"
    assert d.nvswitches == () and not d.inactive_left_out


def test_discovery_dcgm_4_5_active_list_leaves_a_detached_gpu_out() -> None:
    """Made from DCGM 4.5 dcgmi/Query.cpp (`N GPUs found (Active).`, the -a note, NvSwitch,
    ConnectX and CPU boxes), not captured."""
    d = parse_discovery(_read("discovery-4.5-active-one-detached.txt"))
    assert [g.dcgm_id for g in d.gpus] == ["0", "1", "2", "4", "5", "6", "7"]
    assert "0000:5d:00.0" not in {g.bus_id for g in d.gpus}
    assert d.nvswitches == ("0", "1", "2", "3") and d.inactive_left_out


def test_discovery_dcgm_4_5_all_marks_the_detached_gpu_and_its_last_known_bus() -> None:
    """Made from DCGM 4.5 Query.cpp HelperPopulateGpuDeviceOutput (-a: `Status: DETACHED`,
    `(last known)`) with Grace CPUs listed after (3.3+), not captured."""
    d = parse_discovery(_read("discovery-4.5-all-detached-status.txt"))
    assert len(d.gpus) == 8
    assert (d.gpus[3].status, d.gpus[3].bus_id, d.gpus[3].name) == \
        ("DETACHED", "0000:5d:00.0", "NVIDIA H100 80GB HBM3")
    assert {g.status for g in d.gpus[:3] + d.gpus[4:]} == {"OK"}
    assert d.nvswitches == ("0", "1", "2", "3")


NULL_NAME = """4 GPUs found.
+--------+----------------------------------------------------------------------+
| GPU ID | Device Information                                                   |
+--------+----------------------------------------------------------------------+
| 0      | Name: <<<NULL>>>                                                     |
|        | PCI Bus ID: 00000000:4C:00.0                                         |
|        | Device UUID: GPU-d6a2c177-4cd8-8d01-0310-79f2720f37de                |
+--------+----------------------------------------------------------------------+
| 1      | Name: <<<NULL>>>                                                     |
|        | PCI Bus ID: 00000000:5D:00.0                                         |
|        | Device UUID: GPU-75c4ee16-a840-6f6c-9a7b-5ed8f41598b8                |
+--------+----------------------------------------------------------------------+
| 2      | Error: Cannot get device attributes for GPU.                         |
|        | Return: Host engine connection invalid/disconnected                  |
+--------+----------------------------------------------------------------------+
| 3      | Name: NVIDIA H100 80GB HBM3                                          |
|        | PCI Bus ID: 00000000:DB:00.0                                         |
|        | Device UUID: GPU-73d08f06-a1e2-4f75-e284-e491738fb008                |
+--------+----------------------------------------------------------------------+
4 NvSwitches found.
+-----------+
| Switch ID |
+-----------+
| 0         |
| 1         |
| 2         |
| 3         |
+-----------+
"""


def test_discovery_null_names_and_a_gpu_without_attributes() -> None:
    """The first two GPUs as NVIDIA/DCGM issue 229 shows them (H100 SXM, `Name: <<<NULL>>>`);
    GPU 2 as Query.cpp prints a GPU whose attributes it could not read (made, not
    captured): kept with no bus id, so the driver's GPU at that bus is not 'seen'."""
    d = parse_discovery(NULL_NAME)
    assert [(g.name, g.bus_id) for g in d.gpus] == [
        ("<<<NULL>>>", "0000:4c:00.0"), ("<<<NULL>>>", "0000:5d:00.0"), ("", ""),
        ("NVIDIA H100 80GB HBM3", "0000:db:00.0")]
    assert len(d.nvswitches) == 4


# NvSwitch module denylisted (KempnerInstitute/kempnerpulse issue 15: exit 223 after the GPU
# box): Query.cpp prints its error where the NvSwitch count would be
DENYLISTED = NULL_NAME.split("4 NvSwitches")[0] + (
    "Error: Cannot get NvSwitch list from remote node. Return: This request is serviced by "
    "a module of DCGM that is not currently loaded\n")


@pytest.mark.parametrize("text", [
    "", "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.",
    DENYLISTED,  # no switch count: never read as "0 NVSwitches"
    NULL_NAME.replace("4 GPUs found.", "5 GPUs found."),  # a count the rows do not back
    NULL_NAME.replace("| 3         |\n", ""),  # 4 NvSwitches found, 3 listed
    NULL_NAME.replace("| 1      | Name", "| x      | Name"),
], ids=["empty", "no-hostengine", "nvswitch-module-denylisted", "gpu-count-mismatch",
        "switch-count-mismatch", "bad-gpu-row"])
def test_discovery_unparsable_is_an_error_never_zero_gpus(text: str) -> None:
    with pytest.raises(ParseError, match="unparsed"):
        parse_discovery(text)


# --- dcgmi health -c [-j] -----------------------------------------------------------

def test_health_json_capture_healthy_has_overall_alone() -> None:
    """Captured: NVIDIA/DCGM issue 263 (`dcgmi health -s a`, then `dcgmi health -c -j`)."""
    r = parse_health_json(_read("health-j-4.x-healthy.json"))
    assert (r.overall, r.incidents, r.entities) == ("pass", (), {})


def _summary(r: Any) -> list[tuple[str, str, str, str, str]]:
    return [(i.entity, i.entity_id, i.system, i.health, i.message) for i in r.incidents]


EXPECTED = [
    ("gpu", "1", "Memory system", "fail", "Detected 2 volatile double-bit ECC error(s) in GPU 1."),
    ("gpu", "1", "PCIe system", "warn",
     "Detected more than 8 PCIe replays per minute for GPU 1 : 25"),
    ("gpu", "3", "Thermal system", "warn",
     "Detected clocks event due to thermal violation in GPU 3."),
    ("nvswitch", "2", "Internal error", "fail", "Detected fatal errors on NvSwitch 2 link 24"),
]


def test_health_json_incidents_per_entity_and_system_with_their_messages() -> None:
    """Made from DCGM 4 dcgmi/Health.cpp + DcgmiOutput.cpp (jsoncpp: body -> entity group ->
    children -> Errors -> system {value, overflow}; messages cut at 54 characters) with
    DcgmHealthWatch's messages (dcgm_errors.h), not captured. An NVSwitch system has no
    name in HelperSystemToString: dcgmi prints "Internal error"."""
    r = parse_health_json(_read("health-j-4.x-incidents.json"))
    assert r.overall == "fail"
    assert _summary(r) == EXPECTED
    assert r.entities == {("gpu", "1"): "fail", ("gpu", "3"): "warn", ("nvswitch", "2"): "fail"}


def test_health_text_reads_the_same_tree_as_the_json() -> None:
    """The boxed report (no -j; DcgmiOutputTree 28/60, rows as in DCGM's
    dcgmi/tests/HealthTests.cpp), made from the source, not captured."""
    text = parse_health_text(_read("health-c-text-incidents.txt"))
    assert text == parse_health_json(_read("health-j-4.x-incidents.json"))


# the healthy boxed report (DcgmiOutputTree 28/60), made from the source, not captured
_EDGE = "+" + "-" * 27 + "+" + "-" * 58 + "+"
HEALTHY_TEXT = "\n".join([
    _EDGE, f"| {'Health Monitor Report':<85}|", _EDGE.replace("-", "="),
    f"| {'Overall Health':<25} | {'Healthy':<56} |", _EDGE]) + "\n"


def test_health_text_healthy() -> None:
    r = parse_health_text(HEALTHY_TEXT)
    assert (r.overall, r.incidents) == ("pass", ())


def test_health_internal_error_entity_is_unknown_not_pass() -> None:
    doc = {"body": {"Overall Health": {"value": "Internal error"}, "GPU": {"children": {
        "0": {"value": "Internal error"}}}}, "header": ["Health Monitor Report"]}
    r = parse_health_json(json.dumps(doc))
    assert r.overall == "unknown" and r.entities == {("gpu", "0"): "unknown"}


@pytest.mark.parametrize("text", [
    "", "Error: Health watches not enabled. Please enable watches. \n", "{}",
    json.dumps({"body": {}, "header": ["Health Monitor Report"]}),
    json.dumps({"body": {"Overall Health": {"value": "Fine"}}}),
    json.dumps({"body": {"Overall Health": {"value": "Failure"},
                         "GPU": {"children": {"0": {"value": "Bad"}}}}}),
    json.dumps({"body": {"Overall Health": {"value": "Failure"}, "GPU": ["0"]}}),
])
def test_health_json_unparsable_is_an_error(text: str) -> None:
    with pytest.raises(ParseError, match="unparsed"):
        parse_health_json(text)


@pytest.mark.parametrize("text", ["", HEALTHY_TEXT.replace("| Overall Health", "| Overall"),
                                  HEALTHY_TEXT.replace("Healthy ", "Great   ")])
def test_health_text_unparsable_is_an_error(text: str) -> None:
    with pytest.raises(ParseError, match="unparsed"):
        parse_health_text(text)


def test_hwsim_cuts_messages_as_dcgmi_does() -> None:
    """Health.cpp AddErrorMessage, checked on DCGM's own HealthTests.cpp expectations."""
    assert chunks("The car is red? Are you sure because that doesn't seem like the color I "
                  "ordered.") == ["The car is red? Are you sure because that doesn't seem",
                                  "like the color I ordered."]
    assert chunks("Green can be emerald and beautiful, but there are shades of green which "
                  "are sure to disappoint.") == [
        "Green can be emerald and beautiful, but there are",
        "shades of green which are sure to disappoint."]


# --- the checks against hwsim -------------------------------------------------------

def _run(tmp: Path, only: str, state: dict[str, Any] | None = None,
         platform: str = "xe9680-h200", profile: str = "xe9680-h200-lab",
         extra: tuple[str, ...] = ()) -> tuple[Any, dict[str, Any]]:
    st = state or build_state(platform, "gpu01", "roce", provisioned=True)
    node = make_node(tmp, platform, "gpu01", "roce", st)
    site = {**provisioned({}, Path("roles")), "nccl_nvls_enable": False, "fabric": "roce",
            "node": st["node"], "rdma_devices": [n["bdf"] for n in st["nics"]],
            "workloads": {"device": "cpu"}}
    return run_suite(node, tmp / "out", profile, site, "--only", only, *extra,
                     timeout_s=120)


def _verdicts(result: dict[str, Any], metric: str) -> list[dict[str, Any]]:
    return [v for v in result["verdicts"] if v["metric"] == metric]


def test_discovery_and_health_pass_on_a_healthy_xe9680(tmp_path: Path) -> None:
    proc, result = _run(tmp_path, "dcgm.discovery,dcgm.health")
    assert result, proc.stderr[-2000:]
    counts = {(v["metric"], v["value"], v["outcome"]) for v in result["verdicts"]
              if v["metric"] in ("dcgm.gpu_count", "dcgm.nvswitch_count")}
    assert counts == {("dcgm.gpu_count", 8, "pass"), ("dcgm.nvswitch_count", 4, "pass")}
    assert len(_verdicts(result, "dcgm.gpu_seen")) == 8
    # one failures and one warnings figure per GPU and NVSwitch, all zero
    fails = _verdicts(result, "dcgm.health_failures")
    assert len(fails) == 12 and all(v["outcome"] == "pass" and v["value"] == 0 for v in fails)
    assert proc.returncode == 0 and result["outcome"] == "PASS"
    assert (tmp_path / "out/artifacts/dcgmi-health-c-gpu.json").is_file()
    assert (tmp_path / "out/artifacts/dcgmi-health-c-nvswitch.json").is_file()


def test_health_fail_names_the_gpu_the_system_and_the_message(tmp_path: Path) -> None:
    st = apply_fault(build_state("xe9680-h200", "gpu01", "roce", provisioned=True),
                     "dcgm-health-fail", "5")
    g = st["gpus"][5]
    proc, result = _run(tmp_path, "dcgm.health", st)
    assert proc.returncode == 1 and result["outcome"] == "FAIL"
    (bad,) = [v for v in _verdicts(result, "dcgm.health_failures") if v["outcome"] == "fail"]
    assert f"serial {g['serial']}" in bad["message"] and g["bdf"] in bad["message"]
    assert "Memory system: Detected 1 volatile double-bit ECC error(s) in GPU 5." \
        in bad["message"]
    assert bad["remediation"]


def test_health_warning_fails_by_the_profile_threshold(tmp_path: Path) -> None:
    st = build_state("xe9680-h200", "gpu01", "roce", provisioned=True)
    st["gpus"][2]["dcgm_incidents"] = [
        {"system": "PCIe system", "health": "warn",
         "message": "Detected more than 8 PCIe replays per minute for GPU 2 : 40"}]
    st["nvswitches"][1]["dcgm_incidents"] = [
        {"system": "Internal error", "health": "fail",
         "message": "Detected fatal errors on NvSwitch 1 link 7"}]
    proc, result = _run(tmp_path, "dcgm.health", st)
    assert result["outcome"] == "FAIL"
    (warn,) = [v for v in _verdicts(result, "dcgm.health_warnings") if v["outcome"] == "fail"]
    assert "PCIe system: Detected more than 8 PCIe replays per minute for GPU 2 : 40" \
        in warn["message"] and f"serial {st['gpus'][2]['serial']}" in warn["message"]
    assert warn["threshold"]["tier"] == "provisional"
    (sw,) = [v for v in _verdicts(result, "dcgm.health_failures") if v["outcome"] == "fail"]
    assert "NVSwitch 1" in sw["message"] and "link 7" in sw["message"]


def test_gpu_unseen_by_dcgm_is_named_by_its_bus_id(tmp_path: Path) -> None:
    st = apply_fault(build_state("xe9680-h200", "gpu01", "roce", provisioned=True),
                     "dcgm-gpu-unseen", "6")
    g = st["gpus"][6]
    proc, result = _run(tmp_path, "dcgm.discovery", st)
    assert proc.returncode == 1 and result["outcome"] == "FAIL"
    (count,) = _verdicts(result, "dcgm.gpu_count")
    assert (count["value"], count["outcome"]) == (7, "fail")
    (unseen,) = [v for v in _verdicts(result, "dcgm.gpu_seen") if v["outcome"] == "fail"]
    assert g["bdf"] in unseen["message"] and f"serial {g['serial']}" in unseen["message"]


def test_dl380a_without_nvswitches_passes(tmp_path: Path) -> None:
    proc, result = _run(tmp_path, "dcgm.discovery,dcgm.health",
                        platform="dl380a-gen12-h200nvl", profile="dl380a-gen12-h200nvl-lab")
    assert result, proc.stderr[-2000:]
    assert proc.returncode == 0 and result["outcome"] == "PASS", \
        [v["message"] for v in result["verdicts"] if v["outcome"] == "fail"]
    (sw,) = _verdicts(result, "dcgm.nvswitch_count") or [{"value": 0}]
    assert sw["value"] == 0
    assert not (tmp_path / "out/artifacts/dcgmi-health-c-nvswitch.json").exists()


def test_a_scope_without_nvswitch_leaves_the_switch_count_unjudged(tmp_path: Path) -> None:
    """A VM slice of an HGX board (`--gpus 2 --without nvswitch`) sees no NVSwitch: the
    profile's 4 is not judged (not applicable), the 2 GPUs are."""
    st = build_state("xe9680-h200", "gpu01", "roce", provisioned=True)
    st["nvswitches"] = []
    for g in st["gpus"][2:]:
        g["present"] = False
    proc, result = _run(tmp_path, "dcgm.discovery", st,
                        extra=("--gpus", "2", "--without", "nvswitch,fabric-manager,nvlink"))
    assert result, proc.stderr[-2000:]
    (sw,) = _verdicts(result, "dcgm.nvswitch_count")
    assert sw["outcome"] == "not_applicable", sw
    (gpus,) = _verdicts(result, "dcgm.gpu_count")
    assert (gpus["value"], gpus["outcome"]) == (2, "pass")


def test_the_sampling_wait_is_the_sites_and_a_bad_one_is_refused() -> None:
    from validation.checks.dcgm import HEALTH_SETTLE_S, settle_s

    assert settle_s({}) == HEALTH_SETTLE_S == 1.0
    assert settle_s({"dcgm": {"health_settle_s": 0}}) == 0.0
    for bad in (-1, 61, "1", True, None):
        with pytest.raises(ValueError, match="health_settle_s must be 0-60 s"):
            settle_s({"dcgm": {"health_settle_s": bad}})
