"""Provisioning for real: site.yml into the lab's two nodes, then testinfra over SSH.

lab-gpu01 is XE9680-like (NVSwitch, RoCE), lab-gpu02 DL380a-like (no NVSwitch, IB).
Which node gets what is decided from the hardware the node shows (its simulated
sysroot) and the inventory, never from the host name. The order matters and is
kept inside one module fixture: check mode on the fresh nodes, converge, re-run.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import testinfra

from rackready.steps.provision import RunResult, run_playbook

pytestmark = [pytest.mark.lab, pytest.mark.lab_phase("provision")]

DRIVER = "580.159.04-1"
NCCL = "2.28.9-1+cuda13.0"
DCGM = "1:4.4.1-1"
SYSROOT = "/var/lib/hwsim/root"


@dataclass
class Provisioned:
    check: RunResult
    first: RunResult
    second: RunResult


@pytest.fixture(scope="module")
def provisioned(lab_nodes, lab_converged) -> Provisioned:
    check = run_playbook(lab_nodes.inventory, "site.yml", check=True, diff=True, quiet=True)
    first = run_playbook(lab_nodes.inventory, "site.yml", quiet=True)
    second = run_playbook(lab_nodes.inventory, "site.yml", quiet=True)
    # the later phases' provisioned_lab need not converge the lab a third time
    lab_converged["converged"] = second.rc == 0 and not any(second.changed().values())
    return Provisioned(check, first, second)


@pytest.fixture(scope="module")
def hosts(lab_nodes, provisioned) -> dict:
    # testinfra's ansible backend shells out to ansible-inventory: use this environment's.
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    found = testinfra.get_hosts(["ansible://all"], ansible_inventory=str(lab_nodes.inventory))
    by_name = {h.backend.get_hostname(): h for h in found}
    assert sorted(by_name) == sorted(lab_nodes.names)
    return by_name


def has_nvswitch(host) -> bool:
    return host.run(f"ls -A {SYSROOT}/proc/driver/nvidia-nvswitch/devices").stdout.strip() != ""


def test_check_mode_on_fresh_nodes_completes(lab_nodes, provisioned):
    r = provisioned.check
    assert r.failures == {}, r.failures
    for name in lab_nodes.names:
        assert r.stats[name].get("failures", 0) == 0 and r.stats[name].get("dark", 0) == 0
    # The plan shows the changes it would make.
    assert r.stats[lab_nodes.names[0]].get("changed", 0) > 0


def test_converge_succeeds_on_every_host(lab_nodes, provisioned):
    r = provisioned.first
    assert r.rc == 0 and r.failures == {}, r.failures
    for name in lab_nodes.names:
        assert r.stats[name].get("ok", 0) > 0
        assert r.stats[name].get("failures", 0) == 0 and r.stats[name].get("dark", 0) == 0


def test_second_run_changes_nothing(lab_nodes, provisioned):
    assert provisioned.second.rc == 0, provisioned.second.failures
    assert provisioned.second.changed() == {name: 0 for name in lab_nodes.names}


@pytest.mark.parametrize("pkg", ["nvidia-open", "nvidia-driver-cuda", "nvidia-persistenced",
                                 "nvidia-kernel-open-dkms"])
def test_driver_installed_at_the_pin_and_held(hosts, pkg):
    for host in hosts.values():
        assert host.package(pkg).version == DRIVER
        assert host.check_output(f"dpkg-query -W -f='${{Status}}' {pkg}").startswith("hold ")
    for host in hosts.values():
        assert "Pin: version 580.159.04*" in host.file(
            "/etc/apt/preferences.d/rackready-nvidia-driver.pref").content_string


def test_fabric_manager_matches_the_driver_only_where_nvswitch_exists(hosts):
    kinds = {name: has_nvswitch(h) for name, h in hosts.items()}
    assert sorted(kinds.values()) == [False, True], "the lab should have one node of each kind"
    for host in hosts.values():
        fm = host.package("nvidia-fabricmanager")
        if has_nvswitch(host):
            assert fm.version == DRIVER and host.package("libnvidia-nscq").version == DRIVER
            assert host.service("nvidia-fabricmanager").is_enabled
            assert host.service("nvidia-fabricmanager").is_running
            assert "Completed" in host.check_output("nvidia-smi -q")
        else:
            assert not fm.is_installed


def test_cuda_nccl_dcgm_pinned_and_held(hosts):
    for host in hosts.values():
        assert host.package("cuda-toolkit-13-0").version == "13.0.2-1"
        for pkg in ("libnccl2", "libnccl-dev"):
            assert host.package(pkg).version == NCCL
        for pkg in ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13"):
            assert host.package(pkg).version == DCGM
        held = host.check_output("apt-mark showhold").split()
        assert {"cuda-toolkit-13-0", "libnccl2", "libnccl-dev",
                "datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13"} <= set(held)


@pytest.mark.parametrize("service", ["nvidia-persistenced", "nvidia-dcgm",
                                     "rackready-cpu-governor"])
def test_services_enabled_and_running(hosts, service):
    for host in hosts.values():
        assert host.service(service).is_enabled, service
        assert host.service(service).is_running or host.run(
            f"systemctl is-active {service}").stdout.strip() == "active", service


def test_os_baseline_files(hosts):
    for host in hosts.values():
        assert "blacklist nouveau" in host.file(
            "/etc/modprobe.d/blacklist-nouveau.conf").content_string
        assert "iommu=pt" in host.file("/etc/default/grub.d/90-rackready.cfg").content_string
        assert not host.package("unattended-upgrades").is_installed
        assert "memlock    unlimited" in host.file(
            "/etc/security/limits.d/90-rackready-memlock.conf").content_string
        assert "DefaultLimitMEMLOCK=infinity" in host.file(
            "/etc/systemd/system.conf.d/90-rackready-memlock.conf").content_string


def test_sysctls_written(hosts):
    for host in hosts.values():
        conf = host.file("/etc/sysctl.d/90-rackready.conf").content_string
        assert "kernel.numa_balancing=0" in conf.replace(" ", "")
        assert "net.core.rmem_max=268435456" in conf.replace(" ", "")


def test_modules_load_keeps_rdma_core_before_peermem(hosts):
    for host in hosts.values():
        lines = [ln for ln in host.file("/etc/modules-load.d/rackready-rdma.conf")
                 .content_string.splitlines() if ln and not ln.startswith("#")]
        assert lines[-1] == "nvidia-peermem"
        assert lines.index("ib_core") < lines.index("nvidia-peermem")
        loaded = host.file(f"{SYSROOT}/proc/modules").content_string
        assert "nvidia_peermem" in loaded


def test_roce_unit_only_on_roce_nodes(hosts):
    for host in hosts.values():
        fabric = host.ansible.get_variables()["rackready_fabric"]
        unit = host.service("rackready-roce-qos")
        if fabric == "roce":
            assert unit.is_enabled
            assert host.run("systemctl is-active rackready-roce-qos").stdout.strip() == "active"
            script = host.file("/usr/local/sbin/rackready-roce-qos").content_string
            assert "--trust dscp" in script and "0,0,0,1,0,0,0,0" in script
        else:
            assert not host.file("/etc/systemd/system/rackready-roce-qos.service").exists


def test_validation_venv_has_torch_and_yaml(hosts):
    for host in hosts.values():
        out = host.check_output("/opt/rackready/venv/bin/python -c "
                                "'import torch, yaml; print(torch.__version__)'")
        assert out.startswith("2.13.0")
        for pkg in ("fio", "numactl", "perftest"):
            assert host.package(pkg).is_installed, pkg


def test_storage_planned_and_stopped_before_mdadm(hosts, provisioned):
    log = provisioned.first.stdout_path.read_text()
    assert "stopped before mdadm" in log
    for host in hosts.values():
        assert not host.file("/proc/mdstat").exists  # the lab kernel has no md
        assert not host.mount_point("/raid").exists


def test_data_drive_with_a_filesystem_is_refused_and_others_go_on(lab_nodes, hosts, provisioned):
    # Fault made here from the lab's blank loop drive: a real ext4 on it.
    victim = lab_nodes.names[0]
    other = lab_nodes.names[1]
    drive = hosts[victim].ansible.get_variables()["nvme_raid_devices"][0]
    hosts[victim].run_expect([0], f"mkfs.ext4 -q -F {drive}")
    try:
        r = run_playbook(lab_nodes.inventory, "site.yml", tags="storage", quiet=True)
        assert r.stats[victim].get("failures", 0) == 1
        assert r.stats[other].get("failures", 0) == 0
        reason = r.failures[victim]
        assert f"refusing to touch {drive}: ext4 file system signature" in reason
        assert "\n" not in reason
        # and nothing on the drive changed
        assert hosts[victim].check_output(f"blkid -p -o value -s TYPE {drive}") == "ext4"
    finally:
        # back to the blank drive the lab made: zeros throughout (wipefs alone leaves
        # ext4's metadata behind, which the RAID guard rightly counts as data)
        hosts[victim].run_expect([0], f"dd if=/dev/zero of={drive} bs=1M status=none "
                                      f"count=$(( $(blockdev --getsize64 {drive}) >> 20 ))")


def test_fabric_manager_that_cannot_match_the_driver_fails_that_host_only(lab_nodes, hosts,
                                                                           provisioned):
    # Fault: ask for a revision the mirror does not hold, so no package matches the driver.
    r = run_playbook(lab_nodes.inventory, "site.yml", tags="fabric", quiet=True,
                     extravars={"fabric_manager_package_revision": "-999"})
    nvswitch = [n for n, h in hosts.items() if has_nvswitch(h)]
    plain = [n for n in hosts if n not in nvswitch]
    for name in nvswitch:
        assert "must match the driver exactly" in r.failures[name]
    for name in plain:
        assert r.stats[name].get("failures", 0) == 0


def test_unreachable_host_fails_alone_with_one_line(lab_nodes, provisioned, tmp_path):
    # Variant of the lab inventory: a copy with one more host at a lab address no node
    # uses. group_vars travel with it so the real nodes keep their keys and mirror.
    import shutil

    import yaml

    inv_dir = tmp_path / "inventory"
    shutil.copytree(lab_nodes.inventory.parent, inv_dir)
    hosts_file = inv_dir / "hosts.yml"
    data = yaml.safe_load(hosts_file.read_text())
    data["all"].setdefault("hosts", {})["lab-ghost"] = {"ansible_host": "10.213.7.250"}
    hosts_file.write_text(yaml.safe_dump(data))
    r = run_playbook(hosts_file, "site.yml", tags="nccl", quiet=True)  # a short stage
    assert r.rc != 0
    assert r.stats["lab-ghost"].get("dark", 0) == 1
    reason = r.failures["lab-ghost"]
    # through the jump host ssh names the failed forward, not always the address
    assert ("10.213.7.250" in reason or "open failed" in reason) and "\n" not in reason
    for name in lab_nodes.names:
        assert name not in r.failures
        assert r.stats[name].get("failures", 0) == 0 and r.stats[name].get("dark", 0) == 0
        assert r.stats[name].get("ok", 0) > 0
