"""`invoke validate`: run the node-side suite over SSH on one node or a whole inventory.

The controller plans the run (rackready.run.rundir: which nodes, which level and
scope, the profile and site each must meet), runs every node in parallel
through its own session (rackready.remote.session: deadlines, caps, safe fetch),
then judges every node itself (rackready.decide.node). For an inventory, the rack-level
step follows (rackready.decide.rack: an all_reduce and every pair of nodes, rail by
rail, per fabric), its failing links join both ends' judgements, and the reports are
written. Whatever one node does, the others are judged and reported.
"""

from __future__ import annotations

import json
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rackready.decide.calibration import check_overlay, overlay_path, read_overlay
from rackready.decide.judge import judge_run
from rackready.decide.node import controller_profile, not_run
from rackready.decide.records import Judgement, RackStep
from rackready.errors import UserError
from rackready.remote import bundle, ssh
from rackready.remote import session as node_session
from rackready.remote.slurm import SlurmLaunch
from rackready.report.cli import write_reports
from rackready.run.rundir import Plan, PlannedIdentity, PlannedNode, RunDir, new_run_id, now_iso
from rackready.sanitize import one_line
from rackready.site import inventory, paths
from rackready.steps import envelope, oob, verdict_metrics
from rackready.steps import rack as rack_step
from rackready.steps.progress import Board, check_verdict
from rackready.steps.slurm_run import SlurmRun
from validation.checks.catalog import all_checks
from validation.profile import ProfileError, load_profile
from validation.workloads.common_env import roce_env
from validation.xid_catalog import XidCatalogError, parse_overrides

LEVELS = ("quick", "standard", "burnin")
VIA = ("ssh", "slurm")
# The role's default venv (tests and tools that have no inventory); a node's own comes
# from its validation_tools_venv.
NODE_VENV = paths.role_default("validation_tools", "validation_tools_venv")
NODE_BASE = node_session.NODE_BASE  # a module name of its own: tests point it elsewhere
PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class NodeRun:
    node: inventory.Node
    outcome: str = "INCOMPLETE"
    problem: str = ""
    events: int = 0
    failed_checks: list[str] = field(default_factory=list)


def run_validation(node: str | None, inventory: str = "lab", level: str = "quick",
                   out: str | None = None, formats: str = "json,html,pdf,junit",
                   only: str | None = None, resume: str | None = None,
                   nodes: list[str] | None = None, calibrating: bool = False,
                   via: str = "ssh", partition: str | None = None, drain: bool = False) -> int:
    """Validate one node, some (nodes) or all of an inventory. calibrating: judge against
    the profiles' own limits, without the site's calibration overlay (invoke calibrate).
    via slurm: each node's suite runs as a Slurm job (rackready.steps.slurm_run); drain:
    Slurm drains what failed and resumes what rackready drained and now passes."""
    if level not in LEVELS:
        raise UserError(f"--level must be one of {', '.join(LEVELS)}, not '{level}'")
    if via not in VIA:
        raise UserError(f"--via must be one of {', '.join(VIA)}, not '{via}'")
    if via != "slurm" and (drain or partition is not None):
        raise UserError("--drain and --partition go with --via slurm")
    only_checks = _only(only)
    if resume:
        run, targets = _resumed(resume, node, inventory)
        assert run.plan is not None
        level = run.plan.level
        run.plan.resumed_at.append(now_iso())
        run.save_plan()
    else:
        targets = ([_find(node, inventory)] if node
                   else [_find(n, inventory) for n in nodes] if nodes else _load(inventory))
        overlays = None if calibrating else _overlays(inventory)
        new_plan = Plan(run_id=new_run_id(inventory), inventory=inventory, level=level,
                        only=only_checks, nodes=[_planned(n, overlays) for n in targets])
        run = RunDir.create(PROJECT_ROOT / "runs", out, new_plan)

    assert run.plan is not None
    slurm = (SlurmRun.open(targets, partition=partition, drain=drain, run_id=run.plan.run_id,
                           deadline_s=node_session.LEVEL_DEADLINES[level])
             if via == "slurm" else None)
    try:
        return _validate(run, targets, level, formats, node, resume, slurm)
    finally:
        if slurm is not None:
            slurm.close()


