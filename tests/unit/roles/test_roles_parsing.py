"""The Jinja that reads tool output inside the roles, rendered by Ansible's own
templar on real captures (nvidia-smi -q from tests/fixtures) or, for
mlxconfig, on output written from its documented `query` format (no capture of
it exists). Expressions are read from the role files, so a change there is tested.
"""

from __future__ import annotations

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from rackready.site.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
SMI_Q = ROOT / "tests/fixtures/hgx-h200-2gpu/nvidia-smi-q.txt"


def tasks(path: str) -> list[dict]:
    return yaml.safe_load((ROOT / path).read_text())


def task(path: str, name: str) -> dict:
    return next(t for t in tasks(path) if t.get("name") == name)


def render(expr: str, **variables):
    templar = Templar(loader=DataLoader(), variables=variables)
    return templar.template(expr)


def fabric_ready(stdout: str) -> bool:
    t = task("roles/fabric_manager/tasks/install.yml",
             "Wait until every GPU's fabric state is Completed")
    # Evaluated the way Ansible evaluates `until` (a conditional inside {% %}).
    expr = "{% if " + t["until"].strip() + " %}True{% else %}False{% endif %}"
    return render(expr, fabric_manager_register_fabric={"stdout": stdout}) in (True, "True")


def test_fabric_wait_accepts_the_captured_completed_state():
    assert fabric_ready(SMI_Q.read_text())


def test_fabric_wait_rejects_one_gpu_still_in_progress():
    # Variant: the second GPU's fabric state rewritten from Completed to In Progress.
    text = SMI_Q.read_text()
    line = "Fabric\n        State" + " " * 42 + ": "
    head, sep, tail = text.rpartition(line + "Completed")
    assert sep, "capture layout changed"
    variant = head + line + "In Progress" + tail
    assert not fabric_ready(variant)
    assert not fabric_ready("")  # no fabric section at all is not ready


def test_driver_state_read_from_the_capture():
    t = task("roles/nvidia_driver/tasks/verify.yml", "Read the loaded driver state")
    reg = {"stdout": SMI_Q.read_text(), "stderr": ""}
    facts = {k: str(render(v, nvidia_driver_register_smi=reg)).strip()
             for k, v in t["ansible.builtin.set_fact"].items()}
    assert facts["nvidia_driver_loaded_version"] == "580.159.04"
    assert facts["nvidia_driver_cuda_version"] == "13.0"
    assert facts["__nvidia_driver_mismatch"] == "False"
    mismatch = {"stdout": "",
                "stderr": "Failed to initialize NVML: Driver/library version mismatch"}
    assert str(render(t["ansible.builtin.set_fact"]["__nvidia_driver_mismatch"],
                      nvidia_driver_register_smi=mismatch)).strip() == "True"


def test_dcgm_flavour_from_the_capture():
    t = task("roles/dcgm/tasks/main.yml", "Pick the DCGM flavour for the driver's CUDA major")
    expr = t["ansible.builtin.set_fact"]["__dcgm_major"]
    got = render(expr, dcgm_cuda_major=0, dcgm_register_smi={"stdout": SMI_Q.read_text()})
    assert str(got).strip() == "13"
    assert str(render(expr, dcgm_cuda_major=12, dcgm_register_smi={})).strip() == "12"


MLXCONFIG_QUERY = """
Device #1:
----------

Device type:        ConnectX7
Name:               MCX75310AAS-NEA_Ax
Description:        NVIDIA ConnectX-7 HHHL adapter card; 400Gb/s NDR IB; single-port OSFP
Device:             0000:1a:00.0

Configurations:                                          Next Boot
        LINK_TYPE_P1                                     {link}
        ADVANCED_PCI_SETTINGS                            True(1)
"""


@pytest.mark.parametrize("current,fabric,expected", [
    ("IB(1)", "ib", []),
    ("ETH(2)", "ib", [{"device": "0000:1a:00.0", "settings": {"LINK_TYPE_P1": 1}}]),
    ("IB(1)", "roce", [{"device": "0000:1a:00.0", "settings": {"LINK_TYPE_P1": 2}}]),
])
def test_mlxconfig_changes_only_what_differs(current, fabric, expected):
    main = task("roles/rdma_network/tasks/main.yml", "Import the ConnectX firmware tasks")
    t = task("roles/rdma_network/tasks/firmware.yml", "Work out the settings that differ")
    variables = {"rdma_network_fabric": fabric,
                 "rdma_network_mlxconfig": {"ADVANCED_PCI_SETTINGS": 1}}
    wanted = render(main["vars"]["__rdma_network_mlx_wanted"], **variables)
    result = {"rc": 0, "item": "0000:1a:00.0", "stdout": MLXCONFIG_QUERY.format(link=current)}
    changes = render(t["ansible.builtin.set_fact"]["rdma_network_mlx_changes"],
                     __rdma_network_mlx_wanted=wanted,
                     rdma_network_register_mlxq={"results": [result]})
    assert changes == expected


