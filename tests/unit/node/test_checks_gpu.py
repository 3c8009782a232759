"""GPU, NVLink, PCIe, fabric, kernel and health-delta checks run against the real capture
(served by a fake `ctx.run`), then judged; faults are generated from the capture."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from validation.checks.catalog import all_checks
from validation.checks.registry import CheckSkipped, Context
from validation.judge import judge
from validation.model import CheckResult
from validation.profile import load_profile, scope

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "hgx-h200-2gpu"

CMDS = {
    ("nvidia-smi", "-q", "-x"): "nvidia-smi-q-x.xml",
    ("nvidia-smi", "topo", "-m"): "nvidia-smi-topo-m.txt",
    ("nvidia-smi", "nvlink", "-s"): "nvidia-smi-nvlink-s.txt",
    ("nvidia-smi", "nvlink", "-e"): "nvidia-smi-nvlink-e.txt",
}


class FakeContext(Context):
    """Commands answer from the capture (plus overrides); files come from a tmp sysroot."""

    outputs: dict[tuple[str, ...], str]

    def run(self, cmd, timeout_s=60, artifact=None, ok_codes=(0,)):
        key = tuple(cmd)
        if key not in self.outputs:
            raise CheckSkipped(f"{cmd[0]} not found on this node")
        return self.outputs[key]


def make_ctx(tmp_path: Path, profile=None, **overrides: str) -> FakeContext:
    root = tmp_path / "root"
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "var/log").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(
        (FIX / "proc-driver-nvidia.txt").read_text().split("==")[0])
    (root / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz ro iommu=pt\n")
    (root / "proc/modules").write_text("nvidia 1 0 - Live 0x0\nnvidia_uvm 1 0 - Live 0x0\n")
    (root / "var/log/kern.log").write_text("")
    profile = profile or scope(load_profile("xe9680-h200"), gpus=2)
    ctx = FakeContext(profile=profile, level="quick", sysroot=root, out=tmp_path / "out")
    ctx.outputs = {k: (FIX / v).read_text() for k, v in CMDS.items()}
    for key, text in overrides.items():
        ctx.outputs[tuple(key.split("_"))] = text
    return ctx


def run(name: str, ctx: Context) -> CheckResult:
    spec = all_checks()[name]
    ctx.cache.pop("smi", None)
    return CheckResult(name, "ok", 0.0, tuple(spec.fn(ctx)), "", spec.needs)


def fails(result: CheckResult, ctx: Context) -> list:
    return [v for v in judge([result], ctx.profile) if v.outcome == "fail"]


def xml_fault(gpu_bus: str, **edits: str) -> str:
    xml = (FIX / "nvidia-smi-q-x.xml").read_text()
    start = xml.index(f'<gpu id="{gpu_bus}">')
    end = xml.index("</gpu>", start)
    block = xml[start:end]
    for tag, value in edits.items():
        block, n = re.subn(rf"<{tag}>[^<]*</{tag}>", f"<{tag}>{value}</{tag}>", block, count=1)
        assert n == 1, tag
    return xml[:start] + block + xml[end:]


GPU1 = "00000000:00:07.0"
SERIAL1 = "1653124039737"


@pytest.mark.parametrize("name", ["gpu.inventory", "gpu.health", "gpu.xid", "nvlink.topology",
                                  "nvlink.links", "pcie.gpu_link", "kernel.cmdline",
                                  "kernel.nouveau"])
def test_healthy_capture_passes(tmp_path, name):
    ctx = make_ctx(tmp_path)
    result = run(name, ctx)
    assert result.measurements, "a check that measures nothing proves nothing"
    assert fails(result, ctx) == []


def test_inventory_measures_capture(tmp_path):
    ctx = make_ctx(tmp_path)
    got = {(m.name, m.labels.get("gpu"), m.labels.get("source")): m.value
           for m in run("gpu.inventory", ctx).measurements}
    assert got[("gpu.count", None, None)] == 2
    assert got[("gpu.memory_total", "1", None)] == 143771
    assert got[("gpu.driver_version", None, "proc")] == got[("gpu.driver_version", None,
                                                             "nvidia-smi")]
    assert got[("gpu.uniform", None, None)] is True


def test_full_profile_wants_eight_gpus(tmp_path):
    ctx = make_ctx(tmp_path, profile=load_profile("xe9680-h200"))
    bad = fails(run("gpu.inventory", ctx), ctx)
    assert [v.metric for v in bad] == ["gpu.count"]
    assert "GPU is missing" in bad[0].remediation


@pytest.mark.parametrize("edits,metric", [
    ({"dram_uncorrectable": "2"}, "gpu.ecc_uncorrected_volatile"),
    ({"remapped_row_pending": "Yes"}, "gpu.remapped_rows_pending"),
    ({"remapped_row_failure": "Yes"}, "gpu.remapped_rows_failure"),
    ({"current_ecc": "Disabled"}, "gpu.ecc_mode"),
    ({"clocks_event_reason_hw_thermal_slowdown": "Active"}, "gpu.throttle.hw_thermal"),
    ({"gpu_temp": "93 C"}, "gpu.temperature"),
])
def test_health_faults_name_the_gpu(tmp_path, edits, metric):
    ctx = make_ctx(tmp_path, **{"nvidia-smi_-q_-x": xml_fault(GPU1, **edits)})
    bad = fails(run("gpu.health", ctx), ctx)
    assert [v.metric for v in bad] == [metric]
    assert bad[0].labels["gpu"] == "1" and bad[0].labels["serial"] == SERIAL1
    assert "GPU 1" in bad[0].message and SERIAL1 in bad[0].remediation


@pytest.mark.parametrize("edits,metric", [
    ({"product_name": "NVIDIA H100 80GB HBM3"}, "gpu.model"),
    ({"vbios_version": "95.00.11.00.01"}, "gpu.vbios"),
    ({"current_mig": "Enabled"}, "gpu.mig_mode"),
    ({"persistence_mode": "Disabled"}, "gpu.persistence_mode"),
])
def test_inventory_faults(tmp_path, edits, metric):
    ctx = make_ctx(tmp_path, **{"nvidia-smi_-q_-x": xml_fault(GPU1, **edits)})
    bad = {v.metric for v in fails(run("gpu.inventory", ctx), ctx)}
    # a GPU unlike its peers also breaks uniformity, except for modes
    assert metric in bad and bad <= {metric, "gpu.uniform"}


def test_pcie_downtrained_gpu_under_load(tmp_path):
    # Busy (gpu_idle "Not Active") at Gen4 x8 on a Gen5 link: a real downtrain.
    xml = xml_fault(GPU1, current_link_gen="4", current_link_width="8x",
                    clocks_event_reason_gpu_idle="Not Active")
    ctx = make_ctx(tmp_path, **{"nvidia-smi_-q_-x": xml})
    bad = fails(run("pcie.gpu_link", ctx), ctx)
    assert sorted(v.metric for v in bad) == ["gpu.pcie_gen", "gpu.pcie_width"]
    assert all(v.labels["bus_id"] == "0000:00:07.0" for v in bad)
    assert [v.labels["source"] for v in bad if v.metric == "gpu.pcie_gen"] == ["under-load"]
    assert "reseat GPU 1" in bad[0].remediation


def test_pcie_idle_gen1_is_judged_on_the_link_max(tmp_path):
    """An idle H100 NVL reads Gen1 (ASPM downtrain): healthy while the link's max is 5."""
    xml = xml_fault(GPU1, current_link_gen="1")
    ctx = make_ctx(tmp_path, **{"nvidia-smi_-q_-x": xml})
    result = run("pcie.gpu_link", ctx)
    gen = {m.labels["gpu"]: (m.value, m.labels["source"], m.labels["current"])
           for m in result.measurements if m.name == "gpu.pcie_gen"}
    assert gen == {"0": (5, "current", "5"), "1": (5, "max", "1")}
    assert fails(result, ctx) == []
    # A slot that only allows Gen4 fails whatever the idle state.
    ctx = make_ctx(tmp_path / "b", **{"nvidia-smi_-q_-x": xml_fault(
        GPU1, current_link_gen="1", max_link_gen="4")})
    bad = fails(run("pcie.gpu_link", ctx), ctx)
    assert [(v.metric, v.value, v.labels["gpu"]) for v in bad] == [("gpu.pcie_gen", 4, "1")]


