"""The lab's Slurm: a controller machine of its own (lab-slurm, behind the jump host like a
site's management host) running Debian's real slurmctld with munge, and the site files
every lab node joins with (roles/slurm_node): the cluster's slurm.conf, the munge key in
the lab's vault, and the suite archive the health gate runs from.

What the lab cannot have is simulated and said so: the GPUs' device files are stand-in
character devices (rackready-lab-gpu-devices.service on each node) that Slurm counts as
it counts /dev/nvidia* on a server; nothing can open them.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from pathlib import Path

from rackready.errors import EnvironmentProblem
from rackready_lab import config, network, nodes
from rackready_lab.config import NodeSpec

SPEC = config.slurm_spec()  # .9: beside the jump host, not a GPU node
PACKAGES = ("munge", "slurmctld", "slurm-client")
CLUSTER = "rackready-lab"
PARTITION = "gpu"
# Runs the health gate at slurmd's start and then this rarely: the lab tests run the gate
# themselves and must not race a periodic one.
HEALTH_INTERVAL_S = 3600
# Containers get read-only cgroups (bench/results/slurm-container-2026-12-02.md).
CONTAINER_PLUGINS = {"ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/affinity"}
GPU_DEVICES_UNIT = "rackready-lab-gpu-devices.service"
NVIDIA_MAJOR = 195


def munge_key_file() -> Path:
    return config.STATE_DIR / "munge.key"


def munge_key() -> bytes:
    """The lab cluster's munge key: made once per lab (lab.down removes it)."""
    path = munge_key_file()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(1024))
    return path.read_bytes()


def gpu_count(spec: NodeSpec) -> int:
    from rackready_lab.hwsim.sysroot import read_node_state

    return len(read_node_state(spec.root).get("gpus", []))


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise EnvironmentProblem("no MemTotal in /proc/meminfo")


def slurm_conf(specs: list[NodeSpec]) -> str:
    """The cluster's slurm.conf, as a site distributes one file to its controller and nodes.
    Every lab node shares the controller's CPUs and memory (containers): what slurmd -C
    prints there, memory less the role's default reserve."""
    cpus = os.cpu_count() or 1
    memory = max(_memory_mb() - 1024, 1)
    lines = [
        "# Written by `invoke lab.up`: the lab cluster's slurm.conf (controller and nodes).",
        f"ClusterName={CLUSTER}",
        f"SlurmctldHost={SPEC.name}({SPEC.ip})",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "SlurmUser=slurm",
        "SlurmdUser=root",
        "StateSaveLocation=/var/lib/slurm/slurmctld",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "GresTypes=gpu",
        *(f"{k}={v}" for k, v in CONTAINER_PLUGINS.items()),
        "MpiDefault=none",
        "ReturnToService=2",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        # a finished job's record (state, reason) stays readable for the controller
        "MinJobAge=3600",
        "HealthCheckProgram=/usr/local/sbin/rackready-health",
        f"HealthCheckInterval={HEALTH_INTERVAL_S}",
        "HealthCheckNodeState=IDLE,CYCLE",
    ]
    for spec in specs:
        lines.append(f"NodeName={spec.name} NodeAddr={spec.ip} CPUs={cpus} "
                     f"RealMemory={memory} Gres=gpu:{gpu_count(spec)} State=UNKNOWN")
    names = ",".join(s.name for s in specs)
    lines.append(f"PartitionName={PARTITION} Nodes={names} Default=YES MaxTime=INFINITE "
                 "State=UP")
    return "\n".join(lines) + "\n"


def gpu_devices_unit(count: int) -> str:
    """A boot unit that makes /dev/nvidia0..N-1 as stand-in character devices (SIMULATED:
    nothing opens them) before slurmd starts, so gres.conf can name them as on a server."""
    made = " ".join(f"/dev/nvidia{i}" for i in range(count))
    script = (f"for i in $(seq 0 {count - 1}); do [ -e /dev/nvidia$i ] || "
              f"mknod -m 0666 /dev/nvidia$i c {NVIDIA_MAJOR} $i; done")
    return ("[Unit]\n"
            f"Description=rackready lab: stand-in GPU device files {made} (SIMULATED)\n"
            "DefaultDependencies=no\nBefore=slurmd.service sysinit.target\n\n"
            "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
            f"ExecStart=/bin/sh -c '{script}'\n\n"
            "[Install]\nWantedBy=sysinit.target\n")


