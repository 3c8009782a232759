"""The rack-level step of `invoke validate --inventory`, its running half: after the node
suites, the nodes of each fabric run validation.workloads.rack_nccl together (an
all_reduce across all of them, then every pair rail by rail) through torchrun over SSH,
bounded as the suite is (RACK_LIMITS); rackready.decide.rack judges what they measured.

A node that was unreachable or whose suite did not complete is left out with its
reason (decide.rack.groups). The record goes to <run>/_rack/rack.json through the run
store; decide carries its verdicts into the nodes' judgements and the rack's.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from rackready.decide.node import controller_profile
from rackready.decide.rack import (
    PAIR_METRIC,
    SENDER,
    FabricMembers,
    Floors,
    groups,
    judge_group,
)
from rackready.decide.records import Judgement, RackGroup, RackStep
from rackready.remote import session, ssh
from rackready.remote.result_shape import is_scalar
from rackready.remote.runner import CommandResult, build_remote_command, run_command
from rackready.remote.slurm import SlurmError
from rackready.run.rundir import RunDir, now_iso
from rackready.sanitize import one_line, replace_surrogates_in

RDZV_PORT = 29401

OUT = "/var/tmp/rackready-rack"

# Workload sizes: the lab moves a few MiB over one veth; real rails 64/256 MiB.
SIZES = {"cpu": ("4M", "4M", "1", "3", "3"), "cuda": ("64M", "256M", "5", "20", "3")}

# Seconds the whole workload may take on a node (a peer that never joins the rendezvous
# must not hold the run for long): the lab's tiny sizes, or real rails.
TIMEOUT_S = {"cpu": 240, "cuda": 600}


@dataclass(frozen=True)
class RackLimits:
    """What the step's remote commands may send back and how long they may take (the
    node is untrusted here too: rackready.remote.runner.run_command enforces them)."""

    max_stdout: int = 8 << 20  # the workload's stdout (only logged): over it, stopped
    max_stderr: int = 8 << 20  # its stderr: the rest dropped, its end kept
    max_records: int = 16 << 20  # the measurement lines read back (a few KiB per link)
    grace_s: float = 60  # past the workload's own `timeout` (TIMEOUT_S), for its kill
    idle_s: float = 300  # no byte for this long: stopped (NCCL init that hangs)
    command_s: float = 120  # reading the measurements back


RACK_LIMITS = RackLimits()


def parse_records(text: str, problems: list[str], node: str) -> list[dict[str, Any]]:
    """The workload's JSON lines (untrusted): well-formed, finite, named; else counted."""
    out, bad = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
            rec = replace_surrogates_in(rec)  # valid JSON, but no text a report can write
            if not isinstance(rec, dict):
                raise TypeError("not an object")
            ok = (isinstance(rec.get("name"), str)
                  and isinstance(rec.get("labels"), dict)
                  # label values are names and numbers: they key tables and fill messages
                  and all(isinstance(v, str | int | float) and is_scalar(v)
                          for v in rec["labels"].values())
                  and (isinstance(rec.get("value"), bool) or (
                      isinstance(rec.get("value"), int | float)
                      and math.isfinite(rec["value"]))))
            if rec.get("name") == PAIR_METRIC:
                ok = ok and all(k in rec["labels"]
                                for k in ("node_a", "node_b", "rail", "nic_a", "nic_b"))
                ok = ok and str(rec["labels"]["rail"]).isdigit()
        except (ValueError, TypeError):
            ok = False
        if ok:
            out.append(rec)
        else:
            bad += 1
    if bad:
        problems.append(f"{node}: {bad} unusable rack measurement line(s) skipped")
    return out


