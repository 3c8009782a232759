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
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail("lab tests run in one process, in their order (no pytest-xdist -n): "
                    "invoke test --lab")
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


# The lab suite's order, by phase: the lab itself on fresh nodes, provisioning from fresh
# nodes (its check-mode test needs a new OS), then everything that uses the provisioned
# two-node lab, then the test that grows the lab to three nodes, and last the tests that
# power a node off and tear the lab down. A lab test file names its phase with
# `pytest.mark.lab_phase(...)` beside its lab mark; one without runs in "provisioned".
PHASES = ("fresh", "provision", "provisioned", "three-nodes", "node-drop", "teardown")
DEFAULT_PHASE = "provisioned"


def lab_phase(item) -> int:
    """Where the item runs in the lab's order; -1 (first) for a test that is not a lab test."""
    if item.get_closest_marker("lab") is None:
        return -1
    mark = item.get_closest_marker("lab_phase")
    phase = mark.args[0] if mark else DEFAULT_PHASE
    if phase not in PHASES:
        raise pytest.UsageError(f"{item.nodeid}: unknown lab_phase {phase!r} "
                                f"(phases: {', '.join(PHASES)})")
    return PHASES.index(phase)


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lab_phase)  # stable: keeps the order within each phase and file
