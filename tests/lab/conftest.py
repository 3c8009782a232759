"""The lab for tests: two nodes booted once per session, torn down at the end.

lab-gpu01 is XE9680-like (NVSwitch, RoCE), lab-gpu02 DL380a-like (IB).

RACKREADY_LAB_REUSE=1 (for working on one later-phase lab test): the lab that is up and
provisioned already (`invoke lab.up --nodes 3`, `invoke provision --inventory lab`, a
reboot of each node) is used as it is and left up; the fresh and provision phases' tests
need fresh nodes, so run only the files you work on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from rackready_lab import lab, nodes
from rackready_lab.config import NodeSpec

pytestmark = pytest.mark.lab
REUSE = os.environ.get("RACKREADY_LAB_REUSE") == "1"


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
    from rackready_lab.config import vault_password_file
    from rackready_lab.inventory import LAB_INVENTORY

    if REUSE:
        specs = lab.load_specs()
        if not specs:
            pytest.fail("RACKREADY_LAB_REUSE: no lab is up (invoke lab.up)")
    else:
        lab.down(progress=lambda msg: None)  # always fresh nodes: check mode sees a new OS
        specs = lab.up(2, progress=lambda msg: print(f"[lab] {msg}"))
    # The lab's own commands (testinfra's ansible-inventory, inventory copies) open its
    # vault-encrypted group_vars with the lab's generated password, as a site would.
    os.environ.setdefault("ANSIBLE_VAULT_PASSWORD_FILE", str(vault_password_file()))
    yield Lab(specs[:2], LAB_INVENTORY / "hosts.yml")
    if not REUSE:
        lab.down(progress=lambda msg: None)


@pytest.fixture(scope="session")
def lab_converged() -> dict[str, bool]:
    """Whether this session already saw `invoke provision --inventory lab` converge and a
    re-run change nothing (the provision phase's own runs): {"converged": True} then."""
    return {"converged": False}


@pytest.fixture(scope="session")
def provisioned_lab(lab_nodes, lab_converged) -> Lab:
    """The lab after `invoke provision --inventory lab`, rebooted. The playbook runs here
    unless the provision phase already proved the lab converged in this session (its
    tests that break a run on purpose change nothing on the nodes)."""
    from rackready.steps.provision import run_playbook

    if REUSE:
        return lab_nodes
    if not lab_converged["converged"]:
        result = run_playbook(lab_nodes.inventory, quiet=True)
        assert result.rc == 0, result.failures
    lab.reboot_all(lab_nodes.names)  # the reboot provisioning asks for (kernel arguments)
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


@pytest.fixture(scope="session")
def three_nodes(provisioned_lab) -> Lab:
    """The lab grown to three nodes: lab-gpu03 is a second XE9680-like node beside
    lab-gpu01 (every real rack is many nodes of one model), provisioned and rebooted."""
    from rackready.steps.provision import run_playbook

    specs = lab.up(3, progress=lambda msg: print(f"[lab] {msg}"))
    assert [s.name for s in specs] == ["lab-gpu01", "lab-gpu02", "lab-gpu03"]
    assert specs[2].platform == specs[0].platform  # two of one model
    if not REUSE:
        result = run_playbook(provisioned_lab.inventory, limit="lab-gpu03", quiet=True)
        assert result.rc == 0, result.failures
        lab.reboot("lab-gpu03")
    for spec in specs:
        lab.heal(spec.name)
    return Lab(specs, provisioned_lab.inventory)