def _torchrun(node, rank: int, nnodes: int, endpoint: str, run_id: str, bundle_dir: str,
              device: str, rails: list[str], simulated: bool, line_rate: float,
              socket_ifname: str | None, venv: str) -> str:
    pair, allr, warm, iters, reps = SIZES[device]
    nproc = "1" if device == "cpu" else str(max(1, len(rails)))
    args = [f"{venv}/bin/python", "-m", "torch.distributed.run",
            "--nnodes", str(nnodes), "--nproc-per-node", nproc, "--node-rank", str(rank),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id,
            "-m", "validation.workloads.rack_nccl", "--device", device, "--name", node.name,
            "--rails", ",".join(rails), "--sysroot", node.sysroot,
            "--line-rate-gbps", str(line_rate), "--pair-size", pair,
            "--allreduce-size", allr, "--warmup", warm, "--iters", iters, "--repeats", reps,
            "--out", OUT]
    if simulated:
        args.append("--simulated-rails")
    env = {"PYTHONUNBUFFERED": "1"}
    if socket_ifname:  # the lab's one network, for gloo and NCCL's bootstrap alike
        env |= {"GLOO_SOCKET_IFNAME": socket_ifname, "NCCL_SOCKET_IFNAME": socket_ifname}
    assign = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    # --kill-after: torchrun's agent, waiting in a rendezvous whose peer never came, outlived
    # timeout's SIGTERM by minutes in the lab; SIGKILL follows 15 s later
    return (f"rm -rf {OUT} && mkdir -p {OUT} && cd {shlex.quote(bundle_dir)} && "
            f"{assign} timeout --kill-after=15 {TIMEOUT_S[device]} {shlex.join(args)}")


def run_group(run: RunDir, key: str, group: FabricMembers, nodes: dict[str, Any],
              profiles: dict[str, Any], bundle_payload: tuple[bytes, str],
              venv_of, nccl_env_of, progress=lambda msg: None,
              allocation=None) -> RackGroup:
    """Run the workload on the group's members and judge it. allocation (--via slurm):
    (members, seconds) -> a context whose value turns (node, command) into (client,
    command): the workload then runs as tasks of one Slurm allocation."""
    members = list(group["members"])
    floors = {n: Floors.of(profiles[n]) for n in members if profiles.get(n) is not None}
    rails = {n: list(nodes[n].rdma_devices) for n in members}
    counts = {n: len(r) for n, r in rails.items()}
    problems: list[str] = []
    records: list[dict[str, Any]] = []
    if len(group["planned"]) < 2 or len(members) < 2:
        return judge_group(key, group["planned"], members, group["left_out"], [], floors,
                           [] if len(group["planned"]) < 2 else
                           ["fewer than two nodes can take part"], counts)
    run.prepare_rack_group(key)
    lead = run.plan.node(members[0]) if run.plan else None
    site = dict(lead.site) if lead is not None else {}
    device = str((site.get("workloads") or {}).get("device") or "cuda")
    rack_site = given if isinstance(given := site.get("rack"), dict) else {}
    simulated = any(getattr(profiles.get(n), "simulated", False) for n in members)
    line_rate = min(float(((profiles[n].inventory.get("nic") or {}).get("rate_gbps")) or 400)
                    for n in members if profiles.get(n) is not None)
    # its own remote run folder, new on every attempt (a resumed run re-runs the step)
    stamp = _safe(now_iso().replace(":", "").replace("-", "").replace("+", ""))
    run_id = f"{run.plan.run_id if run.plan else 'rack'}-rack-{_safe(key)}-{stamp}"[-127:]
    endpoint = f"{nodes[members[0]].address}:{int(rack_site.get('rdzv_port') or RDZV_PORT)}"
    clients: dict[str, Any] = {}
    try:
        for n in members:
            try:
                clients[n] = ssh.connect(nodes[n])
            except Exception as exc:  # noqa: BLE001  recorded, never raised
                problems.append(one_line(f"{n}: unreachable for the rack step: {exc}"))
        if problems:
            return judge_group(key, group["planned"], members, group["left_out"], [], floors,
                               problems, counts)
        progress(f"rack step on fabric {key}: shipping the bundle to {len(members)} nodes")
        dirs = {}
        for n in members:
            try:
                dirs[n] = session.ship_bundle(clients[n], bundle_payload,
                                              remote_base=session.NODE_BASE,
                                              run_id=run_id, become=nodes[n].become)
            except session.SessionError as exc:
                problems.append(one_line(f"{n}: bundle: {exc}"))
        if problems:
            return judge_group(key, group["planned"], members, group["left_out"], [], floors,
                               problems, counts)
        progress(f"rack step on fabric {key}: all_reduce and pairwise over "
                 f"{'gloo (lab, SIMULATED rails)' if device == 'cpu' else 'NCCL'}")

        def one(i: int):
            n = members[i]
            script = _torchrun(nodes[n], i, len(members), endpoint, run_id, dirs[n], device,
                               rails[n], simulated, line_rate,
                               rack_site.get("socket_ifname"), venv_of(nodes[n]))
            given = nccl_env_of(nodes[n])
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in given.items())
            # the node's rack log opens with the NCCL settings it ran under (NCCL_IB_TC,
            # NCCL_IB_GID_INDEX on RoCE: validation.workloads.common_env.roce_env)
            said = shlex.quote("# nccl env: " + (" ".join(f"{k}={v}" for k, v in
                                                          sorted(given.items())) or "(none set)"))
            cmd = build_remote_command(f"echo {said}; " + (f"export {env}; " if env else "")
                                       + script, become=nodes[n].become)
            lim = RACK_LIMITS
            client = clients[n]
            if as_task is not None:  # a task of the run's Slurm allocation, on that node
                client, cmd = as_task(n, cmd)
            return _remote(client, cmd, TIMEOUT_S[device] + lim.grace_s, lim.max_stdout)

        try:
            with (allocation(members, TIMEOUT_S[device] + RACK_LIMITS.grace_s)
                  if allocation else nullcontext(None)) as as_task, \
                    ThreadPoolExecutor(len(members)) as pool:
                results = list(pool.map(one, range(len(members))))
        except SlurmError as exc:
            return judge_group(key, group["planned"], members, group["left_out"], [], floors,
                               [one_line(f"Slurm allocation for the rack step: {exc}")],
                               counts)
        for n, res in zip(members, results, strict=True):
            run.write_rack_output(key, n, ".log", res.out + res.err)
            if res.problem:
                problems.append(one_line(f"{n}: rack workload: {res.problem}", 300))
            elif res.rc != 0:
                err = res.err.strip()
                tail = one_line(err.splitlines()[-1] if err else "", 200)
                problems.append(f"{n}: rack workload exited {res.rc}"
                                + (f": {tail}" if tail else ""))
            got = _remote(clients[n], build_remote_command(
                f"cat {OUT}/rack_nccl.rank*.jsonl 2>/dev/null", become=nodes[n].become),
                RACK_LIMITS.command_s, RACK_LIMITS.max_records)
            if got.problem:
                problems.append(one_line(f"{n}: reading the rack measurements: {got.problem}",
                                         300))
            run.write_rack_output(key, n, ".jsonl", got.out)
            # who sent each record: a link is judged only from its own two ends
            records += [{**r, SENDER: n} for r in parse_records(
                got.out if not got.problem else "", problems, n)]
    finally:
        for c in clients.values():
            c.close()
    return judge_group(key, group["planned"], members, group["left_out"], records, floors,
                       problems, counts)