def test_pcie_max_na_falls_back_to_device_and_host_max(tmp_path):
    xml = xml_fault(GPU1, current_link_gen="1", max_link_gen="N/A", max_host_link_gen="4")
    ctx = make_ctx(tmp_path, **{"nvidia-smi_-q_-x": xml})
    gen = [m.value for m in run("pcie.gpu_link", ctx).measurements
           if m.name == "gpu.pcie_gen" and m.labels["gpu"] == "1"]
    assert gen == [4]


def test_gpu_index_is_nvidia_smi_order_not_minor_number(tmp_path):
    """minor_number swapped (NVIDIA does not promise minor == index): an XID on bus
    00:07 still lands on GPU 1, the second <gpu> in nvidia-smi's order, and its serial."""
    xml = xml_fault(GPU1, minor_number="0")
    start = xml.index('<gpu id="00000000:00:06.0">')
    xml = xml[:start] + xml[start:].replace("<minor_number>0</minor_number>",
                                            "<minor_number>1</minor_number>", 1)
    ctx = make_ctx(tmp_path, **{"nvidia-smi_-q_-x": xml})
    (ctx.sysroot / "var/log/kern.log").write_text(
        "kernel: NVRM: Xid (PCI:0000:00:07): 79, pid=1, name=x, GPU has fallen off the bus.\n")
    bad = fails(run("gpu.xid", ctx), ctx)
    assert [(v.labels["gpu"], v.labels["serial"], v.labels["bus_id"]) for v in bad] == \
        [("1", SERIAL1, "0000:00:07.0")]


