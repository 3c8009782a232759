"""The lab itself: nodes boot, are reachable only as intended, and clean up."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

import pytest

from rackready_lab import config, lab, network, nodes

pytestmark = [pytest.mark.lab, pytest.mark.lab_phase("fresh")]


def test_nodes_answer_over_ssh_with_verified_host_keys(lab_nodes):
    for name in lab_nodes.names:
        assert lab_nodes.sh(name, "hostname").stdout.strip() == name
        assert lab_nodes.sh(name, "systemctl is-system-running --wait").stdout.strip() in (
            "running",
        )


def test_console_output_never_blocks_the_node(lab_nodes):
    # PID 1 writes status lines to /dev/console; if nothing drains it, a full
    # pseudo-TTY buffer (a few KiB) freezes systemd. 256 KiB must pass at once.
    out = lab_nodes.sh(
        "lab-gpu01",
        "timeout 20 sh -c 'head -c 262144 /dev/zero | tr \"\\\\000\" . >/dev/console'"
        " && echo drained",
        check=False,
    )
    assert out.stdout.strip() == "drained", out.stderr
    log = lab_nodes.spec("lab-gpu01").dir / "console.log"
    assert log.stat().st_size >= 262144


def test_a_changed_host_key_is_refused(lab_nodes, tmp_path):
    spec = lab_nodes.spec("lab-gpu01")
    forged = tmp_path / "known_hosts"
    other = lab_nodes.spec("lab-gpu02").root / "etc/ssh/ssh_host_ed25519_key.pub"
    algo, blob = other.read_text().split()[:2]
    forged.write_text(f"{spec.ip} {algo} {blob}\n")
    from rackready_lab import keys
    from rackready_lab.shell import run

    proc = run(["ssh", "-i", str(keys.client_key()), "-o", f"UserKnownHostsFile={forged}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                f"root@{spec.ip}", "true"], check=False)
    assert proc.returncode != 0
    assert "HOST IDENTIFICATION HAS CHANGED" in proc.stderr or "verification failed" in proc.stderr


def test_nodes_have_no_route_beyond_the_lab(lab_nodes):
    for name in lab_nodes.names:
        routes = lab_nodes.sh(name, "ip -4 route show").stdout.strip().splitlines()
        assert routes and all(r.startswith(str(config.SUBNET)) for r in routes), routes


def test_apt_sees_only_the_signed_lab_mirror(lab_nodes):
    out = lab_nodes.sh("lab-gpu01", "apt-get update 2>&1; apt-cache policy").stdout
    assert f"{config.GATEWAY}:{config.REPO_PORT}" in out
    assert "debian.org" not in out
    assert "NO_PUBKEY" not in out and "not signed" not in out


INSTALL_DRIVER = (
    "command -v nvidia-smi >/dev/null || { DEBIAN_FRONTEND=noninteractive "
    "apt-get install -y -q nvidia-open >/dev/null && modprobe nvidia; }"
)


def test_driver_package_from_the_mirror_shows_eight_h200(lab_nodes):
    # as an administrator would on a fresh node: install from the mirror, load
    lab_nodes.sh("lab-gpu01", INSTALL_DRIVER)
    xml = lab_nodes.sh("lab-gpu01", "nvidia-smi -q -x").stdout
    root = ET.fromstring(xml)
    gpus = root.findall("gpu")
    assert len(gpus) == 8
    assert {g.findtext("product_name") for g in gpus} == {"NVIDIA H200"}
    # built from the real capture: its driver and VBIOS
    assert root.findtext("driver_version") == "580.159.04"
    assert {g.findtext("vbios_version") for g in gpus} == {"96.00.A5.00.1A"}
    assert len({g.findtext("serial") for g in gpus}) == 8


def test_fault_changes_what_the_node_reports_and_heal_restores(lab_nodes):
    lab_nodes.sh("lab-gpu01", INSTALL_DRIVER)

    def gpu_count() -> int:
        return len(lab_nodes.sh("lab-gpu01", "nvidia-smi -L").stdout.strip().splitlines())

    assert gpu_count() == 8
    lab.fault("lab-gpu01", "gpu-missing")
    try:
        assert gpu_count() == 7
    finally:
        lab.heal("lab-gpu01")
    assert gpu_count() == 8


def test_lab_up_again_is_idempotent(lab_nodes):
    before = {s.name: nodes.pid_of(s) for s in lab_nodes.specs}
    t0 = time.monotonic()
    lab.up(2, progress=lambda msg: None)
    assert {s.name: nodes.pid_of(s) for s in lab_nodes.specs} == before
    assert time.monotonic() - t0 < 60


def test_lab_resources_are_all_accounted_for(lab_nodes):
    machines = [*lab_nodes.specs, config.jump_spec(), config.slurm_spec()]
    assert set(network.lab_namespaces()) == {s.netns for s in machines}
    assert {s.host_veth for s in machines} <= set(network.lab_links())
    assert config.BRIDGE in network.lab_links()
    assert len(nodes.lab_loop_devices()) == config.DATA_DRIVES * len(lab_nodes.specs)
