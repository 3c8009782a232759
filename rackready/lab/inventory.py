"""Writes inventories/lab: the lab's nodes as an Ansible inventory.

It has the shape of a real site's inventory (see inventories/rack1) plus the
lab's own SSH trust (its generated known_hosts) and its package mirror.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from rackready.lab import config, keys, repo
from rackready.lab.config import NodeSpec

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LAB_INVENTORY = PROJECT_ROOT / "inventories" / "lab"

PLATFORM_GROUPS = {
    "xe9680-h200": "xe9680",
    "xe9680-h100": "xe9680",
    "dl380a-gen12-h200nvl": "dl380a",
    "dl380a-gen11-h100nvl": "dl380a",
}


def host_vars(spec: NodeSpec, drives: list[str]) -> dict:
    from rackready.lab.hwsim.sysroot import read_node_state

    # What a site lists from its order sheet, read here off the simulated hardware.
    compute = [n for n in read_node_state(spec.root)["nics"] if n["role"] == "compute"]
    hv = {
        "ansible_host": spec.ip,
        "rackready_platform": spec.platform,
        "rackready_profile": spec.profile,
        "rackready_fabric": spec.fabric,
        "nvme_raid_devices": drives,
        "rdma_network_mlx_devices": [n["bdf"] for n in compute],
    }
    if spec.fabric == "roce":
        hv["rdma_network_roce_interfaces"] = [n["netdev"] for n in compute]
    return hv


def group_vars() -> dict:
    return {
        "ansible_user": "root",
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_private_key_file": str(keys.client_key()),
        # The lab's own generated known_hosts: host keys are still verified.
        "ansible_ssh_common_args": (
            f"-o UserKnownHostsFile={keys.known_hosts()} -o StrictHostKeyChecking=yes"
        ),
        "rackready_lab": True,
        "rackready_sysroot": "/var/lib/hwsim/root",
        "package_sources_repositories": [
            {
                "name": "rackready-lab",
                "uris": f"{repo.url()}/debian",
                "suites": config.SUITE,
                "components": "main",
                "key_content": repo.signing_key().read_text(),
            }
        ],
        "package_sources_exclusive": True,
        "validation_tools_wheelhouse_url": f"{repo.url()}/wheels/",
        # The lab kernel has no md: /raid cannot be assembled (nvme_raid plans and
        # stops before mdadm), so the RAID checks are reported not applicable there.
        # Its nvcc is a stand-in that cannot compile, so nccl-tests is never built.
        "rackready_validation_without": ["raid", "nccl-tests"],
        # The lab has no GPUs: workloads run on CPU (gloo, tiny sizes).
        "rackready_validation_site": {
            # lab and CI hosts forbid NVLink multicast, whatever the profile says
            "nccl_nvls_enable": False,
            "workloads": {
                "device": "cpu",
                "storage": {"dir": "/var/tmp/raid-standin", "fio_size": "64M",
                            "ckpt_files": 4, "ckpt_file_bytes": 16 << 20},
            },
        },
    }


def write(specs: list[NodeSpec], drives: dict[str, list[str]]) -> Path:
    groups: dict[str, dict] = {}
    for spec in specs:
        group = PLATFORM_GROUPS[spec.platform]
        groups.setdefault(group, {"hosts": {}})["hosts"][spec.name] = host_vars(
            spec, drives.get(spec.name, [])
        )
    hosts = {"all": {"children": groups}}
    (LAB_INVENTORY / "group_vars").mkdir(parents=True, exist_ok=True)
    header = "# Written by `invoke lab.up`; removed by `invoke lab.down`.\n"
    (LAB_INVENTORY / "hosts.yml").write_text(
        header + "---\n" + yaml.safe_dump(hosts, sort_keys=False)
    )
    (LAB_INVENTORY / "group_vars" / "all.yml").write_text(
        header + "---\n" + yaml.safe_dump(group_vars(), sort_keys=False)
    )
    return LAB_INVENTORY


def remove() -> None:
    shutil.rmtree(LAB_INVENTORY, ignore_errors=True)
