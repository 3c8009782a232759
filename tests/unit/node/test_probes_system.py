"""/proc and /sys parsers on the real capture; the sysfs tree reader on a tree generated from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from validation.probes import nvidia_smi as ns
from validation.probes import system as sy

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "hgx-h200-2gpu"


def cap(name: str) -> str:
    return (FIX / name).read_text()


def test_pci_summary_capture_matches_nvidia_smi():
    devs = sy.parse_pci_summary(cap("sysfs-pci.txt"))
    gpus = [d for d in devs if d.is_nvidia_gpu]
    xml = ns.parse_query_xml(cap("nvidia-smi-q-x.xml"))
    xml_bus = [ns.short_bus_id(g.bus_id) for g in xml.gpus]
    assert [d.address for d in gpus] == xml_bus
    # 32.0 GT/s is PCIe Gen5; the XML says Gen5 x16 for the same devices
    assert all((d.gen, d.width, d.max_gen, d.max_width) == (5, 16, 5, 16) for d in gpus)
    assert all(d.numa_node is None for d in devs)  # numa=-1: the VM reports none
    assert not any(d.is_mellanox_nic for d in devs)
    bridge = devs[0]
    assert bridge.gen is None and bridge.width is None  # empty fields stay unknown


def make_sysfs(tmp: Path, text: str) -> Path:
    """Render the capture's summary back into sysfs files, one directory per device."""
    base = tmp / "sys/bus/pci/devices"
    for ln in text.splitlines():
        addr, _, rest = ln.partition(" ")
        fields = dict(kv.split("=", 1) for kv in
                      rest.replace(" GT/s PCIe", "_GT/s_PCIe").split())
        d = base / addr
        d.mkdir(parents=True)
        names = {"vendor": "vendor", "class": "class", "speed": "current_link_speed",
                 "width": "current_link_width", "maxspeed": "max_link_speed",
                 "maxwidth": "max_link_width", "numa": "numa_node"}
        for key, fname in names.items():
            value = fields.get(key, "").replace("_GT/s_PCIe", " GT/s PCIe")
            if value:  # a device without a link has no link files at all
                (d / fname).write_text(value + "\n")
    return base


def test_read_pci_devices_agrees_with_summary(tmp_path):
    base = make_sysfs(tmp_path, cap("sysfs-pci.txt"))
    assert sy.read_pci_devices(base) == sy.parse_pci_summary(cap("sysfs-pci.txt"))


def test_downtrained_link_generated(tmp_path):
    text = cap("sysfs-pci.txt").replace(
        "0000:00:07.0 vendor=0x10de class=0x030200 speed=32.0 GT/s PCIe width=16",
        "0000:00:07.0 vendor=0x10de class=0x030200 speed=8.0 GT/s PCIe width=8")
    gpu1 = [d for d in sy.read_pci_devices(make_sysfs(tmp_path, text)) if d.is_nvidia_gpu][1]
    assert (gpu1.gen, gpu1.width, gpu1.max_gen) == (3, 8, 5)


def test_driver_version_capture_matches_xml():
    assert sy.parse_driver_version(cap("proc-driver-nvidia.txt")) == \
        ns.parse_query_xml(cap("nvidia-smi-q-x.xml")).driver_version
    with pytest.raises(ns.ParseError):
        sy.parse_driver_version("nothing here")


def test_numactl_and_lscpu_capture():
    assert sy.parse_numactl(cap("numactl-H.txt")) == {0: list(range(32))}
    info = sy.parse_lscpu(cap("lscpu.txt"))
    assert info["NUMA node(s)"] == "1" and info["NUMA node0 CPU(s)"] == "0-31"
    with pytest.raises(ns.ParseError):
        sy.parse_numactl("")


def test_modules_cmdline_mounts():
    mods = sy.parse_modules("nvidia_uvm 1 0 - Live 0x0\nnouveau 2 0 - Live 0x0\n")
    assert mods == {"nvidia_uvm", "nouveau"}
    assert "iommu=pt" in sy.parse_cmdline("BOOT_IMAGE=/vmlinuz ro iommu=pt\n")
    mounts = sy.parse_mounts("/dev/md0 /raid ext4 rw,noatime 0 0\nproc /proc proc rw 0 0\n")
    assert mounts["/raid"] == ("/dev/md0", "ext4")


@pytest.mark.parametrize("speed,gen", [("2.5 GT/s PCIe", 1), ("16.0 GT/s PCIe", 4),
                                       ("32GT/s", 5), ("64.0 GT/s PCIe", 6), ("", None)])
def test_pcie_gen(speed, gen):
    assert sy.pcie_gen(speed) == gen
