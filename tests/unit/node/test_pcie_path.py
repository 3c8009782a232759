"""The PCIe path check (pcie.path): every link from a GPU or NIC up to its root port,
judged against the lower maximum of its two ends, on synthetic sysfs trees laid out as
the kernel lays them out (device directories nested under their bridges in /sys/devices,
/sys/bus/pci/devices/<bdf> a relative symlink to them); the speed strings and the AER
file on public captures (tests/fixtures/field/pcie/README.md)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from test_checks_gpu import make_ctx, run

from rackready_lab.hwsim import state as hwsim_state
from rackready_lab.hwsim.cli.pci import pci_devices
from validation.checks.pcie import PathDevice, path_measurements
from validation.checks.registry import CheckSkipped
from validation.judge import judge
from validation.model import CheckResult, Verdict
from validation.probes.aer import parse_aer
from validation.probes.nvidia_smi import ParseError
from validation.probes.pcie_path import parse_speed, parse_width, read_path
from validation.profile import load_profile, scope

FIELD = Path(__file__).resolve().parents[2] / "fixtures" / "field" / "pcie"
GEN = {1: "2.5 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe"}

# an XE9680-like pair: root port -> PEX switch upstream port -> two downstream ports ->
# GPU and NIC (buses as the HGX H100 capture: switch d7, GPU d9, NIC da)
RP, USP, DSP_G, GPU, DSP_N, NIC = ("0000:d6:01.0", "0000:d7:00.0", "0000:d8:00.0",
                                   "0000:d9:00.0", "0000:d8:01.0", "0000:da:00.0")
CHAINS = {RP: (RP,), USP: (RP, USP), DSP_G: (RP, USP, DSP_G), GPU: (RP, USP, DSP_G, GPU),
          DSP_N: (RP, USP, DSP_N), NIC: (RP, USP, DSP_N, NIC)}
GPU_NAME = f"GPU 0 (serial 1650000000001, PCI {GPU})"
NIC_NAME = f"NIC mlx5_0 (PCI {NIC})"


def write_tree(root: Path, chains: dict[str, tuple[str, ...]],
               links: dict[str, tuple[str, str, str, str]]) -> Path:
    """Each function's directory under sys/devices/pci<dom>:<bus>/<chain...> holding its
    four link attributes (current speed, current width, max speed, max width), and the
    relative symlink /sys/bus/pci/devices/<bdf> -> ../../../devices/... the kernel makes."""
    for bdf, chain in chains.items():
        rel = f"devices/pci{chain[0][:7]}/" + "/".join(chain)
        d = root / "sys" / rel
        d.mkdir(parents=True, exist_ok=True)
        for name, value in zip(("current_link_speed", "current_link_width", "max_link_speed",
                                "max_link_width"), links[bdf], strict=True):
            (d / name).write_text(value + "\n")
        link = root / "sys/bus/pci/devices" / bdf
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../../{rel}", link)
    return root


def healthy() -> dict[str, tuple[str, str, str, str]]:
    return {bdf: (GEN[5], "16", GEN[5], "16") for bdf in CHAINS}


def set_link(links: dict, up: str, down: str, gen: int, width: int) -> None:
    """Both ends of one link read what it trained to (one link, two views)."""
    for end in (up, down):
        links[end] = (GEN[gen], str(width), links[end][2], links[end][3])


def verdicts(root: Path, devices: list[PathDevice], profile=None) -> list[Verdict]:
    result = CheckResult("pcie.path", "ok", 0.0, tuple(path_measurements(root, devices)), "",
                         ("gpu",))
    return judge([result], profile or load_profile("xe9680-h200"))


def failed(vs: list[Verdict]) -> list[Verdict]:
    return [v for v in vs if v.outcome == "fail" and v.metric.startswith("pcie.path")]


PAIR = [PathDevice(GPU, GPU_NAME, False), PathDevice(NIC, NIC_NAME, False)]


def test_walk_pairs_each_link_and_skips_the_switch_internal_bus(tmp_path: Path) -> None:
    root = write_tree(tmp_path, CHAINS, healthy())
    p = read_path(root, GPU)
    assert p is not None and p.chain == CHAINS[GPU]
    # (downstream port, GPU), then (root port, upstream port); never (USP, DSP)
    assert [(h.up.address, h.down.address) for h in p.hops] == [(DSP_G, GPU), (RP, USP)]
    assert p.hops[1].expected == (32.0, 16) and p.hops[1].current == (32.0, 16)
    assert read_path(root, "0000:99:00.0") is None  # no symlink: nothing to walk


def test_healthy_path_passes_and_the_shared_uplink_is_judged_once(tmp_path: Path) -> None:
    root = write_tree(tmp_path, CHAINS, healthy())
    meas = list(path_measurements(root, PAIR))
    uplink = [mm for mm in meas if mm.labels.get("hop") == f"{RP} -> {USP}"]
    assert {mm.name for mm in uplink} == {"pcie.path_width", "pcie.path_speed"}
    assert all(mm.labels["behind"] == f"{GPU_NAME} and {NIC_NAME}" for mm in uplink)
    assert len([mm for mm in meas if mm.name == "pcie.path_width"]) == 3  # uplink + 2 own
    vs = verdicts(root, PAIR)
    assert not failed(vs)
    assert {v.metric for v in vs if v.outcome == "pass"} == {"pcie.path_width",
                                                             "pcie.path_speed"}


@pytest.mark.parametrize("up,down,gen,width,metric", [
    (RP, USP, 5, 8, "pcie.path_width"),    # switch uplink lost half its lanes
    (RP, USP, 4, 16, "pcie.path_speed"),   # switch uplink trained a generation down
    (DSP_G, GPU, 5, 8, "pcie.path_width"),  # the GPU's own link
    (DSP_N, NIC, 3, 16, "pcie.path_speed"),  # the NIC's own link at Gen3
])
def test_each_degraded_hop_fails_naming_both_ends_and_what_is_behind(
        tmp_path: Path, up: str, down: str, gen: int, width: int, metric: str) -> None:
    links = healthy()
    set_link(links, up, down, gen, width)
    bad = failed(verdicts(write_tree(tmp_path, CHAINS, links), PAIR))
    assert [v.metric for v in bad] == [metric]
    msg = bad[0].message + " " + bad[0].remediation
    behind = {USP: [GPU_NAME, NIC_NAME], GPU: [GPU_NAME], NIC: [NIC_NAME]}[down]
    for words in (up, down, *behind):
        assert words in msg
    assert "1650000000001" in msg and "mlx5_0" in msg if down == USP else True


def test_idle_gpu_own_link_downtrained_is_not_a_speed_fault(tmp_path: Path) -> None:
    """An idle NVIDIA GPU lowers its own link to Gen1 (pcie.gpu_link judges it under load
    or at its maximum): its speed is not judged here, its width is; a busy GPU's is."""
    links = healthy()
    set_link(links, DSP_G, GPU, 1, 16)
    root = write_tree(tmp_path, CHAINS, links)
    idle = [PathDevice(GPU, GPU_NAME, True), PairNic]
    assert not failed(verdicts(root, idle))
    own = [mm for mm in path_measurements(root, idle)
           if mm.labels.get("hop") == f"{DSP_G} -> {GPU}"]
    assert [mm.name for mm in own] == ["pcie.path_width"]
    busy = failed(verdicts(root, PAIR))
    assert [(v.metric, v.labels["hop"]) for v in busy] == [("pcie.path_speed",
                                                            f"{DSP_G} -> {GPU}")]


