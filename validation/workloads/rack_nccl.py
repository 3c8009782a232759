"""Rack-level step: an all_reduce across every node of one fabric, then every pair of
nodes rail by rail, to find the one weak link. Started on every node by the
controller (rackready.steps.rack; judged in rackready.decide.rack) through torchrun with a
rendezvous on the first:

    torchrun --nnodes N --nproc-per-node R --rdzv-backend c10d --rdzv-endpoint H:P \
        -m validation.workloads.rack_nccl --name NODE --rails BDF,BDF,... --out DIR

Real nodes (--device cuda): one process per rail (local rank r drives only rail r's NIC,
NCCL_IB_HCA=<nic>, from the GPU beside that NIC and with that GPU's CPUs, as the node's
launch map says: validation/launch_map.py; GPU r where no map can be read), NCCL over
IB/RoCE. Pairs run in rounds (the circle
method: n-1 rounds of disjoint pairs, so O(n) rounds cover every pair); in a round
every rail of every pair sends and receives at once.

Lab (--device cpu --simulated-rails): one process per node; each SIMULATED rail is a
gloo exchange over the lab network, rail after rail. hwsim's port state decides
whether the rail carries traffic: a port that is not Active (on either end) refuses
the rail (0 GB/s, the port named), as NCCL restricted to that NIC cannot use it; a
port that trained below its line rate moves the buffer rate/line times per step.

A port that is not Active is never driven, on real nodes either: its rail is
reported refused with the port's state, from `ibstat`.
"""

from __future__ import annotations

import functools
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from validation.launch_map import RankBinding, cpulist
from validation.workloads.busbw import algbw_gbps, busbw_factor
from validation.workloads.common import (
    Dist,
    Sink,
    UsageError,
    base_parser,
    exit_process,
    finish,
    init,
    median_time,
    run_main,
)

IB_CLASS = "sys/class/infiniband"
# A simulated rail below its line rate is slowed by repeating the transfer; capped so a
# 10 Gb/s port does not hold the lab for minutes (it still measures far below the floor).
MAX_SLOWDOWN = 16


def rounds(n: int) -> list[list[tuple[int, int]]]:
    """Every unordered pair of n nodes once, in n-1 (n even) or n (n odd) rounds of
    disjoint pairs: the circle method (one node fixed, the others rotate)."""
    ids: list[int | None] = list(range(n)) + ([None] if n % 2 else [])
    m = len(ids)
    out = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = ids[i], ids[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        out.append(sorted(pairs))
        ids = [ids[0], ids[-1], *ids[1:-1]]
    return out


def ca_names(sysroot: Path) -> dict[str, str]:
    """PCI address -> HCA name, from the sysfs `device` links (as validation's checks)."""
    base = sysroot / IB_CLASS
    out = {}
    if base.is_dir():
        for ca in sorted(base.iterdir()):
            dev = ca / "device"
            if dev.exists():
                out[os.path.basename(os.path.realpath(dev)).lower()] = ca.name
    return out


def port_states(ibstat_text: str) -> dict[str, tuple[str | None, float | None]]:
    """HCA -> (port 1 state, rate Gb/s) from `ibstat`."""
    from validation.probes.rdma import parse_ibstat

    out = {}
    for ca in parse_ibstat(ibstat_text):
        port = next((p for p in ca.ports if p.port == 1), ca.ports[0] if ca.ports else None)
        out[ca.name] = (port.state, port.rate_gbps) if port else (None, None)
    return out


def rail_table(rails: list[str], sysroot: Path, ibstat_text: str) -> list[dict[str, Any]]:
    """This node's rails in order: PCI address, HCA name, port state and rate."""
    names = ca_names(sysroot)
    states = port_states(ibstat_text)
    table = []
    for i, bdf in enumerate(rails):
        nic = names.get(bdf.lower())
        state, rate = states.get(nic, (None, None)) if nic else (None, None)
        table.append({"rail": i, "bdf": bdf, "nic": nic, "state": state, "rate": rate})
    return table


def refusal(node_a: str, ra: dict[str, Any], node_b: str, rb: dict[str, Any]) -> str:
    """Why a rail cannot carry traffic ('' when both ports are up)."""
    why = []
    for node, r in ((node_a, ra), (node_b, rb)):
        if r["nic"] is None:
            why.append(f"{node} has no HCA at {r['bdf']}")
        elif r["state"] != "Active":
            why.append(f"{node} {r['nic']} port {r['state'] or 'unknown'}")
    return "; ".join(why)


def slowdown(ra: dict[str, Any], rb: dict[str, Any], line_rate: float) -> int:
    """Repeats per step for a simulated rail below its line rate (1: full rate)."""
    rates = [r["rate"] for r in (ra, rb) if r["rate"]]
    if not rates or min(rates) >= line_rate:
        return 1
    return min(MAX_SLOWDOWN, math.ceil(line_rate / min(rates)))


def rail_binding(nic: str, sysroot: Path, table: list[dict[str, Any]]) -> RankBinding | None:
    """Rail `nic`'s place in this node's launch map (the GPU beside the NIC, its CPUs),
    applied to this process; None where the map cannot be read (GPU r drives rail r)."""
    from validation import launch_read
    from validation.workloads import binding

    def run(cmd: list[str]) -> str:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True)
        return done.stdout

    try:
        lmap = launch_read.read(run, sysroot,
                                compute_nics={r["nic"] for r in table if r["nic"]})
    except Exception as e:  # noqa: BLE001  no map: the rail runs as before, said in the log
        print(f"launch map: not available ({e}); rail {nic} runs on GPU LOCAL_RANK",
              file=sys.stderr)
        return None
    b = lmap.for_nic(nic)
    if b is not None:  # CUDA device b.rank is then b's GPU (every GPU visible, map order)
        binding.apply(b.rank, lmap)
    return b