# The verbose layout (`mlxconfig -e q`, and what the lab's stand-in prints): Default,
# Current and Next Boot columns, a '*' on settings that differ from the default.
MLXCONFIG_QUERY_VERBOSE = """
Device #1:
----------

Device type:        ConnectX7
Device:             0000:1a:00.0

Configurations:                                      Default             Current    \
         Next Boot
*       LINK_TYPE_P1                        IB(1)               {current:<20}{next}
        ADVANCED_PCI_SETTINGS               False(0)            True(1)             True(1)
"""


@pytest.mark.parametrize("current,pending,fabric,expected", [
    ("ETH(2)", "ETH(2)", "roce", []),
    # a set that waits for a reboot counts as done: only Next Boot is compared
    ("IB(1)", "ETH(2)", "roce", []),
    ("ETH(2)", "IB(1)", "roce", [{"device": "0000:1a:00.0", "settings": {"LINK_TYPE_P1": 2}}]),
    ("ETH(2)", "ETH(2)", "ib", [{"device": "0000:1a:00.0", "settings": {"LINK_TYPE_P1": 1}}]),
])
def test_mlxconfig_verbose_layout_compares_next_boot(current, pending, fabric, expected):
    main = task("roles/rdma_network/tasks/main.yml", "Import the ConnectX firmware tasks")
    t = task("roles/rdma_network/tasks/firmware.yml", "Work out the settings that differ")
    variables = {"rdma_network_fabric": fabric,
                 "rdma_network_mlxconfig": {"ADVANCED_PCI_SETTINGS": 1}}
    wanted = render(main["vars"]["__rdma_network_mlx_wanted"], **variables)
    out = MLXCONFIG_QUERY_VERBOSE.format(current=current, next=pending)
    result = {"rc": 0, "item": "0000:1a:00.0", "stdout": out}
    changes = render(t["ansible.builtin.set_fact"]["rdma_network_mlx_changes"],
                     __rdma_network_mlx_wanted=wanted,
                     rdma_network_register_mlxq={"results": [result]})
    assert changes == expected


# `apt-cache madison` layout (apt-cache(8)): package | version | source. Written by hand,
# the lab mirror's URL; the 580.126.09 line stands for an older branch left on a mirror.
MADISON = """\
nvidia-fabricmanager | 580.159.04-1 | http://10.213.7.1:8473/debian bookworm/main amd64 Packages
nvidia-fabricmanager | 580.126.09-1 | http://10.213.7.1:8473/debian bookworm/main amd64 Packages
      libnvidia-nscq | {nscq} | http://10.213.7.1:8473/debian bookworm/main amd64 Packages
"""


def fm_missing(madison: str, revision: str = "-1") -> list[str]:
    t = task("roles/fabric_manager/tasks/install.yml",
             "Refuse a fabric manager that cannot match the driver")
    v = dict(t["vars"], fabric_manager_packages=["nvidia-fabricmanager", "libnvidia-nscq"],
             fabric_manager_driver_version="580.159.04", fabric_manager_package_revision=revision,
             fabric_manager_register_madison={"stdout_lines": madison.splitlines()})
    got = render("{{ __fabric_manager_missing }}", **v)
    assert isinstance(got, list), got  # Ansible turns the rendered text back into a list
    return got


def test_fabric_manager_refusal_finds_the_driver_version_on_the_mirror():
    assert fm_missing(MADISON.format(nscq="580.159.04-1")) == []


def test_fabric_manager_refusal_names_each_package_without_the_driver_version():
    # Variants: NSCQ only at the older branch; a revision the mirror does not hold; empty lists.
    assert fm_missing(MADISON.format(nscq="580.126.09-1")) == ["libnvidia-nscq"]
    assert fm_missing(MADISON.format(nscq="580.159.04-1"), revision="-999") == [
        "nvidia-fabricmanager", "libnvidia-nscq"]
    assert fm_missing("") == ["nvidia-fabricmanager", "libnvidia-nscq"]
