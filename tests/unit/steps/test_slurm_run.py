"""`invoke validate --via slurm`, without daemons: the inventory's rackready_slurm, the srun
command a node's suite runs under (run for real by /bin/sh with a stand-in srun), how
srun's and slurmstepd's lines become a node's problem, and the drain/resume rule applied
through the submit host against Slurm's real `scontrol show node` captures.

The same path against real slurmctld/slurmd: tests/lab/test_slurm_lab.py."""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess

import pytest

from rackready.errors import UserError
from rackready.remote.slurm import RemoteScontrol, SlurmError, SlurmLaunch
from rackready.site.inventory import Node
from rackready.site.paths import PROJECT_ROOT
from rackready.site.slurm import settings
from rackready.steps.slurm_run import SlurmRun
from validation.drain import apply

ROOT = PROJECT_ROOT
CAPTURED = ROOT / "tests/fixtures/slurm/captured"


def node(name: str, slurm: dict | None) -> Node:
    return Node(name=name, address=f"10.0.0.{name[-1]}", profile="p", platform="", fabric="",
                user="ops", port=22, key_file=None, known_hosts=None, sysroot="/", lab=False,
                become=True, slurm=slurm)


SITE = {"submit_host": "login01", "partition": "gpu"}


class FakeHost:
    """The submit host: scontrol answers from captures; every command is recorded."""

    def __init__(self, states: dict[str, str], jobs: dict[str, str] | None = None) -> None:
        self.site = settings([node("gpu1", SITE)])
        self.timeout_s = 5
        self.states = states  # node -> capture text, or "" for "not a Slurm node"
        self.jobs = jobs or {}
        self.queue: list[tuple[str, str, str]] = []  # squeue's answer for any job name
        self.calls: list[tuple[list[str], bool]] = []

    def run(self, args: list[str], *, admin: bool = False) -> str:
        self.calls.append((args, admin))
        if args[:3] == ["scontrol", "show", "node"]:
            text = self.states.get(args[-1], "")
            if not text:
                raise SlurmError(f"scontrol show exited 1: Node {args[-1]} not found")
            return text
        if args[:2] == ["scontrol", "update"]:
            name = args[2].split("=", 1)[1]
            self.states[name] = capture("drained-rackready") if "state=drain" in args \
                else capture("idle")
        return ""

    def node_state(self, name: str):
        from rackready.remote.slurm import SubmitHost

        return SubmitHost.node_state(self, name)  # type: ignore[arg-type]

    def job(self, job_id: str) -> tuple[str, str]:
        return tuple(self.jobs.get(job_id, ("", "")))  # type: ignore[return-value]

    def reserve(self, name, nodes, minutes) -> None:
        self.calls.append((["reserve", name, *nodes, str(minutes)], True))

    def unreserve(self, name) -> None:
        self.calls.append((["unreserve", name], True))

    def cancel(self, job_id) -> None:
        self.calls.append((["scancel", job_id], False))

    def jobs_named(self, name: str) -> list[tuple[str, str, str]]:
        return list(self.queue)

    def cancel_named(self, name: str) -> None:
        self.calls.append((["scancel", f"--name={name}"], False))

    def close(self) -> None:
        pass

    def updates(self) -> list[str]:
        return [" ".join(a[2:]) for a, _ in self.calls if a[:2] == ["scontrol", "update"]]


def capture(which: str) -> str:
    return (CAPTURED / f"show-node-{which}.txt").read_text()


def other_drained() -> str:
    """The idle capture as an admin's drain leaves it (Slurm appends who set it and when)."""
    return capture("idle").replace("State=IDLE", "State=IDLE+DRAIN") + \
        "   Reason=bad DIMM [admin@2026-12-01T10:00:00]\n"


# -- the inventory's rackready_slurm ------------------------------------------------------