def test_nvlink_results_follow_the_uuid_to_the_serial(tmp_path):
    """nvlink -s numbers GPUs itself; its UUID picks the GPU, so a link down on the GPU
    whose UUID is GPU 1's is reported with GPU 1's serial even if the numbers differ."""
    status = (FIX / "nvidia-smi-nvlink-s.txt").read_text()
    g1 = status.index("GPU 1:")
    status = status[:g1] + status[g1:].replace("Link 5: 26.562 GB/s", "Link 5: <inactive>", 1)
    status = status.replace("GPU 0:", "GPU X:").replace("GPU 1:", "GPU 0:").replace(
        "GPU X:", "GPU 1:")
    ctx = make_ctx(tmp_path, **{"nvidia-smi_nvlink_-s": status})
    bad = fails(run("nvlink.links", ctx), ctx)
    assert [(v.metric, v.labels["gpu"], v.labels["serial"]) for v in bad] == [
        ("nvlink.links_up", "1", SERIAL1)]


# nvidia-smi nvlink -s with MIG enabled: the GPU line, then nvidia-smi's refusal in
# place of link lines (driver R525+ wording), or one line alone.
MIG_NVLINK = [
    "GPU 0: NVIDIA H200 (UUID: GPU-a)\n\tNVLink is not supported for Devices in MIG mode.\n"
    "GPU 1: NVIDIA H200 (UUID: GPU-b)\n\tNVLink is not supported for Devices in MIG mode.\n",
    "NVLink is not supported\n",
]


def run_as_runner(name: str, ctx: Context) -> CheckResult:
    """The check as the runner runs it: an exception is a status, measurements kept."""
    from validation.runner import run_check

    ctx.cache.pop("smi", None)
    return run_check(all_checks()[name], ctx, frozenset(ctx.profile.requires))


