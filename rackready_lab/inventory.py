"""Writes inventories/lab: the lab's nodes as an Ansible inventory.

It has the shape of a real site's inventory (see inventories/rack1) plus the
lab's own SSH trust (its generated known_hosts and ssh config) and its package
mirror. Nodes are reached as on a real rack: the non-root admin through the jump
host (ProxyJump), root through sudo (ansible_become). The BMC password sits in a
vault-encrypted group_vars/all/vault.yml; its password is the lab-generated
config.vault_password_file(), which the inventory names (rackready_vault_password_file)
and rackready uses when no vault password is configured (other tools:
ANSIBLE_VAULT_PASSWORD_FILE=that file).
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from rackready_lab import config, keys, repo, slurm
from rackready_lab.config import NodeSpec
from rackready_lab.redfish import bmc as lab_bmc

PROJECT_ROOT = Path(__file__).resolve().parents[1]
LAB_INVENTORY = PROJECT_ROOT / "inventories" / "lab"

PLATFORM_GROUPS = {
    "xe9680-h200": "xe9680",
    "xe9680-h100": "xe9680",
    "dl380a-gen12-h200nvl": "dl380a",
    "dl380a-gen11-h100nvl": "dl380a",
}


def host_vars(spec: NodeSpec, drives: list[str]) -> dict:
    from rackready_lab.hwsim.sysroot import read_node_state

    # What a site lists from its order sheet, read here off the simulated hardware.
    compute = [n for n in read_node_state(spec.root)["nics"] if n["role"] == "compute"]
    hv: dict[str, Any] = {
        "ansible_host": spec.ip,
        "rackready_platform": spec.platform,
        "rackready_profile": spec.profile,
        "rackready_fabric": spec.fabric,
        "nvme_raid_devices": drives,
        "rdma_network_mlx_devices": [n["bdf"] for n in compute],
        # the node's lab BMC (rackready_lab/redfish/bmc.py): https://<address>/redfish/v1
        "rackready_bmc_address": lab_bmc.address(spec),
    }
    # the GPUs the node's Slurm line and gres.conf count (the simulated ones)
    hv["slurm_node_gpu_count"] = slurm.gpu_count(spec)
    if spec.fabric == "roce":
        hv["rdma_network_roce_interfaces"] = [n["netdev"] for n in compute]
    return hv


def group_vars() -> dict:
    return {
        "ansible_user": config.ADMIN_USER,
        "ansible_become": True,
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_private_key_file": str(keys.client_key()),
        # The lab's own generated known_hosts: host keys are still verified. The jump
        # hop gets its key and known_hosts from the -F file (ssh passes it only that).
        "ansible_ssh_common_args": (
            f"-F {keys.ssh_config()} -o UserKnownHostsFile={keys.known_hosts()} "
            f"-o StrictHostKeyChecking=yes "
            f"-o ProxyJump={config.ADMIN_USER}@{config.jump_spec().ip}"
        ),
        "rackready_bmc_user": lab_bmc.credentials()["user"],
        "rackready_bmc_password": "{{ vault_rackready_bmc_password }}",
        # the password of vault.yml, as any site may name its own (rackready.site.vault)
        "rackready_vault_password_file": str(config.vault_password_file()),
        # the lab BMCs' certificates are signed by the lab CA, the only one trusted
        "rackready_bmc_ca_file": str(lab_bmc.ca_file()),
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
        # Its nvcc is a stand-in that cannot compile: nccl-tests comes prebuilt, as hwsim's
        # nccl-tests package (the validation_tools role installs it instead of building).
        "rackready_validation_without": ["raid"],
        # Slurm (playbooks/slurm.yml, `invoke validate --via slurm`): the nodes join the lab's
        # slurmctld on lab-slurm (rackready_lab.slurm) with the cluster's one slurm.conf and
        # munge key, as a site's nodes join its own; the controller submits through lab-slurm.
        "slurm_node_enabled": True,
        # the site files live with the lab's state, outside the inventory folder
        # (rackready_lab.slurm.site_dir: Ansible would read them as inventory sources)
        "slurm_node_slurm_conf":
            f"{{{{ lookup('ansible.builtin.file', '{slurm.slurm_conf_file()}') }}}}",
        "slurm_node_munge_key": "{{ vault_slurm_munge_key }}",
        "slurm_node_cgroup_conf": {},  # containers: no cgroup plugin (slurm.conf says so)
        "slurm_node_health_suite_dir": "/opt/rackready/suite",
        "slurm_node_health_suite_archive": str(slurm.suite_archive_file()),
        "slurm_node_health_extra_args": ["--sysroot", "/var/lib/hwsim/root",
                                         "--without", "raid"],
        # the lab's jobs start at once: a job still pending after 15 s never will
        "rackready_slurm": {"submit_host": slurm.SPEC.ip, "partition": slurm.PARTITION,
                            "pending_s": 15},
        "validation_tools_nccl_tests_package": "nccl-tests",
        # The lab has no GPUs: workloads run on CPU (gloo, tiny sizes).
        "rackready_validation_site": {
            # lab and CI hosts forbid NVLink multicast, whatever the profile says
            "nccl_nvls_enable": False,
            # rack-level step: every lab node hangs off the one lab bridge (host0), so
            # they are one fabric whatever their simulated IB/RoCE (rackready.decide.rack)
            "rack": {"fabric": "lab-network", "socket_ifname": "host0"},
            # hwsim's dcgmi answers from the node's state: nothing to let it sample
            "dcgm": {"health_settle_s": 0},
            "workloads": {
                "device": "cpu",
                "storage": {"dir": "/var/tmp/raid-standin", "fio_size": "64M",
                            "ckpt_files": 4, "ckpt_file_bytes": 16 << 20},
                # a short burn-in: the quick level's 15 s is for a GPU, not for CPU GEMM on
                # a lab node sharing the controller's cores (as the hwsim runs of the tests)
                "gemm_burnin": {"duration_s": 8, "ramp_s": 2, "sdc_every_s": 3},
            },
        },
    }


def write(specs: list[NodeSpec], drives: dict[str, list[str]],
          folder: Path = LAB_INVENTORY) -> Path:
    """The inventory folder: hosts.yml and group_vars only (Ansible reads every file in
    it as an inventory source); the Slurm site files go to rackready_lab.slurm.site_dir()."""
    groups: dict[str, dict] = {}
    for spec in specs:
        group = PLATFORM_GROUPS[spec.platform]
        groups.setdefault(group, {"hosts": {}})["hosts"][spec.name] = host_vars(
            spec, drives.get(spec.name, [])
        )
    hosts = {"all": {"children": groups}}
    all_vars = folder / "group_vars" / "all"
    all_vars.mkdir(parents=True, exist_ok=True)
    (folder / "group_vars" / "all.yml").unlink(missing_ok=True)  # Ansible reads one
    shutil.rmtree(folder / "slurm", ignore_errors=True)  # where an older lab.up wrote them
    header = "# Written by `invoke lab.up`; removed by `invoke lab.down`.\n"
    (folder / "hosts.yml").write_text(
        header + "---\n" + yaml.safe_dump(hosts, sort_keys=False)
    )
    (all_vars / "main.yml").write_text(
        header + "---\n" + yaml.safe_dump(group_vars(), sort_keys=False)
    )
    write_vault(all_vars / "vault.yml")
    slurm.write_site_files(specs)
    return folder


def write_vault(path: Path) -> None:
    """group_vars/all/vault.yml, encrypted with the lab's vault password (made once per
    lab): the lab BMCs' password (bmc.credentials()), a secret the roles never print."""
    import secrets

    from ansible.parsing.vault import VaultLib, VaultSecret

    pw_file = config.vault_password_file()
    if not pw_file.exists():
        pw_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(pw_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(24) + "\n")
    password = pw_file.read_text().strip().encode()
    plain = yaml.safe_dump({"vault_rackready_bmc_password": lab_bmc.credentials()["password"],
                            # the lab cluster's munge key, as the slurm_node role reads it
                            "vault_slurm_munge_key": base64.b64encode(slurm.munge_key()).decode()})
    vault = VaultLib([("default", VaultSecret(password))])
    path.write_bytes(vault.encrypt(plain.encode()))
    path.chmod(0o600)


def remove() -> None:
    shutil.rmtree(LAB_INVENTORY, ignore_errors=True)