def _validate(run: RunDir, targets: list[inventory.Node], level: str, formats: str,
              node: str | None, resume: str | None, slurm: SlurmRun | None) -> int:
    payload, digest = bundle.build()
    plan = run.plan
    assert plan is not None
    plan.bundle_sha256 = digest
    # a fresh token per node and attempt: a result kept from an earlier run never echoes it
    plan.nonces.update({n.name: secrets.token_hex(16) for n in targets})
    run.save_plan()
    board = Board([n.name for n in targets], judges=_board_judges(plan))
    runs = [NodeRun(n) for n in targets]
    extra = (["--only", ",".join(plan.only)] if plan.only else []) + (
        ["--resume"] if resume else [])

    def one(r: NodeRun) -> None:
        if slurm is not None and r.node.name in slurm.left_out:
            _left_out(run, r, board, slurm.left_out[r.node.name])
            return
        # the BMC is sampled while the suite runs: the envelope under the burn-in's load
        sampler = envelope.Sampler(r.node).start()
        launch = slurm.launch(r.node.name) if slurm is not None else None
        try:
            _run_node(run, r, level, (payload, digest), board, extra, resuming=bool(resume),
                      launch=launch)
        finally:
            sampled = sampler.stop()
            if slurm is not None and launch is not None:
                slurm.ran(launch)
        _run_oob(run, r, board, sampled)

    with ThreadPoolExecutor(max_workers=min(32, len(runs))) as pool:
        list(pool.map(one, runs))

    judgements = judge_run(run)
    rack: RackStep = {}
    # the rack-level step (rackready.steps.rack): an inventory run, after the suites
    if not node and len(plan.nodes) >= 2:
        board.close()
        rack = rack_step.run_rack_step(
            run, targets, judgements, (payload, digest), _venv, _nccl_env,
            allocation=slurm.allocation if slurm is not None else None)
        judgements = judge_run(run)  # the rack verdicts join the nodes' judgements
    for r in runs:
        j = judgements[r.node.name]
        r.outcome = j["outcome"]
        r.failed_checks = sorted({v["check"] for v in j["verdicts"] + j["fleet_verdicts"]
                                  + j.get("rack_verdicts", []) if v["outcome"] == "fail"})
        board.finish(r.node.name, r.outcome, one_line(j["outcome_reason"]))
    board.close()
    if slurm is not None:
        _settle_slurm(run, slurm, judgements)
    # the decided outcome into each node's node_exporter textfile, where its site asks
    verdict_metrics.publish(plan, targets, judgements)
    plan.finished = now_iso()
    run.save_plan()
    _print_summary(runs, judgements)
    _print_rack(rack)
    _reports(run.path, formats)
    print(f"run directory: {run.path}")
    # the whole run's, as decided (rackready.decide.outcome.rack_judgement): every planned
    # node, those a --resume did not reach too, and the rack step
    return 0 if (run.read_rack_judgement() or {}).get("outcome") == "PASS" else 1


def _only(only: str | None) -> list[str] | None:
    if only is None:
        return None
    names = [c.strip() for c in only.split(",") if c.strip()]
    if not names:
        raise UserError("--only needs check names (see `python -m validation checks`)")
    unknown = sorted(set(names) - set(all_checks()))
    if unknown:
        raise UserError(f"--only: unknown check(s) {', '.join(unknown)} "
                        "(see `python -m validation checks`)")
    return names


def _planned(n: inventory.Node, overlays: Path | None = None) -> PlannedNode:
    """The node as planned; its profile must load here (a typo is refused before any
    connection), and the site's calibration overlay for it is checked and shipped."""
    site = _site(n)
    try:
        profile = load_profile(n.profile)
    except (ProfileError, OSError) as exc:
        raise UserError(f"node {n.name}: rackready_profile {n.profile!r}: "
                        f"{one_line(str(exc))}") from None
    overlay = read_overlay(overlays, n.profile) if overlays is not None else None
    if overlay is not None:
        check_overlay(overlay_path(overlays, n.profile), overlay, profile)  # type: ignore[arg-type]
        site["calibration"] = overlay
    return PlannedNode(name=n.name, profile=n.profile, site=site,
                       without=tuple(n.validation_without), identity=_identity(n))


def _identity(n: inventory.Node) -> PlannedIdentity:
    """What the node's result must say about itself (rackready.decide.integrity), where the
    inventory states it: its hostname (rackready_hostname) and its GPU serials
    (rackready_gpu_serials). Kept on the controller, never shipped to the node. A real
    host's name often differs from its inventory name, so none is assumed: the per-node
    nonce already tells one node's result from another's."""
    return {"hostnames": [n.hostname] if n.hostname else [],
            "gpu_serials": list(n.gpu_serials)}


