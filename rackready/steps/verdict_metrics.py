"""The controller's verdict on each node, into the node's node_exporter textfile directory.

After `invoke validate` (over SSH or `--via slurm`) has judged, every node whose site names
a textfile directory gets `rackready-controller.prom` there
(validation.textfile.controller_exposition): `rackready_ok`, the outcome and the verdicts
per check and part, as the reports carry them. The node's own files hold only what it
measured, so `rackready_ok` on a node is always the controller's decision.

The directory is the site's `metrics: {textfile_dir}` (an inventory's
rackready_validation_site), the one setting the node's runner and its Slurm health gate
read too (validation.textfile.site_dir). A node without it gets nothing; a node that
cannot be reached or written is one line, never a failed run.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import paramiko

from rackready.decide.node import controller_profile
from rackready.decide.records import Judgement
from rackready.errors import UserError
from rackready.remote import ssh
from rackready.remote.put import put_file
from rackready.remote.session import SessionError
from rackready.run.rundir import Plan
from rackready.sanitize import one_line
from rackready.site.inventory import Node
from validation import textfile

SOURCE = "controller"
FILE = f"rackready-{SOURCE}.prom"


def exposition(j: Judgement, simulated: bool | None) -> str:
    """One node's judgement as the controller's textfile."""
    try:
        judged = datetime.fromisoformat(j["judged"]).timestamp()
    except (TypeError, ValueError):
        judged = 0.0
    verdicts = [*j["verdicts"], *j["fleet_verdicts"], *j.get("rack_verdicts", [])]
    return textfile.controller_exposition(
        node=j["node"], profile=j["profile"] or "", level=j["level"], simulated=simulated,
        outcome=j.get("outcome", "INCOMPLETE"), verdicts=verdicts, judged_unix=judged)


def publish(plan: Plan, targets: list[Node], judgements: dict[str, Judgement],
            connect: Callable[[Node], paramiko.SSHClient] | None = None) -> dict[str, str]:
    """Write each judged node's file where its site asks; {node: what was done} for the
    nodes that asked, each also printed as one line. connect: ssh.connect by default."""
    dial = connect or ssh.connect
    jobs = []
    for node in targets:
        planned = plan.node(node.name)
        folder = textfile.site_dir(planned.site) if planned else None
        j = judgements.get(node.name)
        if folder and j is not None:
            profile = controller_profile(planned) if planned else None
            text = exposition(j, profile.simulated if profile is not None else None)
            jobs.append((node, posixpath.join(folder, FILE), text))

    def one(job: tuple[Node, str, str]) -> tuple[str, str]:
        node, dest, text = job
        return node.name, _write(node, dest, text, dial)

    done: dict[str, str] = {}
    if jobs:
        with ThreadPoolExecutor(max_workers=min(32, len(jobs))) as pool:
            done = dict(pool.map(one, jobs))
    for name, what in sorted(done.items()):
        print(f"metrics: {name}: {what}")
    return done


def _write(node: Node, dest: str, text: str,
           connect: Callable[[Node], paramiko.SSHClient]) -> str:
    try:
        client = connect(node)
    except UserError as exc:
        return f"verdict not written to {dest}: {one_line(str(exc))}"
    try:
        put_file(client, text.encode(), dest, become=node.become)
    except (SessionError, ValueError) as exc:
        return f"verdict not written to {dest}: {one_line(str(exc))}"
    finally:
        client.close()
    return f"verdict written to {dest}"
