"""The lab for tests: two nodes booted once per session, torn down at the end.

lab-gpu01 is XE9680-like (NVSwitch, RoCE), lab-gpu02 DL380a-like (IB).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from rackready.lab import lab, nodes
from rackready.lab.config import NodeSpec

pytestmark = pytest.mark.lab


@dataclass
class Lab:
    specs: list[NodeSpec]
    inventory: Path

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.specs]

    def spec(self, name: str) -> NodeSpec:
        return next(s for s in self.specs if s.name == name)

    def sh(self, name: str, command: str, check: bool = True):
        """As root on the node: the admin through the jump host, then sudo."""
        return nodes.ssh(self.spec(name), command, check=check)


@pytest.fixture(scope="session")
def lab_nodes() -> Lab:
    if os.geteuid() != 0:
        pytest.fail("lab tests need root (systemd-nspawn, network namespaces)")
    from rackready.lab.inventory import LAB_INVENTORY

    lab.down(progress=lambda msg: None)  # always fresh nodes: check mode must see a new OS
    specs = lab.up(2, progress=lambda msg: print(f"[lab] {msg}"))
    # The lab's own commands (testinfra's ansible-inventory, inventory copies) open its
    # vault-encrypted group_vars with the lab's generated password, as a site would.
    from rackready.lab.config import vault_password_file

    os.environ.setdefault("ANSIBLE_VAULT_PASSWORD_FILE", str(vault_password_file()))
    yield Lab(specs, LAB_INVENTORY / "hosts.yml")
    lab.down(progress=lambda msg: None)


@pytest.fixture(scope="session")
def provisioned_lab(lab_nodes) -> Lab:
    """The lab after `invoke provision --inventory lab` (a no-op if already converged)."""
    from rackready.steps.provision import run_playbook

    result = run_playbook(lab_nodes.inventory, quiet=True)
    assert result.rc == 0, result.failures
    for name in lab_nodes.names:  # the reboot provisioning asks for (kernel arguments)
        lab.reboot(name)
    return lab_nodes


# The lab suite runs in this order: the lab itself, provisioning from fresh nodes
# (its check-mode test needs a new OS), then everything that uses provisioned
# nodes, then the test that grows the lab to three nodes, and last the tests that power
# a node off and tear the lab down.
_ORDER = ("test_lab.py", "test_provision_roles.py")
# The three-node rack grows the lab, so it comes after every two-node test.
_LAST = ("test_three_node_rack.py", "test_zy_node_drop.py", "test_zz_lab_down.py")


def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        name = item.path.name
        if name in _ORDER:
            return _ORDER.index(name)
        if name in _LAST:
            return 100 + _LAST.index(name)
        return 50 if item.path.parent.name == "lab" else -1

    items.sort(key=rank)  # stable: keeps the order within each file