@pytest.mark.parametrize("text", MIG_NVLINK)
def test_nvlink_in_mig_mode_is_unknown_never_links_down(tmp_path, text):
    """Unknown is an error (the judge fails the required check), never a skip and never
    "0 links up"; no hardware remediation."""
    ctx = make_ctx(tmp_path, **{"nvidia-smi_nvlink_-s": text, "nvidia-smi_nvlink_-e": text})
    res = run_as_runner("nvlink.links", ctx)
    assert res.status == "error" and "NVLink state unknown" in res.message
    assert not [mm for mm in res.measurements if mm.name == "nvlink.links_up"]
    verdicts = [v for v in judge([res], ctx.profile) if v.outcome == "fail"]
    assert [v.metric for v in verdicts] == ["check.status"]
    assert "could not parse its probe" in verdicts[0].message
    assert "RMA" not in verdicts[0].remediation and "reseat" not in verdicts[0].remediation


def all_inactive(gpu: int, message: str) -> str:
    """The capture's `nvlink -s` with GPU `gpu`'s link lines replaced by NVML's one-line
    message for a GPU whose links are all down (leptonai/gpud issue 1085,
    NVIDIA/open-gpu-kernel-modules issue 1150); the other GPU's lines stay as captured."""
    lines = (FIX / "nvidia-smi-nvlink-s.txt").read_text().splitlines(keepends=True)
    out, cur = [], None
    for ln in lines:
        if ln.startswith("GPU "):
            cur = int(ln.split()[1].rstrip(":"))
            out.append(ln)
            if cur == gpu:
                out.append(message + "\n")
        elif cur != gpu:
            out.append(ln)
    return "".join(out)


@pytest.mark.parametrize("message", [
    "NVML: Unable to retrieve NVLink information as all links are inActive",
    "NVML:Unable to retrieve Nvlink information as all links are inActive",
    "\t NVML: Unable to retrieve NVLink information as all links are inactive",
])
def test_nvlink_all_links_inactive_fails_that_gpu(tmp_path, message):
    """Before: the message read as "unknown" and the check was skipped. Now GPU 1 has 0
    links up (the judge fails it against 18), GPU 0's 18 links still count."""
    ctx = make_ctx(tmp_path, **{"nvidia-smi_nvlink_-s": all_inactive(1, message)})
    res = run_as_runner("nvlink.links", ctx)
    assert res.status == "ok", res.message
    up = {mm.labels["serial"]: mm.value for mm in res.measurements
          if mm.name == "nvlink.links_up"}
    assert up == {"1653724027147": 18, SERIAL1: 0}
    bad = fails(res, ctx)
    assert [(v.metric, v.labels["gpu"], v.labels["serial"]) for v in bad] == [
        ("nvlink.links_up", "1", SERIAL1)]


def test_nvlink_unknown_gpu_keeps_the_others_and_errors(tmp_path):
    """One GPU in MIG mode, the other with its links: the other's links are measured,
    and the check still errors (one GPU's state is unknown), never passes."""
    text = all_inactive(1, "\tNVLink is not supported for Devices in MIG mode.")
    ctx = make_ctx(tmp_path, **{"nvidia-smi_nvlink_-s": text})
    res = run_as_runner("nvlink.links", ctx)
    assert res.status == "error" and "GPU 1: NVLink is not supported" in res.message
    assert [(mm.labels["gpu"], mm.value) for mm in res.measurements
            if mm.name == "nvlink.links_up"] == [("0", 18)]
    assert "check.status" in [v.metric for v in fails(res, ctx)]


def no_nvlink_status() -> str:
    """`nvlink -s` of a GPU without NVLink (canonical/checkbox pull 2727's wording under
    each GPU line), made for the capture's two GPUs (their UUIDs), not captured."""
    lines = [ln for ln in (FIX / "nvidia-smi-nvlink-s.txt").read_text().splitlines()
             if ln.startswith("GPU ")]
    return "".join(f"{ln}\nDevice does not have or support Nvlink\n" for ln in lines)