def _ibstat() -> str:
    try:
        done = subprocess.run(["ibstat"], capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def _exchange(d: Dist, peer: int, send: torch.Tensor, recv: torch.Tensor, repeat: int
              ) -> None:
    for _ in range(repeat):
        reqs = [dist.isend(send, peer), dist.irecv(recv, peer)]
        for r in reqs:
            assert r is not None  # None only for a rank outside the group: never the default
            r.wait()


def _slower(d: Dist, peer: int, t: float) -> float:
    """The slower end's time, so both ends of an honest link report the same rate."""
    mine = torch.tensor([t], dtype=torch.float64, device=d.device)
    theirs = torch.empty_like(mine)
    _exchange(d, peer, mine, theirs, 1)
    return max(t, float(theirs.item()))


def all_reduce_step(d: Dist, sink: Sink, size: int, nodes: list[str], warmup: int,
                    iters: int, repeats: int) -> None:
    numel = size // 4
    # small integers: float32 sums them exactly, so every rank can check the answer
    x = torch.full((numel,), float(d.rank % 7 + 1), device=d.device)
    dist.all_reduce(x)
    want = float(sum(r % 7 + 1 for r in range(d.world)))
    ok = torch.tensor([int(bool(torch.all(x == want)))], device=d.device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    t = median_time(d, lambda: dist.all_reduce(x), warmup=warmup, iters=iters,
                    repeats=repeats)
    tt = torch.tensor([t], device=d.device, dtype=torch.float64)
    dist.all_reduce(tt, op=dist.ReduceOp.MAX)  # the slowest rank's time, as nccl-tests
    if d.rank == 0:
        lab = {"ranks": d.world, "nodes": ",".join(nodes), "size_bytes": numel * 4}
        bus = algbw_gbps(numel * 4, float(tt.item())) * busbw_factor("all_reduce", d.world)
        sink.emit("rack.allreduce_busbw", round(bus, 4), "GB/s", **lab)
        sink.emit("rack.allreduce_correct", bool(ok.item()), "", **lab)


def pairwise_step(d: Dist, sink: Sink, info: list[dict[str, Any]], per_node: int,
                  size: int, simulated: bool, line_rate: float, warmup: int, iters: int,
                  repeats: int) -> None:
    node_of = [i["node"] for i in info[::per_node]]
    me = d.rank // per_node
    send = torch.ones(size // 4, device=d.device)
    recv = torch.empty_like(send)
    for k, pairs in enumerate(rounds(len(node_of))):
        dist.barrier()
        pair = next((p for p in pairs if me in p), None)
        if pair is None:
            continue  # this node sits the round out (odd count)
        a, b = pair
        peer_node = b if me == a else a
        ra_all, rb_all = info[a * per_node]["rails"], info[b * per_node]["rails"]
        n_rails = min(len(ra_all), len(rb_all))
        # one process per rail on real nodes; the lab's one process walks its rails
        mine = range(n_rails) if per_node == 1 else (
            [d.local_rank] if d.local_rank < n_rails else [])
        for r in mine:
            ra, rb = ra_all[r], rb_all[r]
            peer = peer_node * per_node + (0 if per_node == 1 else r)
            why = refusal(node_of[a], ra, node_of[b], rb)
            labels: dict[str, Any] = {
                "node_a": node_of[a], "node_b": node_of[b], "rail": r,
                "nic_a": ra["nic"] or ra["bdf"], "nic_b": rb["nic"] or rb["bdf"],
                "size_bytes": send.numel() * 4, "round": k}
            if simulated:
                labels["simulated"] = "gloo over the lab network, gated by hwsim port state"
            # both ends report the link: the controller judges it only when they agree
            if why:
                sink.emit("rack.pair_busbw", 0.0, "GB/s", **labels, refused=why)
                continue
            rep = slowdown(ra, rb, line_rate) if simulated else 1
            t = median_time(d, functools.partial(_exchange, d, peer, send, recv, rep),
                            warmup=warmup, iters=iters, repeats=repeats)
            t = _slower(d, peer, t)
            sink.emit("rack.pair_busbw", round(algbw_gbps(send.numel() * 4, t), 4),
                      "GB/s", **labels)
    dist.barrier()


def _size(text: str) -> int:
    from validation.workloads.collectives import parse_sizes

    return parse_sizes(text)[0]


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--name", required=True, help="this node's name in the inventory")
    p.add_argument("--rails", default="",
                   help="compute NIC PCI addresses in rail order (rdma_network_mlx_devices)")
    p.add_argument("--sysroot", default="/", type=Path, help="root for sysfs (hwsim in the lab)")
    p.add_argument("--simulated-rails", action="store_true",
                   help="lab: rails are gloo exchanges gated by the simulated port state")
    p.add_argument("--line-rate-gbps", type=float, default=400.0,
                   help="a rail's line rate (profile nic.rate_gbps)")
    p.add_argument("--pair-size", default="64M", help="bytes each way per pair and rail")
    p.add_argument("--allreduce-size", default="256M", help="all_reduce bytes")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    rails = [r for r in a.rails.split(",") if r]
    table = rail_table(rails, a.sysroot, _ibstat())
    local = int(os.environ.get("LOCAL_RANK", "0"))
    bound = None
    if a.device == "cuda" and local < len(table) and table[local]["nic"]:
        # this process drives only its own rail's NIC (exact name, port 1), from the GPU
        # beside that NIC and that GPU's CPUs (the launch map); without a map, GPU r
        bound = rail_binding(table[local]["nic"], a.sysroot, table)
        os.environ["NCCL_IB_HCA"] = f"={table[local]['nic']}:1"
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if a.simulated_rails and per_node != 1:
        raise UsageError("--simulated-rails runs one process per node (--nproc-per-node 1)")
    d = init(a.device, gpu=bound.rank if bound else local)
    if d.world % per_node:
        raise UsageError(f"world {d.world} is not a multiple of {per_node} processes per node")
    info: list[Any] = [None] * d.world
    dist.all_gather_object(info, {"node": a.name, "rails": table})
    nodes = [i["node"] for i in info[::per_node]]
    sink = Sink(a.out, "rack_nccl", d.rank)
    if bound is not None:  # kept in the rack step's output: which GPU and CPUs drove the rail
        sink.emit("rack.binding", bound.gpu, "", node=a.name, rail=local,
                  nic=table[local]["nic"], gpu=bound.gpu, path=bound.path,
                  cpus=cpulist(bound.cpus))
    all_reduce_step(d, sink, _size(a.allreduce_size), nodes, a.warmup, a.iters, a.repeats)
    pairwise_step(d, sink, info, per_node, _size(a.pair_size), a.simulated_rails,
                  a.line_rate_gbps, a.warmup, a.iters, a.repeats)
    sink.close()
    finish()
    return 0


if __name__ == "__main__":
    exit_process(run_main(main))