def _remote(client, command: str, timeout_s: float, max_stdout: int):
    """One of the step's remote commands, bounded (RACK_LIMITS); never raises."""
    lim = RACK_LIMITS
    try:
        return run_command(client, command, timeout_s=timeout_s,
                           idle_s=min(lim.idle_s, timeout_s), max_stdout=max_stdout,
                           max_stderr=lim.max_stderr)
    except Exception as exc:  # noqa: BLE001  recorded, never raised
        return CommandResult(None, "", "", one_line(f"connection lost: {type(exc).__name__}: "
                                                    f"{exc}"))


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text) or "_"


def run_rack_step(run: RunDir, targets: list, judgements: Mapping[str, Judgement],
                  bundle_payload: tuple[bytes, str], venv_of, nccl_env_of,
                  progress=print, allocation=None) -> RackStep:
    """Every fabric group of the run: run, judge, write <run>/_rack/rack.json."""
    assert run.plan is not None
    nodes = {n.name: n for n in targets}
    sessions = {n: run.read_session(n) for n in nodes}
    profiles = {p.name: controller_profile(p) for p in run.plan.nodes}
    rack: RackStep = {"started": now_iso(), "groups": []}
    for key, g in groups(run.plan, judgements, sessions).items():
        g["members"] = [n for n in g["members"] if n in nodes]
        try:
            rec = run_group(run, key, g, nodes, profiles, bundle_payload, venv_of,
                            nccl_env_of, progress, allocation)
        except Exception as exc:  # noqa: BLE001  the nodes' reports must still be written
            rec = judge_group(key, g["planned"], g["members"], g["left_out"], [], {},
                              [one_line(f"controller error in the rack step: "
                                        f"{type(exc).__name__}: {exc}")], {})
        rack["groups"].append(rec)
    rack["finished"] = now_iso()
    run.write_rack(rack)
    return rack
