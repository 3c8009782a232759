"""Network, PCIe-NIC and storage checks on documented-format samples (no ConnectX, NVMe
or md on the captured machine), judged under a RoCE and an IB profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_checks_gpu import FakeContext, make_ctx, run
from test_probes_rdma import IBSTAT, IBV_DEVINFO, MLNX_QOS
from test_probes_storage import RAID0, RAID5_DEGRADED, nvme_v1

from rackready.site.inventory import provisioned
from validation.judge import judge
from validation.profile import load_profile, with_site


def fails(result, ctx):
    return [v for v in judge([result], ctx.profile) if v.outcome == "fail"]


def ib_ctx(tmp_path: Path, ibstat: str = IBSTAT, devinfo: str = IBV_DEVINFO) -> FakeContext:
    prof = with_site(load_profile("xe9680-h200"), {"fabric": "ib"})
    ctx = make_ctx(tmp_path, profile=prof)
    ctx.outputs[("ibstat",)] = ibstat
    ctx.outputs[("ibv_devinfo",)] = devinfo
    return ctx


def test_ib_ports_fault_names_port(tmp_path):
    ctx = ib_ctx(tmp_path)
    bad = fails(run("network.ports", ctx), ctx)
    by = {(v.metric, v.labels.get("nic")) for v in bad}
    # 2 CAs where 8 are ordered; mlx5_1 is down at 10 Gb/s; mlx5_0 runs a 2048 MTU
    assert by == {("nic.count", None), ("ib.port_state", "mlx5_1"), ("ib.phys_state", "mlx5_1"),
                  ("ib.rate", "mlx5_1"), ("ib.active_mtu", "mlx5_0")}
    port = [v for v in bad if v.metric == "ib.port_state"][0]
    assert "NIC mlx5_1 port 1" in port.remediation and "cable" in port.remediation


def test_ib_ports_healthy_when_all_match(tmp_path):
    blocks = IBSTAT.split("CA 'mlx5_1'")[0]
    ibstat = "".join(blocks.replace("mlx5_0", f"mlx5_{i}") for i in range(8))
    devinfo = "".join(IBV_DEVINFO.replace("mlx5_0", f"mlx5_{i}").replace(
        "active_mtu:\t\t2048 (4)", "active_mtu:\t\t4096 (5)") for i in range(8))
    ctx = ib_ctx(tmp_path, ibstat, devinfo)
    result = run("network.ports", ctx)
    assert len(result.measurements) > 8 * 4
    assert fails(result, ctx) == []


def test_roce_qos(tmp_path):
    site = {"fabric": "roce", **provisioned({}, Path("roles"))}  # the role defaults
    prof = with_site(load_profile("dl380a-gen12-h200nvl"), site)
    ctx = make_ctx(tmp_path, profile=prof)
    ctx.site = site
    ctx.outputs[("ibstat",)] = IBSTAT.replace("Link layer: InfiniBand", "Link layer: Ethernet")
    pci = ctx.sysroot / "sys/bus/pci/devices/0000:1a:00.0"
    (pci / "net/ens1np0").mkdir(parents=True)
    (ctx.sysroot / "sys/class/infiniband/mlx5_0").mkdir(parents=True)
    (ctx.sysroot / "sys/class/infiniband/mlx5_0/device").symlink_to(pci)
    ctx.outputs[("mlnx_qos", "-i", "ens1np0")] = MLNX_QOS
    for dev in ("0000:1a:00.0", "mlx5_1"):  # mlx5_1: no sysfs device link, by its name
        ctx.outputs[("mlxconfig", "-d", dev, "-e", "q", "LINK_TYPE_P1")] = (
            "Configurations:        Default      Current      Next Boot\n"
            "*       LINK_TYPE_P1   IB(1)        ETH(2)       ETH(2)\n")
    for point in ("roce_np", "roce_rp"):
        f = ctx.sysroot / f"sys/class/net/ens1np0/ecn/{point}/enable/3"
        f.parent.mkdir(parents=True)
        f.write_text("1\n")
    assert fails(run("network.roce_qos", ctx), ctx) == []
    # PFC moved to priority 0 and trust left at pcp: both named on the interface
    ctx.outputs[("mlnx_qos", "-i", "ens1np0")] = MLNX_QOS.replace(
        "trust state: dscp", "trust state: pcp").replace(
        "enabled     0   0   0   1", "enabled     1   0   0   0")
    bad = fails(run("network.roce_qos", ctx), ctx)
    # under trust pcp the DSCP map is neither shown nor used: not measured, a failure too
    assert sorted(v.metric for v in bad) == ["roce.dscp_priority", "roce.pfc_other_priorities",
                                             "roce.pfc_priority_enabled", "roce.trust"]
    assert all(v.labels["netdev"] == "ens1np0" for v in bad if "not measured" not in v.message)


def test_peermem(tmp_path):
    ctx = ib_ctx(tmp_path)
    bad = fails(run("network.peermem", ctx), ctx)
    # not loaded: what a loaded peermem is judged on is not measured either, a failure too
    assert [(v.metric, v.labels.get("module")) for v in bad] == [
        ("kernel.module_loaded", "nvidia_peermem"), ("peermem.ib_core_linked", "nvidia_peermem"),
        ("kernel.module_current", None)]
    assert all("not measured" in v.message for v in bad[1:])
    (ctx.sysroot / "proc/modules").write_text("nvidia_peermem 1 0 - Live 0x0\n")
    # loaded, but ib_core does not list it as a user: not bound to the ib_core in use
    assert [v.metric for v in fails(run("network.peermem", ctx), ctx)] == \
        ["peermem.ib_core_linked"]
    (ctx.sysroot / "proc/modules").write_text(
        "nvidia_peermem 16384 0 - Live 0x0\nib_core 458752 1 nvidia_peermem, Live 0x0\n")
    assert fails(run("network.peermem", ctx), ctx) == []


def write_pci(root: Path, addr: str, vendor: str, cls: str, speed: str, width: int, numa: int):
    d = root / "sys/bus/pci/devices" / addr
    d.mkdir(parents=True)
    for name, value in (("vendor", vendor), ("class", cls), ("current_link_speed", speed),
                        ("current_link_width", str(width)), ("max_link_speed", "32.0 GT/s PCIe"),
                        ("max_link_width", "16"), ("numa_node", str(numa))):
        (d / name).write_text(value + "\n")


def test_nic_link_and_numa(tmp_path):
    ctx = ib_ctx(tmp_path)
    root = ctx.sysroot
    # GPUs of the capture on NUMA 0 and 1; one NIC on NUMA 0 only, downtrained to Gen4
    write_pci(root, "0000:00:06.0", "0x10de", "0x030200", "32.0 GT/s PCIe", 16, 0)
    write_pci(root, "0000:00:07.0", "0x10de", "0x030200", "32.0 GT/s PCIe", 16, 1)
    write_pci(root, "0000:1a:00.0", "0x15b3", "0x020700", "16.0 GT/s PCIe", 16, 0)
    bad = fails(run("pcie.nic_link", ctx), ctx)
    assert [(v.metric, v.labels["nic"]) for v in bad] == [("nic.pcie_gen", "0000:1a:00.0")]
    bad = fails(run("pcie.numa", ctx), ctx)
    assert [(v.metric, v.labels["gpu"]) for v in bad] == [("gpu.local_nics", "1")]


def test_nvme_count_and_boot_drive_excluded(tmp_path):
    ctx = make_ctx(tmp_path, profile=load_profile("xe9680-h200"))
    data = json.loads(nvme_v1(8))
    boot = dict(data["Devices"][0], DevicePath="/dev/nvme8n1", ModelNumber="Dell BOSS-N1")
    data["Devices"].append(boot)
    ctx.outputs[("nvme", "list", "-o", "json")] = json.dumps(data)
    assert fails(run("storage.nvme", ctx), ctx) == []
    ctx.outputs[("nvme", "list", "-o", "json")] = nvme_v1(7)
    assert [v.metric for v in fails(run("storage.nvme", ctx), ctx)] == ["nvme.count"]


@pytest.mark.parametrize("mdstat,mounted,expect", [
    (RAID0, True, set()),
    (RAID0, False, {"raid.mounted"}),
    (RAID5_DEGRADED, True, {"raid.degraded"}),
    # no array: its missing members cannot be counted (not measured, a failure too)
    ("Personalities : [raid0]\nunused devices: <none>\n", False,
     {"raid.assembled", "raid.mounted", "raid.degraded"}),
])
def test_raid(tmp_path, mdstat, mounted, expect):
    ctx = make_ctx(tmp_path, profile=load_profile("xe9680-h200"))
    (ctx.sysroot / "proc/mdstat").write_text(mdstat)
    dev = "/dev/md127" if "md127" in mdstat else "/dev/md0"
    (ctx.sysroot / "proc/mounts").write_text(
        "/dev/sda1 / ext4 rw 0 0\n" + (f"{dev} /raid ext4 rw 0 0\n" if mounted else ""))
    assert {v.metric for v in fails(run("storage.raid", ctx), ctx)} == expect


def test_raid_without_md_driver(tmp_path):
    # measured on the device VM: no /proc/mdstat at all; that is "not assembled", not a crash
    ctx = make_ctx(tmp_path, profile=load_profile("xe9680-h200"))
    (ctx.sysroot / "proc/mounts").write_text("/dev/sda1 / ext4 rw 0 0\n")
    assert {v.metric for v in fails(run("storage.raid", ctx), ctx)} == \
        {"raid.assembled", "raid.mounted", "raid.degraded"}
