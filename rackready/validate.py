"""`invoke validate`: run the node-side suite over SSH on one node or a whole inventory.

Per node: ship the validation bundle, run it in the node's venv, persist every
event line locally as it arrives (so a node that drops still leaves what it
measured), then fetch result.json and artifacts. After all nodes: the fleet
judge (outliers need the whole rack), reports, a summary table.
"""

from __future__ import annotations

import json
import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import yaml

from rackready import bundle, inventory, ssh
from rackready.errors import UserError
from rackready.progress import Board

LEVELS = ("quick", "standard", "burnin")
NODE_VENV = "/opt/rackready/venv"
NODE_BASE = "/var/lib/rackready"
PROJECT_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class NodeRun:
    node: inventory.Node
    dir: Path
    outcome: str = "INCOMPLETE"  # until result.json arrives
    problem: str = ""
    events: int = 0
    failed_checks: list[str] = field(default_factory=list)


def run_validation(node: str | None, inventory: str = "lab", level: str = "quick",
                   out: str | None = None, formats: str = "json,html,pdf,junit",
                   only: str | None = None, resume: str | None = None) -> int:
    if level not in LEVELS:
        raise UserError(f"--level must be one of {', '.join(LEVELS)}, not '{level}'")
    if resume:
        run_dir, run_info, targets = _resumed(resume, node, inventory)
        run_id, level = run_info["run_id"], run_info["level"]
    else:
        targets = [_find(node, inventory)] if node else _load(inventory)
        run_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        run_dir = Path(out) if out else PROJECT_ROOT / "runs" / f"{run_id}-{inventory}"
        if run_dir.exists() and any(run_dir.iterdir()):
            raise UserError(f"run directory {run_dir} is not empty; choose another --out")
        run_dir.mkdir(parents=True, exist_ok=True)
        run_info = {"run_id": run_id, "inventory": inventory, "level": level,
                    "started": _now(), "finished": None, "nodes": [n.name for n in targets]}
        _write_json(run_dir / "run.json", run_info)

    payload, digest = bundle.build()
    board = Board([n.name for n in targets])
    runs = [NodeRun(n, run_dir / n.name) for n in targets]
    extra = (["--only", only] if only else []) + (["--resume"] if resume else [])

    def one(run: NodeRun) -> None:
        _run_node(run, run_id, level, payload, digest, board, extra)

    with ThreadPoolExecutor(max_workers=min(32, len(runs))) as pool:
        list(pool.map(one, runs))
    board.close()

    run_info["finished"] = _now()
    run_info["bundle_sha256"] = digest
    _write_json(run_dir / "run.json", run_info)
    _judge_fleet(run_dir, runs)
    _print_summary(runs)
    _reports(run_dir, formats)
    print(f"run directory: {run_dir}")
    return 0 if all(r.outcome == "PASS" for r in runs) else 1


def _resumed(resume: str, node: str | None, inv: str
             ) -> tuple[Path, dict, list[inventory.Node]]:
    """An interrupted run's directory: same run id and level, the same nodes (or one)."""
    run_dir = Path(resume)
    info_path = run_dir / "run.json"
    if not info_path.exists():
        raise UserError(f"--resume {run_dir}: not a run directory (no run.json)")
    info = json.loads(info_path.read_text())
    names = [node] if node else info["nodes"]
    unknown = sorted(set(names) - set(info["nodes"]))
    if unknown:
        raise UserError(f"--resume {run_dir}: {', '.join(unknown)} was not part of that run")
    targets = [_find(n, info.get("inventory") or inv) for n in names]
    for t in targets:
        events = run_dir / t.name / "events.jsonl"
        if events.exists():  # the node re-sends what it takes over; keep the original
            events.rename(events.with_name("events.interrupted.jsonl"))
        (run_dir / t.name / "result.json").unlink(missing_ok=True)
    return run_dir, info, targets


def _find(node: str, inv: str) -> inventory.Node:
    return inventory.find(node, inv)


def _load(inv: str) -> list[inventory.Node]:
    return inventory.load(inv)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def _run_node(run: NodeRun, run_id: str, level: str, payload: bytes, digest: str,
              board: Board, extra: list[str]) -> None:
    node = run.node
    run.dir.mkdir(parents=True, exist_ok=True)
    log = (run.dir / "node.log").open("a")
    board.update(node.name, "connecting")
    try:
        client = ssh.connect(node)
    except UserError as exc:
        run.problem = str(exc)
        board.finish(node.name, "UNREACHABLE", str(exc))
        log.write(str(exc) + "\n")
        return
    try:
        remote_out = f"{NODE_BASE}/runs/{run_id}"
        _ship(client, payload, digest)
        # Per-node facts from the inventory that the checks judge against.
        site = {**(node.validation_site or {}), "fabric": node.fabric,
                "platform": node.platform, "node": node.name,
                "rdma_devices": list(node.rdma_devices)}
        # Ansible hands over its own str subclasses; JSON makes them plain data.
        site = json.loads(json.dumps(site))
        _put_text(client, f"{remote_out}.site.yml", yaml.safe_dump(site))
        command = _command(node, level, remote_out, digest, extra)
        log.write(f"$ {command}\n")
        board.update(node.name, "starting")
        rc = _stream(client, command, run, log, board)
        fetched = _fetch(client, remote_out, run.dir)
        if fetched:
            result = json.loads((run.dir / "result.json").read_text())
            run.outcome = result.get("outcome", "INCOMPLETE")
            run.failed_checks = sorted({v["check"] for v in result.get("verdicts", [])
                                        if v.get("outcome") == "fail"})
        else:
            run.problem = f"no result.json (validation exited {rc})"
    except (OSError, EOFError, ssh.paramiko.SSHException) as exc:
        run.problem = f"connection lost: {exc or type(exc).__name__}"
    finally:
        client.close()
        log.close()
    detail = run.problem or (", ".join(run.failed_checks) if run.failed_checks else "")
    board.finish(node.name, run.outcome, detail)


