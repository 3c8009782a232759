"""A site's inventory folder read by Ansible's own loader, with the project's ansible.cfg:
the calibration overlay `invoke calibrate` writes beside the hosts
(inventories/<site>/calibration/<profile>.yml) is profile data, never inventory. Before
ansible.cfg ignored that folder, the overlay's keys became groups (`versions`) and a
dozen warnings on every `ansible-playbook -i inventories/<site>`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from rackready.decide.calibration import overlay_path
from rackready.site.paths import PROJECT_ROOT

ANSIBLE_INVENTORY = str(Path(sys.executable).with_name("ansible-inventory"))


def test_a_calibration_overlay_beside_the_hosts_is_not_read_as_inventory(tmp_path):
    site = tmp_path / "rack9"
    site.mkdir()
    (site / "hosts.yml").write_text(yaml.safe_dump(
        {"all": {"children": {"xe9680": {"hosts": {"gpu01": {"ansible_host": "192.0.2.11"}}}}}}))
    overlay = overlay_path(site, "xe9680-h200")
    overlay.parent.mkdir(parents=True)
    overlay.write_text(yaml.safe_dump({"profile": "xe9680-h200", "versions": {"calibrated": 1},
                                       "thresholds": [{"metric": "rdma.gpudirect_bw"}]}))
    done = subprocess.run([ANSIBLE_INVENTORY, "-i", str(site), "--list"], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    groups = set(listed) - {"_meta"}
    assert groups == {"all", "xe9680"}, groups
    assert list(listed["_meta"]["hostvars"]) == ["gpu01"]
    assert "calibration" not in done.stderr and "not a valid group" not in done.stderr, done.stderr