def test_settings_reach_the_submit_host_as_the_nodes_are_reached():
    s = settings([node("gpu1", SITE), node("gpu2", SITE)])
    assert (s.submit.address, s.submit.user, s.submit.port, s.partition) == \
        ("login01", "ops", 22, "gpu")
    assert settings([node("gpu1", SITE)], partition="debug").partition == "debug"
    # how long a job may wait to start: 45 s unless the site says
    assert s.pending_s == 45.0
    assert settings([node("gpu1", {**SITE, "pending_s": 600})]).pending_s == 600.0


@pytest.mark.parametrize("nodes, words", [
    ([node("gpu1", None)], "rackready_slurm is not set for gpu1"),
    ([node("gpu1", SITE), node("gpu2", {**SITE, "partition": "x"})], "differ"),
    ([node("gpu1", {"submit_host": "login01", "queue": "gpu"})], "unknown key(s) queue"),
    ([node("gpu1", {"submit_host": "login01; rm -rf /"})], "submit_host must be"),
    ([node("gpu1", {**SITE, "port": "22"})], "port must be a port number"),
    ([node("gpu1", {**SITE, "become": "yes"})], "become must be true or false"),
    ([node("gpu1", {**SITE, "pending_s": 1})], "pending_s must be seconds from 5"),
    ([node("gpu1", {**SITE, "pending_s": "soon"})], "pending_s must be seconds from 5"),
])
def test_settings_mistakes_are_one_line(nodes, words):
    with pytest.raises(UserError) as exc:
        settings(nodes)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def test_a_partition_name_is_checked():
    with pytest.raises(UserError, match="partition name"):
        settings([node("gpu1", SITE)], partition="gpu --uid=0")


# -- the job's command --------------------------------------------------------------------

