"""`--via slurm` against a node that games the scheduler and a scheduler that never runs the
job: the real controller path (SlurmRun.open, the node's session with its SlurmLaunch,
SlurmRun.ran and settle) over an in-process SSH host (tests/unit/fake_node.py) that is both
the node and the submit host, with stand-in srun/squeue/scancel/scontrol shell scripts
keeping a tiny Slurm's jobs in files.

- A node's stream names another node's job: only the node's own job (squeue's, by the name
  the controller chose) is recorded and cancelled; the other job keeps running.
- A job that never starts (pending, node down) is said within a minute with squeue's reason,
  cancelled, and the node is never drained for it.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest
from fake_node import FakeNode

from rackready.remote import session
from rackready.steps.slurm_run import SlurmRun

CAPTURED = Path(__file__).resolve().parents[2] / "fixtures/slurm/captured"

SRUN = r"""#!/bin/sh
S=$FAKE_SLURM; name=; node=
while [ "${1#--}" != "$1" ]; do
  case $1 in --job-name=*) name=${1#*=};; --nodelist=*) node=${1#*=};; esac; shift
done
id=$(cat "$S/next"); echo $((id + 1)) > "$S/next"
if [ -e "$S/pending_$node" ]; then
  echo "$id|PENDING|$(cat "$S/pending_$node")|$name|$node" > "$S/jobs/$id"
  echo "srun: Required node not available (down, drained or reserved)" >&2
  echo "srun: job $id queued and waiting for resources" >&2
  while ! grep -q '|CANCELLED|' "$S/jobs/$id"; do sleep 0.1; done
  echo "srun: error: Unable to allocate resources: Job has been cancelled" >&2; exit 1
fi
echo "$id|RUNNING|None|$name|$node" > "$S/jobs/$id"
SLURM_JOB_ID=$id "$@" & pid=$!
echo $pid > "$S/pid_$id"
wait $pid; rc=$?
grep -q '|CANCELLED|' "$S/jobs/$id" || echo "$id|COMPLETED|None|$name|$node" > "$S/jobs/$id"
exit $rc
"""

SQUEUE = r"""#!/bin/sh
S=$FAKE_SLURM; name=
for a; do case $a in --name=*) name=${a#*=};; esac; done
for f in "$S"/jobs/*; do
  [ -e "$f" ] || continue
  IFS='|' read -r id st why n nd < "$f"; [ "$n" = "$name" ] && echo "$id|$st|$why"
done
exit 0
"""

SCANCEL = r"""#!/bin/sh
S=$FAKE_SLURM; echo "$*" >> "$S/scancel.log"; name=; ids=" "
for a; do case $a in --name=*) name=${a#*=};; --*) ;; *) ids="$ids$a ";; esac; done
for f in "$S"/jobs/*; do
  IFS='|' read -r id st why n nd < "$f"
  hit=; [ -n "$name" ] && [ "$n" = "$name" ] && hit=1
  case $ids in *" $id "*) hit=1;; esac
  case $hit$st in 1PENDING|1RUNNING)
    echo "$id|CANCELLED|None|$n|$nd" > "$f"
    [ -e "$S/pid_$id" ] && kill "$(cat "$S/pid_$id")" 2>/dev/null;;
  esac
done
exit 0
"""

SCONTROL = r"""#!/bin/sh
S=$FAKE_SLURM
case "$1 $2" in
  "show job") f=$S/jobs/$4; [ -e "$f" ] || { echo "Invalid job id specified" >&2; exit 1; }
    IFS='|' read -r id st why n nd < "$f"; echo "JobId=$id JobName=$n JobState=$st Reason=$why";;
  "show node") cat "$S/node_$4" 2>/dev/null || { echo "Node $4 not found" >&2; exit 1; };;
  *) echo "$*" >> "$S/scontrol.log";;
esac
"""

SUITE = textwrap.dedent('''
    import json, os, sys, time
    mode = sys.argv[1]
    out = sys.argv[sys.argv.index("--out") + 1]
    os.makedirs(out, exist_ok=True)
    if mode == "liar":  # another node's job id, in the job's words and in srun's
        print("rackready-slurm-job 1001", file=sys.stderr, flush=True)
        print("srun: job 1001 queued and waiting for resources", file=sys.stderr, flush=True)
        time.sleep(30)  # and stall
''')


def _bundle() -> tuple[bytes, str]:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("suite.py")
        info.size = len(SUITE.encode())
        tar.addfile(info, io.BytesIO(SUITE.encode()))
    return gzip.compress(raw.getvalue(), mtime=0), hashlib.sha256(raw.getvalue()).hexdigest()


class Slurm:
    """The stand-in Slurm's files: jobs/<id> holds 'id|state|reason|name|node'."""

    def __init__(self, tmp: Path) -> None:
        self.state = tmp / "slurm"
        (self.state / "jobs").mkdir(parents=True)
        (self.state / "next").write_text("1001\n")
        self.bin = tmp / "slurm-bin"
        self.bin.mkdir()
        for name, text in (("srun", SRUN), ("squeue", SQUEUE), ("scancel", SCANCEL),
                           ("scontrol", SCONTROL)):
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        self.env = {"PATH": f"{self.bin}:/usr/bin:/bin", "FAKE_SLURM": str(self.state)}

    def job(self, job_id: str) -> list[str]:
        return (self.state / "jobs" / job_id).read_text().strip().split("|")

    def log(self, name: str) -> str:
        path = self.state / f"{name}.log"
        return path.read_text() if path.exists() else ""


@pytest.fixture
def site(tmp_path):
    slurm = Slurm(tmp_path)
    host = FakeNode(tmp_path / "gpu02", env=slurm.env)  # the node, and the submit host
    (slurm.state / "node_gpu02").write_text((CAPTURED / "show-node-idle.txt").read_text())
    node = dataclasses.replace(host.node, name="gpu02",
                               slurm={"submit_host": "127.0.0.1", "port": host.node.port})
    yield slurm, host, node
    host.close()


def _session(host: FakeNode, tmp: Path, sr: SlurmRun, mode: str, pending_s: float = 45.0,
             **limits):
    launch = sr.launch("gpu02")
    launch.poll_s, launch.pending_s = 0.2, pending_s
    statuses: list[str] = []
    ctl = tmp / "ctl"
    client = host.connect()
    try:
        out = session.run_on_node(
            client, "gpu02", bundle=_bundle(), site_yaml="fabric: roce\n",
            command_args=[sys.executable, "suite.py", mode], env={"PYTHONUNBUFFERED": "1"},
            remote_base=str(host.root / "base"), run_id="r1",
            files=session.NodeFiles(events=ctl / "events.jsonl", log=ctl / "node.log",
                                    result=ctl / "result.json", artifacts=ctl / "artifacts"),
            limits=session.Limits(**{"deadline_s": 60, "kill_grace_s": 1, **limits}),
            on_event=lambda ev: None, on_status=statuses.append, launch=launch)
    finally:
        sr.ran(launch)
        client.close()
    return out, launch, statuses


def test_a_node_naming_another_nodes_job_never_has_it_cancelled_or_recorded(site, tmp_path):
    slurm, host, node = site
    # gpu01's honest job, 1001, running under the same Slurm
    other = subprocess.Popen([str(slurm.bin / "srun"), "--job-name=rackready-validate-gpu01",
                              "--nodelist=gpu01", "sleep", "30"], env=slurm.env)
    try:
        for _ in range(50):
            if (slurm.state / "pid_1001").exists():
                break
            time.sleep(0.1)
        sr = SlurmRun.open([node], partition=None, drain=False, run_id="r1", deadline_s=60)
        try:
            out, launch, statuses = _session(host, tmp_path, sr, "liar", idle_s=2)
        finally:
            sr.close()
        assert out.problem.startswith("stalled")  # the liar's own failure
        assert slurm.job("1001")[1] == "RUNNING" and other.poll() is None
        assert "1001" not in slurm.log("scancel")
        assert launch.job_id == "1002" and sr.jobs == {"gpu02": "1002"}
        # its own job is the one cancelled (the session's kill may have ended it first)
        assert f"--name={launch.job_name}" in slurm.log("scancel")
        assert slurm.job("1002")[3] == launch.job_name
        assert not any("1001" in s for s in statuses)
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("why, pending_s", [
    ("ReqNodeNotAvail, UnavailableNodes:gpu02", 45.0),  # the node down: a reason, ~6 s
    ("Resources", 3.0),  # any pending reason: at the launch's pending limit
])
def test_a_job_that_never_starts_is_slurms_state_said_at_once_never_drained(
        site, tmp_path, why, pending_s):
    slurm, host, node = site
    (slurm.state / "pending_gpu02").write_text(why)
    sr = SlurmRun.open([node], partition=None, drain=True, run_id="r1", deadline_s=60)
    start = time.monotonic()
    try:
        out, launch, _ = _session(host, tmp_path, sr, "liar", pending_s, idle_s=40)
        took = time.monotonic() - start
        sr.settle({"gpu02": ("INCOMPLETE", out.problem)})
    finally:
        sr.close()
    assert took < 20  # not the 40 s stall, nor the deadline
    assert out.problem.startswith(f"no result.json: Slurm job 1001 never started: PENDING "
                                  f"({why}) after ")
    assert out.problem.endswith("s; cancelled")
    assert slurm.job("1001")[1] == "CANCELLED"
    assert "state=drain" not in slurm.log("scontrol")
    assert sr.actions["gpu02"].startswith("not drained: Slurm job 1001 never started")
    assert sr.jobs == {"gpu02": "1001"}