def install_gpu_devices(spec: NodeSpec) -> None:
    """Into a node's root file system before its first boot."""
    count = gpu_count(spec)
    if count == 0:
        return
    unit = spec.root / "etc/systemd/system" / GPU_DEVICES_UNIT
    unit.write_text(gpu_devices_unit(count))
    wants = spec.root / "etc/systemd/system/sysinit.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / GPU_DEVICES_UNIT
    if not link.is_symlink():
        link.symlink_to(f"/etc/systemd/system/{GPU_DEVICES_UNIT}")


def site_dir() -> Path:
    """Where the lab keeps the cluster's site files: beside its other state, never inside
    inventories/lab (Ansible reads every file of an inventory folder as a source: an INI
    slurm.conf there became hosts named `SlurmdPidFile=/run/slurmd.pid`)."""
    return config.STATE_DIR / "slurm"


def slurm_conf_file() -> Path:
    return site_dir() / "slurm.conf"


def suite_archive_file() -> Path:
    return site_dir() / "validation-suite.tar.gz"


def write_site_files(specs: list[NodeSpec]) -> Path:
    """site_dir(): slurm.conf and the suite archive the nodes' health gate runs (the munge
    key goes into the vault); the lab inventory points at them."""
    from rackready.remote import bundle

    out = site_dir()
    out.mkdir(parents=True, exist_ok=True)
    slurm_conf_file().write_text(slurm_conf(specs))
    suite_archive_file().write_bytes(bundle.build()[0])
    return out


def up(base: Path, specs: list[NodeSpec], progress) -> str:
    """Create and boot lab-slurm unless it runs; returns its known_hosts line."""
    if nodes.pid_of(SPEC) is not None:
        algo, blob = (SPEC.root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()[:2]
        return f"{SPEC.name},{SPEC.ip} {algo} {blob}"
    progress(f"{SPEC.name}: Slurm controller (slurmctld, munge) at {SPEC.ip}")
    line = nodes.create(SPEC, base, specs)
    network.ensure_node_network(SPEC)
    nodes.boot(SPEC, [])
    return line


def configure(specs: list[NodeSpec]) -> None:
    """Once lab-slurm answers SSH: install slurmctld from the lab mirror with the cluster's
    munge key and slurm.conf, and (re)start it. The files are written into its root file
    system from here, so the key is never on a command line; munge's package keeps a key
    that is already there."""
    root = SPEC.root
    for sub, text, mode in (("etc/slurm/slurm.conf", slurm_conf(specs).encode(), 0o644),
                            ("etc/munge/munge.key", munge_key(), 0o400)):
        path = root / sub
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(text)
    nodes.wait_for_ssh(SPEC)
    nodes.ssh(SPEC, (
        "set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq; "
        f"apt-get install -y -qq --no-install-recommends {' '.join(PACKAGES)} >/dev/null; "
        "install -d -o slurm -g slurm -m 0755 /var/log/slurm /var/lib/slurm/slurmctld; "
        "chown munge:munge /etc/munge/munge.key; "
        "systemctl enable -q munge slurmctld; systemctl restart munge slurmctld"))
    _wait_for_slurmctld()


def _wait_for_slurmctld(timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if nodes.ssh(SPEC, "scontrol ping | grep -q UP", check=False).returncode == 0:
            return
        if time.monotonic() > deadline:
            last = nodes.ssh(SPEC, "tail -n 1 /var/log/slurm/slurmctld.log", check=False)
            raise EnvironmentProblem(f"{SPEC.name}: slurmctld not up after {timeout_s:.0f}s: "
                                     f"{last.stdout.strip() or 'see its slurmctld.log'}")
        time.sleep(1)


def down() -> None:
    nodes.stop(SPEC)
    network.remove_node_network(SPEC)
    munge_key_file().unlink(missing_ok=True)
    shutil.rmtree(site_dir(), ignore_errors=True)