def test_the_suite_runs_under_srun_exclusive_on_its_node(tmp_path):
    """The srun line, run by a real shell with a stand-in srun that prints its options
    and then runs the job's command as slurmd would (SLURM_JOB_ID set)."""
    srun = tmp_path / "srun"
    srun.write_text('#!/bin/sh\nwhile [ "${1#--}" != "$1" ]; do echo "opt $1"; shift; done\n'
                    'SLURM_JOB_ID=42 exec "$@"\n')
    srun.chmod(0o755)
    host = FakeHost({})
    host.queue = [("42", "RUNNING", "")]  # squeue's word for the job named as below
    launch = SlurmLaunch(host, "gpu1", deadline_s=600, reservation="rackready-r1",  # type: ignore[arg-type]
                         poll_s=0.05)
    inner = "printf 'event %s\\n' \"it's quoted\"; exit 3"
    p = subprocess.run(["/bin/sh", "-c", launch.command(inner)], capture_output=True,
                       text=True, env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    opts = [ln.split(" ", 1)[1] for ln in p.stdout.splitlines() if ln.startswith("opt ")]
    assert {"--nodelist=gpu1", "--nodes=1", "--ntasks=1", "--exclusive", "--export=NONE",
            "--time=11", "--partition=gpu", "--reservation=rackready-r1"} <= set(opts)
    assert "event it's quoted" in p.stdout and p.returncode == 3
    assert f"--job-name={launch.job_name}" in opts
    assert launch.job_name.startswith("rackready-validate-gpu1-")
    launch.finish()
    assert launch.stderr_line(p.stderr.strip()) == "running as Slurm job 42"
    assert launch.job_id == "42"


@pytest.mark.parametrize("lines, job, expect", [
    (["srun: job 7 queued and waiting for resources",
      "srun: error: Unable to allocate resources: Job has been cancelled"],
     ("CANCELLED", ""), "Slurm job 7 CANCELLED: srun: error: Unable to allocate resources: "
                        "Job has been cancelled"),
    (["rackready-slurm-job 9",
      "slurmstepd: error: *** STEP 9.0 ON gpu1 CANCELLED AT 2026-12-02T20:01:02 DUE TO TIME "
      "LIMIT ***"], ("TIMEOUT", "TimeLimit"), "Slurm job 9 TIMEOUT (TimeLimit): slurmstepd"),
    (["rackready-slurm-job 11",
      "slurmstepd: error: *** JOB 11 ON gpu1 CANCELLED AT 2026-12-02T20:01:02 DUE TO "
      "PREEMPTION ***"], ("PREEMPTED", ""), "Slurm job 11 PREEMPTED: slurmstepd"),
    (["srun: error: Unable to allocate resources: Requested node configuration is not "
      "available"], ("", ""), "Slurm ran no job: srun: error: Unable to allocate resources: "
                             "Requested node configuration is not available"),
    (["rackready-slurm-job 12"], ("COMPLETED", ""), ""),
    # the job's own stderr (the node's words) names gpu2's job: not carried into the problem
    (["rackready-slurm-job 9",
      "slurmstepd: error: *** JOB 1001 ON gpu2 CANCELLED AT 2026-12-02T20:01:02 ***"],
     ("FAILED", "NonZeroExitCode"), "Slurm job 9 FAILED (NonZeroExitCode)$"),
    (["rackready-slurm-job 12", "srun: error: gpu1: task 0: Exited with exit code 1"],
     ("COMPLETED", ""), ""),
])
def test_a_job_that_did_not_finish_is_named_in_slurms_words(lines, job, expect):
    host = FakeHost({}, jobs={"7": job, "9": job, "11": job, "12": job})
    # the job's id is squeue's (by the launch's job name), the same as the lines name here
    number = next((ln.split()[-1] for ln in lines if ln.startswith("rackready-slurm-job")),
                  "7" if lines[0].startswith("srun: job 7") else "")
    host.queue = [(number, "RUNNING", "")] if number else []
    launch = SlurmLaunch(host, "gpu1", deadline_s=600, poll_s=0.05)  # type: ignore[arg-type]
    launch.command("true")
    for line in lines:
        launch.stderr_line(line)
    if expect.endswith("$"):
        assert launch.problem() == expect[:-1]
    else:
        assert launch.problem().startswith(expect) if expect else launch.problem() == ""


def test_a_stopped_job_is_cancelled_by_its_own_name_never_by_a_number_in_the_stream():
    host = FakeHost({})
    launch = SlurmLaunch(host, "gpu1", deadline_s=600)  # type: ignore[arg-type]
    launch.stderr_line("rackready-slurm-job 5")  # the node's stream: gpu2's job, maybe
    launch.stop()
    assert host.calls == [(["scancel", f"--name={launch.job_name}"], False)]
    assert launch.job_id == ""


# -- before and after the sessions --------------------------------------------------------

def open_run(host: FakeHost, names: list[str], drain: bool) -> SlurmRun:
    sr = SlurmRun(host, drain, deadline_s=600)  # type: ignore[arg-type]
    sr._prepare([node(n, SITE) for n in names], "lab-20261202T200000")
    return sr


def test_nodes_drained_by_others_or_unknown_are_left_out_and_never_touched():
    host = FakeHost({"gpu1": capture("idle"), "gpu2": other_drained()})
    sr = open_run(host, ["gpu1", "gpu2", "gpu3"], drain=True)
    assert set(sr.left_out) == {"gpu2", "gpu3"}
    assert "by someone else (bad DIMM): left as it is" in sr.left_out["gpu2"]
    assert "not usable in Slurm" in sr.left_out["gpu3"]
    assert ["reserve", "rackready-lab-20261202T200000", "gpu1", "20"] in [a for a, _ in host.calls]
    sr.settle({"gpu1": ("FAIL", "gpu.ecc_uncorrected GPU 3 (serial 1654922000001)"),
               "gpu2": ("INCOMPLETE", "slurm: drained by someone else"),
               "gpu3": ("INCOMPLETE", "not usable")})
    assert host.updates()[0].startswith(
        "nodename=gpu1 state=drain reason=rackready: gpu.ecc_uncorrected GPU 3")
    assert not any("gpu2" in u for u in host.updates())
    assert "already drained by someone else" in sr.actions["gpu2"]


def test_a_node_slurm_cannot_run_jobs_on_is_left_out_as_slurms_state_never_drained():
    down = capture("idle").replace("State=IDLE", "State=IDLE+NOT_RESPONDING") + \
        "   Reason=Not responding [slurm@2026-12-05T08:00:00]\n"
    host = FakeHost({"gpu1": capture("idle"), "gpu2": down,
                     "gpu3": capture("idle").replace("State=IDLE", "State=DOWN")})
    sr = open_run(host, ["gpu1", "gpu2", "gpu3", "gpu4"], drain=True)
    assert sr.left_out["gpu2"] == ("Slurm cannot run a job on it: State=IDLE+NOT_RESPONDING "
                                   "(Not responding)")
    assert sr.left_out["gpu3"] == "Slurm cannot run a job on it: State=DOWN"
    assert set(sr.scheduler) == {"gpu2", "gpu3", "gpu4"}  # gpu4: not a Slurm node
    sr.settle({n: ("INCOMPLETE", f"slurm: {sr.left_out[n]}") for n in ("gpu2", "gpu3", "gpu4")}
              | {"gpu1": ("FAIL", "gpu.ecc")})
    assert [u.split()[0] for u in host.updates()] == ["nodename=gpu1"]
    assert sr.actions["gpu2"] == ("not drained: Slurm cannot run a job on it: "
                                  "State=IDLE+NOT_RESPONDING (Not responding) (Slurm's state)")


def test_drain_resumes_its_own_drain_for_the_run_and_keeps_it_resumed_on_pass():
    host = FakeHost({"gpu1": capture("drained-rackready")})
    sr = open_run(host, ["gpu1"], drain=True)
    assert sr.left_out == {}
    assert host.updates() == ["nodename=gpu1 state=resume"]
    assert all(admin for a, admin in host.calls if a[0] in ("scontrol", "reserve")
               and a[:2] != ["scontrol", "show"])
    sr.settle({"gpu1": ("PASS", "every check passed")})
    assert host.updates() == ["nodename=gpu1 state=resume"]  # no drain after the pass
    assert sr.actions["gpu1"] == "resumed (passed)"


def test_without_drain_slurm_is_only_read():
    host = FakeHost({"gpu1": capture("drained-rackready"), "gpu2": capture("idle")})
    sr = open_run(host, ["gpu1", "gpu2"], drain=False)
    assert "--drain resumes it" in sr.left_out["gpu1"]
    sr.settle({"gpu2": ("FAIL", "x")})
    assert host.updates() == [] and sr.reservation == ""
    assert all(a[:3] == ["scontrol", "show", "node"] for a, _ in host.calls)


def test_an_incomplete_node_is_drained_saying_so():
    host = FakeHost({"gpu1": capture("idle")})
    sr = open_run(host, ["gpu1"], drain=True)
    sr.settle({"gpu1": ("INCOMPLETE", 'no result.json: Slurm job 9 TIMEOUT "x"')})
    (update,) = host.updates()
    assert "reason=rackready: INCOMPLETE: no result.json: Slurm job 9 TIMEOUT 'x'" in update


def test_the_remote_scontrol_keeps_validation_drains_rule():
    host = FakeHost({"gpu1": other_drained()})
    ok, done = apply(False, "rackready: x", RemoteScontrol(host, "gpu1"))  # type: ignore[arg-type]
    assert ok and "left as it is" in done and host.updates() == []


def test_validate_refuses_slurm_flags_without_via_slurm():
    from rackready.steps.validate import run_validation

    with pytest.raises(UserError, match="go with --via slurm"):
        run_validation(None, inventory="lab", drain=True)
    with pytest.raises(UserError, match="--via must be one of ssh, slurm"):
        run_validation(None, inventory="lab", via="sbatch")


def test_the_submit_host_is_the_nodes_trust():
    n = dataclasses.replace(node("gpu1", SITE), key_file="/k", known_hosts="/kh")
    s = settings([n])
    assert (s.submit.key_file, s.submit.known_hosts) == ("/k", "/kh")
    assert shlex.quote(s.submit.address) == "login01"
