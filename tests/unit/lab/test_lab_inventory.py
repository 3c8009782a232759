"""The lab's inventory folder as lab.up writes it (rackready_lab.inventory.write), read by
Ansible's own inventory loader: it holds the lab's hosts and nothing else. Ansible reads
every file of an inventory folder as a source; a slurm.conf written there became hosts
named `SlurmdPidFile=/run/slurmd.pid`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rackready_lab import config, repo, slurm
from rackready_lab import inventory as lab_inventory
from rackready_lab.config import NodeSpec
from rackready_lab.hwsim.state import build_state
from rackready_lab.hwsim.sysroot import STATE_REL

ANSIBLE_INVENTORY = str(Path(sys.executable).with_name("ansible-inventory"))
SPECS = [NodeSpec("lab-gpu01", 1, "xe9680-h200", "roce"),
         NodeSpec("lab-gpu02", 2, "dl380a-gen12-h200nvl", "ib")]


@pytest.fixture
def lab_state(tmp_path, monkeypatch) -> Path:
    """A lab state folder with each node's hwsim state, as lab.up leaves it."""
    monkeypatch.setattr(config, "STATE_DIR", tmp_path / "state")
    signing = tmp_path / "signing.asc"
    signing.write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\n")
    monkeypatch.setattr(repo, "signing_key", lambda: signing)
    for spec in SPECS:
        path = spec.root / STATE_REL
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(build_state(spec.platform, spec.name, spec.fabric)))
    return tmp_path / "state"


def test_ansible_lists_exactly_the_lab_hosts(lab_state, tmp_path, monkeypatch):
    folder = tmp_path / "inventories" / "lab"
    (folder / "slurm").mkdir(parents=True)  # an older lab.up's files: they go
    (folder / "slurm" / "slurm.conf").write_text("SlurmdPidFile=/run/slurmd.pid\n")
    assert lab_inventory.write(SPECS, {}, folder) == folder
    assert sorted(p.name for p in folder.iterdir()) == ["group_vars", "hosts.yml"]
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(config.vault_password_file()))
    done = subprocess.run([ANSIBLE_INVENTORY, "-i", str(folder), "--list"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    assert sorted(listed["_meta"]["hostvars"]) == ["lab-gpu01", "lab-gpu02"]
    assert set(listed["all"]["children"]) <= {"ungrouped", "xe9680", "dl380a"}
    assert "hosts" not in listed.get("ungrouped", {}), listed["ungrouped"]
    assert "Failed to parse" not in done.stderr
    # the site files are where the inventory's variables point, outside its folder
    gv = listed["_meta"]["hostvars"]["lab-gpu01"]
    assert "\nClusterName=rackready-lab\n" in slurm.slurm_conf_file().read_text()
    assert str(slurm.slurm_conf_file()) in gv["slurm_node_slurm_conf"]
    assert gv["slurm_node_health_suite_archive"] == str(slurm.suite_archive_file())
    assert slurm.suite_archive_file().stat().st_size > 0
    assert not slurm.site_dir().is_relative_to(folder)