@pytest.mark.parametrize("text", [no_nvlink_status(), "Device does not have or support Nvlink\n"])
def test_no_nvlink_statement_is_zero_links_judged_by_the_profile(tmp_path, text):
    """Before: "Device does not have or support Nvlink" read as unknown (the check errored
    "NVLink state unknown"). It is a fact: 0 links on each GPU. A profile expecting NVLink
    fails each GPU with 0 links (named by serial); never an error, never a skip."""
    ctx = make_ctx(tmp_path, **{"nvidia-smi_nvlink_-s": text, "nvidia-smi_nvlink_-e": text})
    res = run_as_runner("nvlink.links", ctx)
    assert res.status == "ok", res.message
    assert {mm.labels["serial"]: mm.value for mm in res.measurements
            if mm.name == "nvlink.links_up"} == {"1653724027147": 0, SERIAL1: 0}
    bad = [v for v in fails(res, ctx) if v.metric == "nvlink.links_up"]
    assert sorted((v.labels["gpu"], v.value) for v in bad) == [("0", 0), ("1", 0)]
    assert all("= 0 on GPU" in v.message for v in bad)
    assert "check.status" not in [v.metric for v in fails(res, ctx)]


def test_no_nvlink_on_a_pcie_profile_is_fine(tmp_path):
    """A PCIe profile that expects no NVLink (no nvlink inventory, nvlink not required):
    the same statement fails nothing; the check is not applicable by the profile, said so."""
    from dataclasses import replace

    base = scope(load_profile("xe9680-h200"), gpus=2)
    pcie = replace(base, requires=base.requires - {"nvlink", "nvswitch"},
                   thresholds=tuple(t for t in base.thresholds
                                    if not t.metric.startswith("nvlink.")))
    ctx = make_ctx(tmp_path, profile=pcie, **{"nvidia-smi_nvlink_-s": no_nvlink_status(),
                                              "nvidia-smi_nvlink_-e": no_nvlink_status()})
    res = run_as_runner("nvlink.links", ctx)
    assert res.status == "skipped" and res.message == "profile does not require nvlink"
    assert fails(res, ctx) == []


def test_xid_hardware_event_fails_that_gpu(tmp_path):
    ctx = make_ctx(tmp_path)
    (ctx.sysroot / "var/log/kern.log").write_text(
        "kernel: NVRM: Xid (PCI:0000:00:07): 79, pid=1, name=x, GPU has fallen off the bus.\n"
        "kernel: NVRM: Xid (PCI:0000:00:06): 13, pid=2, name=y, Graphics Exception\n")
    bad = fails(run("gpu.xid", ctx), ctx)
    assert [(v.metric, v.labels["gpu"], v.labels.get("xids")) for v in bad] == \
        [("gpu.xid_hardware", "1", "79")]


def test_xid_from_vanished_gpu_still_fails(tmp_path):
    ctx = make_ctx(tmp_path)
    (ctx.sysroot / "var/log/kern.log").write_text(
        "NVRM: Xid (PCI:0000:00:09): 79, pid=1, name=x, GPU has fallen off the bus.\n")
    bad = fails(run("gpu.xid", ctx), ctx)
    assert [(v.labels["gpu"], v.labels["bus_id"]) for v in bad] == [("missing", "0000:00:09")]