def _overlays(inv: str) -> Path | None:
    """The inventory's folder, where calibration/<profile>.yml overlays live."""
    try:
        return inventory.inventory_path(inv).parent
    except UserError:
        return None


def _site(node: inventory.Node) -> dict:
    """Per-node facts from the inventory that the checks (and the controller) judge against."""
    # The role variables that provisioned the node, under their own names (one source).
    site = {**(node.validation_site or {}), **(node.provisioned or {}), "fabric": node.fabric,
            "platform": node.platform, "node": node.name,
            "rdma_devices": list(node.rdma_devices)}
    try:  # a site's XID reclassification, refused here in one line rather than on the node
        parse_overrides(site.get("xid_overrides"))
    except XidCatalogError as exc:
        raise UserError(f"{node.name}: rackready_validation_site: {exc}") from None
    # Ansible hands over its own str subclasses; JSON makes them plain data.
    return json.loads(json.dumps(site))


def suite_sites(inv: str) -> dict[str, dict]:
    """Every node's site settings as its suite gets them (the Slurm health gate's too)."""
    return {n.name: _site(n) for n in _load(inv)}


def _venv(node: inventory.Node) -> str:
    """The node's venv, where validation_tools built it (validation_tools_venv)."""
    return str((node.provisioned or {}).get("validation_tools_venv") or NODE_VENV)


def _board_judges(plan: Plan) -> dict:
    """Per node: a check's verdict word for the live board, judged by the controller."""
    judges = {}
    for p in plan.nodes:
        profile = controller_profile(p)
        if profile is not None:
            judges[p.name] = (lambda prof: lambda result: check_verdict(result, prof))(profile)
    return judges


def _resumed(resume: str, node: str | None, inv: str) -> tuple[RunDir, list[inventory.Node]]:
    """An interrupted run's directory: the same plan, every node of it (or one)."""
    run = RunDir.open(resume)
    if run.plan is None:
        raise UserError(f"--resume {resume}: not a run directory (no run.json)")
    planned = [n.name for n in run.plan.nodes]
    names = [node] if node else planned
    unknown = sorted(set(names) - set(planned))
    if unknown:
        raise UserError(f"--resume {resume}: {', '.join(unknown)} was not part of that run")
    targets = [_find(n, run.plan.inventory or inv) for n in names]
    return run, targets


def _find(node: str, inv: str) -> inventory.Node:
    return inventory.find(node, inv)


def _load(inv: str) -> list[inventory.Node]:
    return inventory.load(inv)


def _left_out(run: RunDir, r: NodeRun, board: Board, why: str) -> None:
    """A node Slurm cannot run the suite on: INCOMPLETE with Slurm's reason."""
    r.problem = why
    run.write_session(r.node.name, {"node": r.node.name, "started": now_iso(),
                                    "problem": f"slurm: {why}", "finished": now_iso()})
    board.update(r.node.name, "not run (Slurm)")


def _settle_slurm(run: RunDir, slurm: SlurmRun, judgements: dict[str, Judgement]) -> None:
    slurm.settle({name: (j["outcome"], one_line(j["outcome_reason"]))
                  for name, j in judgements.items()})
    run.write_slurm({"reservation": slurm.reservation, "drain": slurm.drain,
                     "left_out": slurm.left_out, "actions": slurm.actions,
                     "jobs": slurm.jobs, "rack_jobs": slurm.rack_jobs})
    for name, done in sorted(slurm.actions.items()):
        print(f"Slurm: {name}: {done}")