PairNic = PAIR[1]


def test_idle_gpu_does_not_excuse_its_switch_uplink(tmp_path: Path) -> None:
    """The uplink is shared with the NIC and keeps the rate it trained to: judged always."""
    links = healthy()
    set_link(links, DSP_G, GPU, 1, 16)
    set_link(links, RP, USP, 4, 16)
    bad = failed(verdicts(write_tree(tmp_path, CHAINS, links),
                          [PathDevice(GPU, GPU_NAME, True), PairNic]))
    assert [(v.metric, v.labels["hop"]) for v in bad] == [("pcie.path_speed", f"{RP} -> {USP}")]


def test_vm_topology_is_not_applicable_by_its_stated_fact(tmp_path: Path) -> None:
    """A hypervisor's emulated root port reporting no link (width 0, speed Unknown), and a
    GPU on a root bus with no port above it: no link to judge, said by pcie.path_emulated."""
    chains = {"0000:00:02.0": ("0000:00:02.0",), "0000:01:00.0": ("0000:00:02.0",
                                                                   "0000:01:00.0"),
              "0000:00:07.0": ("0000:00:07.0",)}
    links = {"0000:00:02.0": ("Unknown", "0", "Unknown", "0"),
             "0000:01:00.0": (GEN[5], "16", GEN[5], "16"),
             "0000:00:07.0": (GEN[5], "16", GEN[5], "16")}
    root = write_tree(tmp_path, chains, links)
    devs = [PathDevice("0000:01:00.0", "GPU 0", False), PathDevice("0000:00:07.0", "GPU 1",
                                                                   False)]
    vs = [v for v in verdicts(root, devs) if v.metric.startswith("pcie.path")]
    assert not failed(vs)
    na = [v for v in vs if v.outcome == "not_applicable"]
    assert {v.metric for v in na} == {"pcie.path_width", "pcie.path_speed"}
    assert all("pcie.path_emulated = True" in v.message and "hypervisor" in v.message
               for v in na)