def test_nvlink_down_and_errors(tmp_path):
    status = (FIX / "nvidia-smi-nvlink-s.txt").read_text()
    g1 = status.index("GPU 1:")
    status = status[:g1] + status[g1:].replace("Link 5: 26.562 GB/s", "Link 5: <inactive>", 1)
    errors = (FIX / "nvidia-smi-nvlink-e.txt").read_text().replace(
        "Link 2: Replay Errors: 0", "Link 2: Replay Errors: 7", 1)
    ctx = make_ctx(tmp_path, **{"nvidia-smi_nvlink_-s": status, "nvidia-smi_nvlink_-e": errors})
    bad = fails(run("nvlink.links", ctx), ctx)
    got = sorted((v.metric, v.labels["gpu"], v.labels.get("link")) for v in bad)
    assert got == [("nvlink.links_up", "1", None), ("nvlink.replay_errors", "0", "2")]
    assert "NVLink 2" in [v for v in bad if v.metric == "nvlink.replay_errors"][0].message


def test_nvlink_topology_lost_bond(tmp_path):
    topo = (FIX / "nvidia-smi-topo-m.txt").read_text().replace("NV18", "NV12")
    ctx = make_ctx(tmp_path, **{"nvidia-smi_topo_-m": topo})
    bad = fails(run("nvlink.topology", ctx), ctx)
    got = [(v.metric, v.labels["pair"], v.value) for v in bad]
    assert got == [("nvlink.pair_links", "0-1", 12)]


def test_fabric_state_not_completed(tmp_path):
    ctx = make_ctx(tmp_path, **{"nvidia-smi_-q_-x": xml_fault(GPU1, state="In Progress")})
    bad = fails(run("fabric.state", ctx), ctx)
    assert [(v.metric, v.labels["gpu"]) for v in bad] == [("gpu.fabric_state", "1")]
    assert "nvidia-fabricmanager" in bad[0].remediation