def _run_node(run: RunDir, r: NodeRun, level: str, bundle_payload: tuple[bytes, str],
              board: Board, extra: list[str], resuming: bool,
              launch: SlurmLaunch | None = None) -> None:
    """One node's session; every failure becomes a recorded one-line problem."""
    node = r.node
    board.update(node.name, "connecting")
    record: dict = {"node": node.name, "started": now_iso()}
    try:
        client = ssh.connect(node)
    except UserError as exc:
        r.problem = one_line(str(exc))
        record.update(problem=f"unreachable: {r.problem}", finished=now_iso())
        run.write_session(node.name, record)
        board.update(node.name, "UNREACHABLE")
        return
    try:
        if resuming:  # only now, with the node in reach: keep what the earlier attempt left
            run.set_aside_for_resume(node.name)
        paths = run.prepare_node(node.name)
        assert run.plan is not None
        outcome = node_session.run_on_node(
            client, node.name,
            bundle=bundle_payload,
            site_yaml=yaml.safe_dump(_site(node)),
            command_args=_suite_args(node, level, extra),
            env={"PYTHONUNBUFFERED": "1", "RACKREADY_BUNDLE_SHA256": bundle_payload[1],
                 "RACKREADY_RUN_NONCE": run.plan.nonces[node.name], **_nccl_env(node)},
            python=f"{_venv(node)}/bin/python",
            remote_base=NODE_BASE,
            run_id=run.plan.run_id,
            files=node_session.NodeFiles(events=paths.events, log=paths.log,
                                         result=paths.result, artifacts=paths.artifacts),
            limits=node_session.Limits.for_level(level),
            on_event=lambda ev: board.event(node.name, ev),
            on_status=lambda text: board.update(node.name, text),
            resume=resuming,
            become=node.become,
            launch=launch,
        )
        if launch is not None:
            record["slurm_job"] = launch.job_id
        r.events = outcome.events
        r.problem = outcome.problem
        record.update(rc=outcome.rc, problem=outcome.problem, events=outcome.events,
                      bad_lines=outcome.bad_lines, refused=outcome.refused,
                      fetched=len(outcome.fetched), result_fetched=outcome.result_fetched,
                      dropped_log_bytes=outcome.dropped_log_bytes, shipped=outcome.shipped)
    except Exception as exc:  # noqa: BLE001  one node's surprise must not stop the rack
        r.problem = one_line(f"controller error talking to the node: {type(exc).__name__}: {exc}")
        record["problem"] = r.problem
    finally:
        client.close()
        record["finished"] = now_iso()
        run.write_session(node.name, record)


def _run_oob(run: RunDir, r: NodeRun, board: Board, sampled: dict[str, Any]) -> None:
    """The node's BMC, read from the controller after its session: log entries
    written during the burn-in count too, and what was sampled while it ran (sampled).
    Its trouble is recorded, never raised."""
    board.update(r.node.name, "reading BMC")
    try:
        record = oob.collect(r.node, envelope=sampled)
    except Exception as exc:  # noqa: BLE001  one node's surprise must not stop the rack
        record = {"node": r.node.name, "problem": one_line(f"controller error: {exc}"),
                  "check": not_run(one_line(f"controller error: {exc}")).to_dict()}
    run.write_bmc(r.node.name, record)


def _suite_args(node: inventory.Node, level: str, extra: list[str]) -> list[str]:
    """`python -m validation run ...` arguments; --out and --site are added by the session."""
    args = ["-m", "validation", "run", "--profile", node.profile, "--level", level,
            "--sysroot", node.sysroot, *extra]
    if node.validation_without:
        args += ["--without", ",".join(node.validation_without)]
    return args


def _nccl_env(node: inventory.Node) -> dict[str, str]:
    # Lab and CI hosts forbid NVLink multicast; the site setting decides where given, else
    # the node's workloads follow the profile (on for NVSwitch platforms) and set it anyway.
    nvls = (node.validation_site or {}).get("nccl_nvls_enable")
    env = {"NCCL_NVLS_ENABLE": str(int(bool(nvls)))} if nvls is not None else {}
    # RoCE: the traffic class and GID index the node's own workloads get, from the same
    # site values (validation.workloads.common_env.roce_env)
    return {**env, **roce_env(_site(node))}


def _print_summary(runs: list[NodeRun], judgements: dict[str, Judgement]) -> None:
    print()
    print(f"{'node':<14} {'outcome':<11} {'events':>6}  detail")
    for r in runs:
        j = judgements[r.node.name]
        detail = one_line(j["outcome_reason"] or r.problem or ", ".join(r.failed_checks) or "-",
                          120)
        print(f"{r.node.name:<14} {r.outcome:<11} {r.events:>6}  {detail}")


def _print_rack(rack: RackStep) -> None:
    """One line per fabric group of the rack-level step, and its failing links."""
    for g in rack.get("groups", []):
        print(f"rack step, fabric {g['fabric']}: {g['outcome']}"
              + (f"  {one_line(g['outcome_reason'], 140)}" if g["outcome_reason"] else ""))
        for p in g["pairs"]:
            for f in p["failures"]:
                print(f"  FAIL {one_line(f['message'], 160)}")


def _reports(run_dir: Path, formats: str) -> None:
    write_reports(run_dir, formats)
