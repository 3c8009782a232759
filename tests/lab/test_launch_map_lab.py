"""The launch map as the customer gets it, run: on lab-gpu01 (XE9680-like, 8 GPUs, RoCE)
the suite's pcie.launch_map check measures the node, the report turns its result into
bind.sh (rackready.report.launch_map, what the node report prints), and real torchrun
starts 8 ranks through it. Each rank is a stand-in for a trainer that drives
`cuda:LOCAL_RANK`: it reports the physical GPU that device is (CUDA numbers
CUDA_VISIBLE_DEVICES from 0), its NIC, the RoCE settings and its CPUs, binds itself as the
suite's workloads do (validation.workloads.binding) from the same map, and joins a gloo
all_reduce. hwsim simulates the GPUs (nothing here opens one) and a 224-CPU board the
container does not have: the map's CPU shares are checked as refused by name there, and
taken for real by a second, 2-rank run whose shares are the node's own CPUs.
Unit tests of bind.sh without a node: tests/unit/node/test_launch_map.py.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import shlex

import pytest

from rackready.remote import bundle, ssh
from rackready.remote.session import ship_bundle
from rackready.report.launch_map import from_result
from rackready.run.rundir import new_run_id
from rackready.site import inventory
from rackready.steps.validate import NODE_BASE, NODE_VENV, suite_sites
from rackready_lab import nodes
from validation.launch_map import LaunchMap, cpulist, parse_cpulist, split_cpus

pytestmark = pytest.mark.lab

NODE = "lab-gpu01"
WORK = "/var/tmp/launch-map-lab"
KEYS = ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES", "NCCL_IB_HCA", "NCCL_IB_TC",
        "NCCL_IB_GID_INDEX")

# One rank: what `cuda:LOCAL_RANK` would open, its NIC and CPUs as bind.sh left them, then
# the same after the workloads' own binding from the check's map, and a gloo all_reduce.
PROBE = f"""import json, os, sys
import torch, torch.distributed as dist
from validation import launch_read
from validation.workloads import binding
r = int(os.environ["LOCAL_RANK"])
def seen():
    return {{"env": {{k: os.environ.get(k) for k in {KEYS!r}}},
            "gpu": int(os.environ["CUDA_VISIBLE_DEVICES"].split(",")[r]),
            "cpus": sorted(os.sched_getaffinity(0))}}
rec = {{"rank": r, "bind_sh": seen()}}
binding.apply(r, launch_read.load(sys.argv[1]))
rec["workload"] = seen()
dist.init_process_group("gloo")
t = torch.tensor([float(r + 1)])
dist.all_reduce(t)
rec["sum"] = t.item()
with open(f"{{sys.argv[2]}}/rank{{r}}.json", "w") as fh:
    fh.write(json.dumps(rec) + "\\n")