def test_an_unreadable_hop_beside_readable_paths_fails(tmp_path: Path) -> None:
    """On a node whose other paths read, a port reporting no link is no VM: a person looks."""
    links = healthy()
    links[DSP_N] = ("Unknown", "0", "Unknown", "0")
    bad = failed(verdicts(write_tree(tmp_path, CHAINS, links), PAIR))
    assert [(v.metric, v.labels["hop"], v.value) for v in bad] == [
        ("pcie.path_width", f"{DSP_N} -> {NIC}", None)]
    assert "could not be read" in bad[0].message and NIC_NAME in bad[0].message


def test_no_sysfs_link_for_a_device_fails_never_passes(tmp_path: Path) -> None:
    root = write_tree(tmp_path, CHAINS, healthy())
    flat = root / "sys/bus/pci/devices" / NIC
    flat.unlink()
    flat.mkdir()  # a directory, not the kernel's symlink: no path to walk
    bad = failed(verdicts(root, PAIR))
    assert [(v.metric, v.value) for v in bad] == [("pcie.path_width", None)]
    assert NIC_NAME in bad[0].message


def test_capture_vm_gpus_on_the_root_bus_do_not_fail(tmp_path: Path) -> None:
    """The real capture (tests/fixtures/hgx-h200-2gpu) is a VM: its GPUs sit at 00:06.0 and
    00:07.0 on the root bus, no port above them. Through the registered check, on the full
    profile (not applicable by the fact) and on its 2-GPU slice (no bare metal)."""
    for profile in (load_profile("xe9680-h200"), scope(load_profile("xe9680-h200"), gpus=2)):
        ctx = make_ctx(tmp_path / str(id(profile)), profile=profile)
        write_tree(ctx.sysroot, {b: (b,) for b in ("0000:00:06.0", "0000:00:07.0")},
                   {b: (GEN[5], "16", GEN[5], "16") for b in ("0000:00:06.0", "0000:00:07.0")})
        result = run("pcie.path", ctx)
        assert {mm.name for mm in result.measurements} == {"pcie.path_emulated"}
        vs = judge([result], profile)
        assert not [v for v in vs if v.outcome == "fail"]
        assert {v.outcome for v in vs if v.metric.startswith("pcie.path_")} == {
            "not_applicable"}


@pytest.mark.parametrize("text,gts", [
    ("32.0 GT/s PCIe", 32.0), ("16.0 GT/s PCIe\n", 16.0), ("32.0 GT/s", 32.0),
    ("8 GT/s", 8.0), ("2.5 GT/s", 2.5), ("5.0 GT/s PCIe", 5.0), ("64.0 GT/s PCIe", 64.0),
    ("Unknown", None), ("Unknown speed", None)])
def test_speed_strings_of_every_kernel(text: str, gts: float | None) -> None:
    assert parse_speed(text) == gts


def test_unknown_speed_or_width_shapes_are_unparsed() -> None:
    for bad in ("fast", "32 GB/s", ""):
        with pytest.raises(ParseError):
            parse_speed(bad)
    assert parse_width("16\n") == 16 and parse_width("0") is None
    for bad in ("x16", "", "sixteen"):
        with pytest.raises(ParseError):
            parse_width(bad)


def test_field_topology_speed_strings_parse() -> None:
    """NCCL copies sysfs max_link_speed text into its dump: both kernel forms, real."""
    for name, want in (("nccl-topo-hgx-h100-simai128.xml", 32.0),
                       ("nccl-topo-dgx-a100-nccl1505.xml", 16.0)):
        speeds = re.findall(r'link_speed="([^"]*)"', (FIELD / name).read_text())
        assert speeds and {parse_speed(s) for s in speeds} == {want}
        assert {parse_width(w) for w in re.findall(r'link_width="([^"]*)"',
                                                   (FIELD / name).read_text())} == {16}


