"""Runs last in the lab suite (lab_phase teardown): lab.down must leave nothing behind."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from rackready_lab import config, lab, network, nodes, repo

pytestmark = [pytest.mark.lab, pytest.mark.lab_phase("teardown")]


def test_lab_down_leaves_no_namespace_link_loop_device_mount_or_process(lab_nodes):
    lab.down(progress=lambda msg: None)
    assert network.lab_namespaces() == []
    assert network.lab_links() == []
    assert nodes.lab_loop_devices() == []
    assert repo.serving_pid() is None
    mounts = Path("/proc/mounts").read_text()
    assert str(config.STATE_DIR) not in mounts
    # the nodes, and the gpg agent that signing the lab's mirror started (it may take a
    # moment to exit once told to)
    for _ in range(10):
        procs = subprocess.run(["ps", "-eo", "stat,args"], capture_output=True,
                               text=True).stdout
        live = [line for line in procs.splitlines() if not line.startswith("Z") and (
            "systemd-nspawn" in line or f"gpg-agent --homedir {config.STATE_DIR}" in line)]
        if not live:
            break
        time.sleep(0.5)
    assert live == [], live
    assert not (config.STATE_DIR / "nodes").exists()  # the jump host's copy too
    assert not config.vault_password_file().exists()