dist.destroy_process_group()  # gloo's threads end before the interpreter does
"""


def _put(spec, path: str, text: str, mode: str = "644") -> None:
    blob = base64.b64encode(text.encode()).decode()
    nodes.ssh(spec, f"echo {blob} | base64 -d > {path} && chmod {mode} {path}")


def _launch(spec, bundle_dir: str, script: str, nproc: int, out: str):
    """torchrun on the node: nproc ranks, each through bind.sh, as the report says."""
    _put(spec, f"{WORK}/bind.sh", script, "755")
    cmd = (f"rm -rf {out} && mkdir -p {out} && cd {WORK} && "
           f"PYTHONPATH={shlex.quote(bundle_dir)} timeout --kill-after=5 90 "
           f"{NODE_VENV}/bin/python -m torch.distributed.run --standalone "
           f"--nproc-per-node {nproc} --no-python ./bind.sh {NODE_VENV}/bin/python "
           f"probe.py {WORK}/out/artifacts/launch-map.json {out} && cat {out}/rank*.json")
    done = nodes.ssh(spec, cmd, check=False)
    why = [ln for ln in done.stderr.splitlines()
           if ("Error" in ln and "ChildFailedError" not in ln) or "bind.sh:" in ln]
    assert done.returncode == 0, "\n".join(why[-12:]) or done.stderr[-2500:]
    ranks = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(ranks) == nproc, done.stdout
    return sorted(ranks, key=lambda x: x["rank"]), done.stderr


def test_torchrun_through_bind_sh_gives_each_rank_its_mapped_gpu_nic_and_cpus(
        provisioned_lab):
    spec = provisioned_lab.spec(NODE)
    node = inventory.find(NODE, "lab")
    site = suite_sites("lab")[NODE]
    client = ssh.connect(node)
    try:
        bundle_dir = ship_bundle(client, bundle.build(), remote_base=NODE_BASE,
                                 run_id=new_run_id("launchmap"), become=node.become)
    finally:
        client.close()
    nodes.ssh(spec, f"rm -rf {WORK} && mkdir -p {WORK}")
    _put(spec, f"{WORK}/site.yml", json.dumps(site))  # JSON is YAML
    _put(spec, f"{WORK}/probe.py", PROBE)
    # the suite's check measures the node, as a validate run does
    check = nodes.ssh(spec, (
        f"cd {shlex.quote(bundle_dir)} && {NODE_VENV}/bin/python -m validation run "
        f"--profile {node.profile} --level quick --sysroot {node.sysroot} "
        f"--only pcie.launch_map --without raid --out {WORK}/out --site {WORK}/site.yml "
        f">/dev/null && cat {WORK}/out/result.json"), check=False)
    assert check.returncode == 0, check.stderr[-2000:]
    snippets = from_result(json.loads(check.stdout), site)  # the node report's
    assert snippets is not None
    lmap = LaunchMap.from_dict({"ranks": [
        {**r, "cpus": parse_cpulist(r["cpus"]), "nic": r["nic"] or None,
         "numa": r["numa"] or None} for r in snippets["ranks"]]})
    n = len(lmap.ranks)
    assert n == 8

    ranks, err = _launch(spec, bundle_dir, snippets["torchrun"], n, f"{WORK}/run8")
    allowed = ranks[0]["bind_sh"]["cpus"]  # the container's own CPUs, unbound
    for b, got in zip(lmap.ranks, ranks, strict=True):
        sh = got["bind_sh"]
        assert sh["gpu"] == b.gpu, (b.rank, sh)  # cuda:LOCAL_RANK is the mapped GPU
        assert sh["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                             "CUDA_VISIBLE_DEVICES": ",".join(str(x.gpu) for x in lmap.ranks),
                             "NCCL_IB_HCA": f"={b.nic}:1", "NCCL_IB_TC": "104",
                             "NCCL_IB_GID_INDEX": "3"}
        # the simulated board's CPUs are not the container's: refused by name, unbound
        assert not set(b.cpus) <= set(allowed) and sh["cpus"] == allowed
        assert f"local rank {b.rank} runs without its CPU share {cpulist(b.cpus)}" in err
        # the suite's workloads bind the rank the same way from the same map
        assert got["workload"] == sh
        assert got["sum"] == n * (n + 1) / 2  # every rank in one gloo all_reduce

    # the CPU step for real: two ranks, each given one half of the node's own CPUs
    shares = split_cpus(allowed, 2)
    assert all(shares), f"the node has {len(allowed)} CPU(s): two shares need two"
    real = LaunchMap(tuple(dataclasses.replace(b, cpus=tuple(shares[b.rank]))
                           for b in lmap.ranks[:2]))
    _put(spec, f"{WORK}/out/artifacts/launch-map.json", json.dumps(real.to_dict()))
    script = from_result({"checks": [{"check": "pcie.launch_map", "measurements": [
        {"name": "launch.rank_binding", "labels": {
            "rank": str(b.rank), "gpu": str(b.gpu), "nic": b.nic, "path": b.path,
            "numa": str(b.numa), "cpus": cpulist(b.cpus)}} for b in real.ranks]}]},
        site)
    assert script is not None
    ranks, err = _launch(spec, bundle_dir, script["torchrun"], 2, f"{WORK}/run2")
    for b, got in zip(real.ranks, ranks, strict=True):
        assert got["bind_sh"]["cpus"] == list(b.cpus) == got["workload"]["cpus"], got
        assert got["sum"] == 3
    assert "runs without its CPU share" not in err
    assert f"--gpus-per-node={n}" in snippets["slurm"]  # Slurm asks for the node's GPUs