def test_hwsim_switch_layout_matches_the_hgx_h100_capture() -> None:
    """The HGX H100 dump puts the PEX890xx switch at d7:00.0 over the GPU at d9:00.0 and the
    ConnectX-7 at da:00.0: hwsim's switch for a GPU on bus d9 sits where the capture has it,
    with the NIC on bus da behind the same switch, and the same device IDs."""
    s = hwsim_state.build_state("xe9680-h100", "gpu01", "ib")
    s["gpus"][7]["bdf"] = GPU
    nic = next(n for n in s["nics"] if n["role"] == "compute" and n["gpu"] == 7)
    nic["bdf"] = NIC
    devs = {d["bdf"]: d for d in pci_devices(s)}
    assert devs[GPU]["chain"][1] == USP == devs[NIC]["chain"][1]
    xml = (FIELD / "nccl-topo-hgx-h100-simai128.xml").read_text()
    assert 'busid="0000:d7:00.0" class="0x060400" vendor="0x1000" device="0xc030"' in xml
    assert (devs[USP]["vendor"], devs[USP]["device"]) == ("1000", "c030")
    assert 'busid="0000:da:00.0" class="0x020700" vendor="0x15b3" device="0x1021"' in xml


def test_aer_parser_on_a_field_capture() -> None:
    """pcicrawler's print of a Dell root port's aer_dev_correctable under 4.18 (the 8 names
    of kernels before TLPBlockedErr and friends): total 3, all BadTLP."""
    c = parse_aer((FIELD / "aer_dev_correctable.pcicrawler-dell-4.18.txt").read_text())
    assert c.total == 3 and c.by_error["BadTLP"] == 3 and len(c.by_error) == 8


def test_vm_slice_links_are_the_hypervisors_and_not_measured(tmp_path: Path) -> None:
    """A QEMU-like root port that reports a link (x1 of its x32, 2.5 of 16 GT/s) above a
    passed-through GPU: on the whole machine that link fails; on a 2-GPU slice of the
    profile (a VM: bare-metal dropped) the links are not measured and the limits are not
    applicable, by the need the slice dropped."""
    full = load_profile("xe9680-h200")
    for profile, fails in ((full, True), (scope(full, gpus=2), False)):
        ctx = make_ctx(tmp_path / str(fails), profile=profile)
        chains = {"0000:00:02.0": ("0000:00:02.0",), "0000:00:03.0": ("0000:00:03.0",),
                  "0000:00:06.0": ("0000:00:02.0", "0000:00:06.0"),
                  "0000:00:07.0": ("0000:00:03.0", "0000:00:07.0")}
        links = {"0000:00:02.0": ("2.5 GT/s PCIe", "1", "16.0 GT/s PCIe", "32"),
                 "0000:00:03.0": ("2.5 GT/s PCIe", "1", "16.0 GT/s PCIe", "32"),
                 "0000:00:06.0": (GEN[5], "16", GEN[5], "16"),
                 "0000:00:07.0": (GEN[5], "16", GEN[5], "16")}
        write_tree(ctx.sysroot, chains, links)
        result = run("pcie.path", ctx)
        bad = [v for v in judge([result], profile) if v.outcome == "fail"]
        assert bool(bad) is fails
        if not fails:
            assert {mm.name for mm in result.measurements} == {"pcie.path_emulated"}
            na = [v for v in judge([result], profile) if v.metric.startswith("pcie.path_")]
            assert {v.outcome for v in na} == {"not_applicable"}
            assert all("bare-metal" in v.message for v in na)


def test_no_pci_tree_fails_the_whole_machine_and_leaves_a_slice_unjudged(tmp_path: Path) -> None:
    """No /sys/bus/pci/devices at all: on the whole machine the check could not run and
    the node fails; on a VM slice (bare-metal dropped, the fact that makes the limits not
    applicable) it reports nothing and its limits read not applicable by that need."""
    full = load_profile("xe9680-h200")
    for profile, fails in ((full, True), (scope(full, gpus=2), False)):
        ctx = make_ctx(tmp_path / str(fails), profile=profile)
        assert not ctx.path("/sys/bus/pci/devices").is_dir()
        if fails:  # skipped, as the runner records it: a required check that could not run
            with pytest.raises(CheckSkipped, match="PCIe tree cannot be read") as why:
                run("pcie.path", ctx)
            skipped = CheckResult("pcie.path", "skipped", 0.0, (), str(why.value), ("gpu",))
            bad = [v for v in judge([skipped], profile) if v.outcome == "fail"]
            assert [v.metric for v in bad] == ["check.status"], bad
            continue
        result = run("pcie.path", ctx)
        judged = judge([result], profile)
        bad = [v for v in judged if v.outcome == "fail"]
        if not fails:
            assert result.status == "ok" and not result.measurements and not bad
            na = [v for v in judged if v.metric.startswith("pcie.path_")]
            assert na and all(v.outcome == "not_applicable" and "bare-metal" in v.message
                              for v in na)