def _command(node: inventory.Node, level: str, remote_out: str, digest: str,
             extra: list[str]) -> str:
    args = [
        f"{NODE_VENV}/bin/python", "-m", "validation", "run",
        "--profile", node.profile, "--level", level, "--out", remote_out,
        "--sysroot", node.sysroot, "--site", f"{remote_out}.site.yml", *extra,
    ]
    if node.validation_without:
        args += ["--without", ",".join(node.validation_without)]
    env = f"RACKREADY_BUNDLE_SHA256={digest} NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1"
    return (
        f"test -x {NODE_VENV}/bin/python || "
        f"{{ echo 'no {NODE_VENV}: provision the node first (validation_tools)' >&2; exit 3; }}; "
        f"cd {NODE_BASE}/bundle/{digest} && {env} {shlex.join(args)}"
    )


def _ship(client, payload: bytes, digest: str) -> None:
    """Upload the bundle once per content hash."""
    dest = f"{NODE_BASE}/bundle/{digest}"
    rc, _, _ = ssh.run(client, f"test -f {dest}/.complete")
    if rc == 0:
        return
    ssh.run(client, f"mkdir -p {dest} {NODE_BASE}/runs")
    sftp = client.open_sftp()
    try:
        with sftp.open(f"{dest}.tar.gz", "wb") as f:
            f.write(payload)
    finally:
        sftp.close()
    rc, _, err = ssh.run(client, f"tar -xzf {dest}.tar.gz -C {dest} && rm {dest}.tar.gz "
                                 f"&& touch {dest}/.complete")
    if rc:
        raise OSError(f"unpacking the bundle failed: {err.strip()}")


def _put_text(client, path: str, text: str) -> None:
    sftp = client.open_sftp()
    try:
        with sftp.open(path, "w") as f:
            f.write(text)
    finally:
        sftp.close()


def _stream(client, command: str, run: NodeRun, log, board: Board) -> int:
    """Persist each event line as it arrives and feed the progress board."""
    _, stdout, stderr = client.exec_command(command)
    channel = stdout.channel
    events = (run.dir / "events.jsonl").open("a")
    try:
        for line in iter(stdout.readline, ""):
            text = line.rstrip("\n")
            try:
                event = json.loads(text)
            except json.JSONDecodeError:
                log.write(text + "\n")
                continue
            events.write(text + "\n")
            events.flush()
            run.events += 1
            board.event(run.node.name, event)
    finally:
        events.close()
    err = stderr.read().decode(errors="replace")
    if err:
        log.write(err)
    return channel.recv_exit_status()


def _fetch(client, remote_out: str, local: Path) -> bool:
    """Copy result.json and artifacts/ back; False when there is no result."""
    sftp = client.open_sftp()
    try:
        try:
            sftp.get(f"{remote_out}/result.json", str(local / "result.json"))
        except FileNotFoundError:
            return False
        _get_tree(sftp, f"{remote_out}/artifacts", local / "artifacts")
        return True
    finally:
        sftp.close()


def _get_tree(sftp, remote: str, local: Path) -> None:
    import stat

    try:
        entries = sftp.listdir_attr(remote)
    except FileNotFoundError:
        return
    local.mkdir(parents=True, exist_ok=True)
    for e in entries:
        path = f"{remote}/{e.filename}"
        if stat.S_ISDIR(e.st_mode or 0):
            _get_tree(sftp, path, local / e.filename)
        else:
            sftp.get(path, str(local / e.filename))


def _judge_fleet(run_dir: Path, runs: list[NodeRun]) -> None:
    """Fleet-relative verdicts across nodes, written into each node's result."""
    from rackready.fleet import judge_run_dir

    judge_run_dir(run_dir)
    for run in runs:
        path = run.dir / "result.json"
        if path.exists():
            result = json.loads(path.read_text())
            run.outcome = result.get("outcome", run.outcome)
            run.failed_checks = sorted({v["check"] for v in result.get("verdicts", [])
                                        + result.get("fleet_verdicts", [])
                                        if v.get("outcome") == "fail"})


def _print_summary(runs: list[NodeRun]) -> None:
    print()
    print(f"{'node':<14} {'outcome':<11} {'events':>6}  detail")
    for r in runs:
        detail = r.problem or ", ".join(r.failed_checks) or "-"
        print(f"{r.node.name:<14} {r.outcome:<11} {r.events:>6}  {detail}")


def _reports(run_dir: Path, formats: str) -> None:
    from rackready.report.cli import write_reports

    write_reports(run_dir, formats)