def test_kernel_cmdline_and_nouveau(tmp_path):
    ctx = make_ctx(tmp_path)
    (ctx.sysroot / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz ro\n")
    (ctx.sysroot / "proc/modules").write_text("nouveau 1 0 - Live 0x0\n")
    bad = fails(run("kernel.cmdline", ctx), ctx) + fails(run("kernel.nouveau", ctx), ctx)
    assert sorted(v.metric for v in bad) == ["kernel.cmdline_token", "kernel.nouveau_loaded"]
    assert "iommu=pt" in bad[0].message


def test_health_delta_catches_new_errors(tmp_path):
    from validation.checks.health_delta import read_counters

    ctx = make_ctx(tmp_path)
    ctx.cache["health.start"] = read_counters(ctx)
    # during the "run": GPU 1 gains an uncorrectable error and a PCIe replay; GPU 0's replay
    # counter was already 1 at boot (capture) and stays: no delta there
    ctx.outputs[("nvidia-smi", "-q", "-x")] = xml_fault(GPU1, dram_uncorrectable="1",
                                                        replay_counter="4")
    # the VM capture has no IB port nor NVSwitch: those counters fail as not measured
    bad = [v for v in fails(run("health.delta", ctx), ctx) if "not measured" not in v.message]
    assert sorted((v.metric, v.labels["gpu"], v.value) for v in bad) == [
        ("health.delta.ecc_uncorrected", "1", 1.0), ("health.delta.pcie_replay", "1", 4.0)]


def test_health_delta_without_start_is_an_error(tmp_path):
    ctx = make_ctx(tmp_path)
    with pytest.raises(RuntimeError):
        run("health.delta", ctx)


def test_no_nvlink_visible_is_skipped_and_fails_when_required(tmp_path):
    ctx = make_ctx(tmp_path, **{"nvidia-smi_nvlink_-s": "", "nvidia-smi_nvlink_-e": ""})
    with pytest.raises(CheckSkipped):
        run("nvlink.links", ctx)
    skipped = CheckResult("nvlink.links", "skipped", 0.0, (), "no NVLink", ("gpu", "nvlink"))
    assert [v.outcome for v in judge([skipped], ctx.profile)
            if v.metric == "check.status"] == ["fail"]


# --- XIDs judged by NVIDIA's XID catalog (validation/xid_catalog.yml) ---------------
# Lines in the driver's format (`NVRM: Xid (PCI:dddd:bb:dd): N, pid=..., name=..., text`,
# as in the field logs docs/parsers.md cites for parse_xids); the XID 13 burst (SM warp,
# SM global, ESR lines of one fault) made from leptonai/gpud's accelerator-nvidia-error-xid
# README dmesg example, not captured here.
XID13_BURST = (
    "kernel: NVRM: Xid (PCI:0000:00:06): 13, pid={pid}, name=python, Graphics SM Warp "
    "Exception on (GPC 7, TPC 1, SM 0): Out Of Range Address\n"
    "kernel: NVRM: Xid (PCI:0000:00:06): 13, pid={pid}, name=python, Graphics SM Global "
    "Exception on (GPC 7, TPC 1, SM 0): Multiple Warp Errors\n"
    "kernel: NVRM: Xid (PCI:0000:00:06): 13, pid={pid}, name=python, Graphics Exception: "
    "ESR 0x53ce48=0x102000e 0x53ce50=0x20 0x53ce44=0xd3eff2 0x53ce4c=0x17f\n")
SERIAL0 = "1653724027147"


def xid_ctx(tmp_path: Path, log: str, site: dict | None = None) -> FakeContext:
    ctx = make_ctx(tmp_path)
    ctx.site = dict(site or {})
    (ctx.sysroot / "var/log/kern.log").write_text(log)
    return ctx


def test_one_application_xid_passes_with_a_note(tmp_path):
    """One XID 13 fault (three lines, one process) is the job's: the node passes, and the
    pass verdict names the GPU and the XID (the note)."""
    ctx = xid_ctx(tmp_path, XID13_BURST.format(pid=4242))
    res = run("gpu.xid", ctx)
    verdicts = judge([res], ctx.profile)
    assert [v for v in verdicts if v.outcome == "fail"] == []
    app = [v for v in verdicts if v.metric == "gpu.xid_other" and v.labels["gpu"] == "0"]
    assert [(v.outcome, v.value) for v in app] == [("pass", 1)]
    assert f"serial {SERIAL0}" in app[0].message and "XID 13" in app[0].message


def test_repeated_application_xids_fail_by_the_profile(tmp_path):
    """Two faults of other processes on one GPU (XID 13, then 31) exceed the profile's
    per-GPU limit: that GPU fails, told to restart the application, then to RMA if the
    XIDs recur on it alone."""
    log = XID13_BURST.format(pid=4242) + (
        "kernel: NVRM: Xid (PCI:0000:00:06): 31, pid=4317, name=python, Ch 00000008, "
        "intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f_a0000000.\n")
    bad = fails(run("gpu.xid", xid_ctx(tmp_path, log)), make_ctx(tmp_path / "p"))
    assert [(v.metric, v.value, v.labels["gpu"]) for v in bad] == \
        [("gpu.xid_other", 2, "0")]
    assert "XID 13, 31" in bad[0].message and "restart the application" in bad[0].remediation
    assert "limit <= 1" in bad[0].message


@pytest.mark.parametrize(("xid", "action", "words"), [
    (119, "reset_gpu", ["reset the GPU", "nvidia-smi -r -i 0000:00:07.0"]),
    (79, "reboot_node", ["reboot the node"]),
    (64, "reset_gpu", ["reset the GPU", "replace the GPU (RMA by serial)"]),
    (95, "reset_gpu", ["reset the GPU"]),
    (61, "rma", ["replace the GPU (RMA by serial)", "contact NVIDIA support"]),
    (54, "check_mechanicals", ["mechanicals", "replace the GPU board's auxiliary power cable"]),
    (74, "workflow", ["WORKFLOW_NVLINK_ERR", "reset the GPU"]),
    (165, "unclassified", ["the catalog gives no action"]),
    (999, "unknown", ["see NVIDIA's XID catalog"]),
])
def test_xid_of_each_failing_class_fails_naming_the_gpu_and_the_action(
        tmp_path, xid, action, words):
    log = f"kernel: NVRM: Xid (PCI:0000:00:07): {xid}, pid=1, name=x, some text\n"
    ctx = xid_ctx(tmp_path, log)
    bad = fails(run("gpu.xid", ctx), ctx)
    assert [(v.metric, v.labels["gpu"], v.labels["xids"], v.labels["action"]) for v in bad] \
        == [("gpu.xid_hardware", "1", str(xid), action)]
    said = bad[0].message + " " + bad[0].remediation
    assert f"serial {SERIAL1}" in said and "0000:00:07.0" in said and f"XID {xid}" in said
    assert all(w in bad[0].remediation for w in words), bad[0].remediation


def test_two_classes_on_one_gpu_are_two_verdicts(tmp_path):
    log = ("kernel: NVRM: Xid (PCI:0000:00:07): 119, pid=1, name=x, Timeout waiting for RPC\n"
           "kernel: NVRM: Xid (PCI:0000:00:07): 79, pid=1, name=x, GPU has fallen off the bus.\n")
    ctx = xid_ctx(tmp_path, log)
    bad = fails(run("gpu.xid", ctx), ctx)
    assert sorted((v.labels["action"], v.value) for v in bad) == \
        [("reboot_node", 1), ("reset_gpu", 1)]


def test_site_override_reclassifies_an_xid_and_the_report_says_so(tmp_path):
    """xid_overrides {13: reset_gpu}: one XID 13 now fails, the verdict shows the override;
    {79: application}: the GPU that fell off the bus once is counted, not failed alone."""
    ctx = xid_ctx(tmp_path, XID13_BURST.format(pid=4242), {"xid_overrides": {"13": "reset_gpu"}})
    bad = fails(run("gpu.xid", ctx), ctx)
    assert [(v.labels["action"], v.labels["override"]) for v in bad] == \
        [("reset_gpu", "13: application -> reset_gpu")]
    assert "site override 13: application -> reset_gpu" in bad[0].message
    assert "reset the GPU" in bad[0].remediation
    ctx = xid_ctx(tmp_path / "b", "kernel: NVRM: Xid (PCI:0000:00:07): 79, pid=1, name=x, "
                  "GPU has fallen off the bus.\n", {"xid_overrides": {79: "application"}})
    assert fails(run("gpu.xid", ctx), ctx) == []


@pytest.mark.parametrize(("overrides", "said"), [
    ({"thirteen": "reset_gpu"}, "xid_overrides: XID 'thirteen' is not an integer"),
    ({13: "reboot"}, "xid_overrides: XID 13: class 'reboot' is not one of application, "),
    (["13"], "xid_overrides must map XIDs to classes"),
])
def test_bad_site_override_is_refused_in_one_line(tmp_path, overrides, said):
    from validation.probes.nvidia_smi import ParseError

    ctx = xid_ctx(tmp_path, "", {"xid_overrides": overrides})
    with pytest.raises(ParseError) as exc:
        run("gpu.xid", ctx)
    assert str(exc.value).startswith(f"site settings: {said}") and "\n" not in str(exc.value)


def test_a_gpu_without_nvlink_is_not_told_to_reseat_a_link(tmp_path):
    """nvidia-smi says the GPU has no NVLink at all: a profile expecting NVLink fails it,
    and the remediation says so (wrong part, driver, passed-through GPU), not reseat/RMA a
    link that does not exist."""
    text = no_nvlink_status()
    ctx = make_ctx(tmp_path, **{"nvidia-smi_nvlink_-s": text, "nvidia-smi_nvlink_-e": text})
    bad = [v for v in fails(run_as_runner("nvlink.links", ctx), ctx)
           if v.metric == "nvlink.links_up"]
    assert len(bad) == 2
    for v in bad:
        assert "reports no NVLink at all" in v.remediation, v.remediation
        assert "reseat" not in v.remediation.replace("no link to reseat", "")
        assert "wrong part" in v.remediation and "passed through" in v.remediation
