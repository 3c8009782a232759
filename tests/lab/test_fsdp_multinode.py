"""The reference FSDP job across two lab nodes, as a rack runs it: one process per
node, started by torchrun's c10d rendezvous over the lab network (CPU, gloo, tiny
shape). Its loss curve must match the golden curve recorded for two ranks on one
machine: the same arithmetic, whether the ranks share a host or not.
"""

from __future__ import annotations

import json
import shlex
from concurrent.futures import ThreadPoolExecutor

import pytest

from rackready.remote import bundle, ssh
from rackready.remote.runner import build_remote_command, run_command
from rackready.remote.session import ship_bundle
from rackready.run.rundir import new_run_id
from rackready.site import inventory
from rackready.steps.validate import NODE_BASE, NODE_VENV
from validation.profile import load_profile

pytestmark = pytest.mark.lab

OUT = "/var/tmp/fsdp-multinode"


def _torchrun(rank: int, endpoint: str, bundle_dir: str, rdzv_id: str = "rr-lab-test") -> str:
    args = [
        f"{NODE_VENV}/bin/python", "-m", "torch.distributed.run",
        "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(rank),
        "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id,
        "-m", "validation.workloads.fsdp_train", "--device", "cpu", "--shape", "tiny",
        "--seq", "128", "--steps", "16", "--out", OUT,
    ]
    return (f"rm -rf {OUT} && cd {shlex.quote(bundle_dir)} && "
            f"GLOO_SOCKET_IFNAME=host0 NCCL_NVLS_ENABLE=0 "
            f"timeout --kill-after=15 300 {shlex.join(args)}")


def _run(client, command: str, timeout_s: float):
    return run_command(client, command, timeout_s=timeout_s, idle_s=timeout_s,
                       max_stdout=16 << 20, max_stderr=16 << 20)


def test_fsdp_job_over_two_nodes_matches_the_golden_curve(provisioned_lab):
    nodes = [inventory.find(n, "lab") for n in ("lab-gpu01", "lab-gpu02")]
    payload = bundle.build()
    clients = [ssh.connect(n) for n in nodes]
    try:
        # the same verified bundle the suite runs from, in a run folder of its own
        dirs = [ship_bundle(c, payload, remote_base=NODE_BASE, run_id=new_run_id("fsdp"),
                            become=n.become) for c, n in zip(clients, nodes, strict=True)]
        endpoint = f"{nodes[0].address}:29400"
        with ThreadPoolExecutor(2) as pool:
            # as root through sudo where the inventory says so, like the suite
            rdzv_id = new_run_id("rdzv")  # the rack step's way: one rendezvous per run
            jobs = [build_remote_command(_torchrun(i, endpoint, dirs[i], rdzv_id),
                                         become=nodes[i].become) for i in range(2)]
            runs = list(pool.map(lambda i: _run(clients[i], jobs[i], 360), range(2)))
        for rank, res in enumerate(runs):
            assert res.rc == 0, f"rank {rank} rc {res.rc} {res.problem}: {res.err[-2000:]}"
        text = _run(clients[0], f"cat {OUT}/fsdp_train.rank0.jsonl", 60).out
    finally:
        for c in clients:
            c.close()
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    losses = {int(r["labels"]["step"]): r["value"] for r in records if r["name"] == "fsdp.loss"}
    world = {r["labels"].get("world") for r in records if r["name"] == "fsdp.tokens_per_s_per_gpu"}
    assert world == {"2"}
    golden = load_profile("xe9680-h200-lab").inventory["fsdp_golden"]["tiny"]["loss"]
    deviation = max(abs(losses[int(step)] - loss) for step, loss in golden.items())
    assert deviation <= 0.002, (losses, golden)
