"""The Slurm path on the lab, with real daemons: Debian's slurmctld and munge on lab-slurm
(rackready_lab.slurm), slurmd on each node through `invoke provision --playbook slurm`
(roles/slurm_node), then `invoke validate --via slurm --drain`: each node's suite runs as
a Slurm job of its own, a faulted node is drained with its reason, and once healed a
second run resumes it. The health gate drains a faulted node by itself and passes a
healthy one. Unit tests of the same code without daemons: tests/unit/steps/test_slurm_run.py.
"""

from __future__ import annotations

import json
import time

import pytest

from rackready_lab import lab, nodes, slurm
from tests.lab.test_bmc_lab import _invoke

pytestmark = pytest.mark.lab

FAULTED = "lab-gpu02"
FAULT = "ecc-uncorrectable"


def _ctl(command: str) -> str:
    return nodes.ssh(slurm.SPEC, command).stdout


def _states() -> dict[str, str]:
    out = _ctl("sinfo -h -N -o '%N %T'")
    return dict(line.split() for line in out.splitlines() if line.strip())


def _reason(node: str) -> str:
    return _ctl(f"sinfo -h -R -n {node} -o '%E'").strip()


def _wait_for(node: str, state: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while _states().get(node) != state:
        if time.monotonic() > deadline:
            pytest.fail(f"{node} is {_states().get(node)} in Slurm, not {state}, "
                        f"after {timeout_s:.0f}s")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def slurm_lab(provisioned_lab):
    done = _invoke("provision", "--inventory", "lab", "--playbook", "slurm")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for name in provisioned_lab.names:
        if "drain" in _states().get(name, ""):  # a reused lab: an earlier test's drain
            _ctl(f"scontrol update nodename={name} state=resume")
        _wait_for(name, "idle")
    return provisioned_lab


def test_the_nodes_join_the_lab_slurm_idle_with_their_gpus(slurm_lab):
    assert set(_states()) == set(slurm_lab.names)
    for name in slurm_lab.names:
        gpus = slurm.gpu_count(slurm_lab.spec(name))
        show = _ctl(f"scontrol show node -o {name}")
        assert f"Gres=gpu:{gpus}" in show, show
        # gres.conf names the stand-in device files, so Slurm hands them out by index
        got = _ctl(f"srun -N1 -w {name} --gres=gpu:2 sh -c 'echo $CUDA_VISIBLE_DEVICES'")
        assert got.strip() == "0,1"


def _validate(tmp_path, name: str, *args: str) -> tuple[int, dict]:
    out = tmp_path / name
    done = _invoke("validate", "--inventory", "lab", "--via", "slurm", "--drain", "--level",
                   "quick", "--out", str(out), "--report-formats", "json", *args)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-2000:]
    record = json.loads((out / "_rack" / "slurm.json").read_text())
    return done.returncode, {"out": out, "slurm": record, "stdout": done.stdout}


def _judgement(out, node: str) -> dict:
    return json.loads((out / node / "judgement.json").read_text())


def test_validate_via_slurm_drains_the_faulted_node_and_resumes_it_once_healed(slurm_lab,
                                                                              tmp_path):
    lab.fault(FAULTED, FAULT)
    try:
        rc, run = _validate(tmp_path, "faulted")
        assert rc == 1
        healthy = next(n for n in slurm_lab.names if n != FAULTED)
        assert _judgement(run["out"], healthy)["outcome"] == "PASS"
        failed = _judgement(run["out"], FAULTED)
        assert failed["outcome"] == "FAIL"
        # each node's suite ran as a Slurm job of its own
        # (the inventory's nodes, all in Slurm: two, or three in a reused lab)
        members = sorted(_states())
        jobs = run["slurm"]["jobs"]
        assert set(jobs) == set(members) and all(j.isdigit() for j in jobs.values())
        assert len(set(jobs.values())) == len(members)
        # each id is the job Slurm ran on that node (squeue's, never the node's stream)
        for name, job in jobs.items():
            assert f" NodeList={name}" in _ctl(f"scontrol show job -o {job}")
        # the suite exits 1 on a failing node: Slurm records the job FAILED, the other done
        show = _ctl(f"scontrol show job -o {jobs[FAULTED]}")
        assert f" NodeList={FAULTED}" in show and "JobState=FAILED" in show, show
        assert "JobState=COMPLETED" in _ctl(f"scontrol show job -o {jobs[healthy]}")
        # and the rack step in one allocation of both nodes (released after it)
        (rack,) = run["slurm"]["rack_jobs"]
        span = f"lab-gpu[01-{len(members):02d}]"
        assert f"NodeList={span}" in _ctl(f"scontrol show job -o {rack}")
        # drained with its reason, the healthy one left idle; the run's reservation is gone
        assert "DRAIN" in _ctl(f"scontrol show node -o {FAULTED}")
        reason = _reason(FAULTED)
        assert reason.startswith("rackready: ") and "gpu.ecc" in reason, reason
        assert all(_states()[n] == "idle" for n in members if n != FAULTED)
        assert "No reservations" in _ctl("scontrol show reservation")
    finally:
        lab.heal(FAULTED)
    rc, run = _validate(tmp_path, "healed", "--node", FAULTED)
    assert rc == 0, run["stdout"][-2000:]
    assert _judgement(run["out"], FAULTED)["outcome"] == "PASS"
    assert run["slurm"]["actions"][FAULTED] == "resumed (passed)"
    _wait_for(FAULTED, "idle", 30)
    assert _reason(FAULTED) == ""


def test_a_node_drained_by_someone_else_is_left_as_it_is(slurm_lab, tmp_path):
    node = slurm_lab.names[0]
    _ctl(f"scontrol update nodename={node} state=drain reason='bad DIMM, ticket 42'")
    try:
        rc, run = _validate(tmp_path, "other", "--node", node)
        assert rc == 1
        j = _judgement(run["out"], node)
        assert j["outcome"] == "INCOMPLETE"
        assert "drained in Slurm by someone else (bad DIMM, ticket 42)" in j["outcome_reason"]
        assert _reason(node) == "bad DIMM, ticket 42"
    finally:
        _ctl(f"scontrol update nodename={node} state=resume")


def test_a_node_slurm_cannot_run_jobs_on_is_incomplete_at_once_and_never_drained(slurm_lab,
                                                                               tmp_path):
    """A node down in Slurm (as one whose slurmd never joined is): Slurm's state, said
    before any job is submitted; its Slurm reason stays the admin's."""
    node = slurm_lab.names[-1]
    _ctl(f"scontrol update nodename={node} state=down reason='lab: slurmd stopped'")
    try:
        t0 = time.monotonic()
        rc, run = _validate(tmp_path, "down", "--node", node)
        assert rc == 1 and time.monotonic() - t0 < 60
        j = _judgement(run["out"], node)
        assert j["outcome"] == "INCOMPLETE"
        assert "Slurm cannot run a job on it: State=DOWN" in j["outcome_reason"], j
        assert _reason(node) == "lab: slurmd stopped"
        assert run["slurm"]["actions"][node].startswith("not drained: ")
    finally:
        _ctl(f"scontrol update nodename={node} state=resume")
    _wait_for(node, "idle", 30)


def test_a_job_that_never_starts_is_cancelled_with_squeues_reason_and_never_drained(
        slurm_lab, tmp_path):
    """Another job holds the node: the run's job stays pending, is cancelled at the site's
    pending limit (the lab inventory's rackready_slurm.pending_s, 15 s; 45 s by default: this
    test's cost) and the node is INCOMPLETE with squeue's reason, not drained."""
    node = slurm_lab.names[-1]
    holder = _ctl(f"sbatch --parsable -p gpu -w {node} --exclusive --job-name=lab-holder "
                  "-o /dev/null --wrap 'sleep 300'").strip()
    try:
        deadline = time.monotonic() + 30
        while "RUNNING" not in _ctl(f"squeue -h -j {holder} -o %T"):
            assert time.monotonic() < deadline, f"job {holder} never ran on {node}"
            time.sleep(0.5)
        t0 = time.monotonic()
        rc, run = _validate(tmp_path, "pending", "--node", node)
        assert rc == 1 and time.monotonic() - t0 < 60
        j = _judgement(run["out"], node)
        job = run["slurm"]["jobs"][node]
        assert j["outcome"] == "INCOMPLETE"
        assert f"Slurm job {job} never started: PENDING (" in j["outcome_reason"], j
        assert "JobState=CANCELLED" in _ctl(f"scontrol show job -o {job}")
        assert "drain" not in _states()[node] and _reason(node) == ""
        assert run["slurm"]["actions"][node].startswith(f"not drained: Slurm job {job} ")
    finally:
        _ctl(f"scancel {holder}")
    _wait_for(node, "idle", 60)


# what the role's wrapper (slurmd's HealthCheckProgram) runs, with the gate's own exit code
HEALTH = ("cd /opt/rackready/suite && PYTHONPATH=/opt/rackready/suite "
          "SLURMD_NODENAME={node} timeout 60 /opt/rackready/venv/bin/python -m validation "
          "health --profile {profile} --drain --site /etc/rackready/slurm-health-site.yml "
          "--sysroot /var/lib/hwsim/root --without raid")


def _health(lab_, node: str) -> tuple[int, str, float]:
    command = HEALTH.format(node=node, profile=lab_.spec(node).profile)
    t0 = time.monotonic()
    p = lab_.sh(node, command, check=False)
    return p.returncode, (p.stdout + p.stderr).strip(), time.monotonic() - t0


def test_the_health_gate_drains_a_faulted_node_by_itself_and_resumes_it(slurm_lab):
    node = FAULTED
    lab.fault(node, FAULT)
    try:
        rc, line, took = _health(slurm_lab, node)
        assert rc == 1 and line.startswith("UNHEALTHY") and f"drained {node}" in line, line
        # 10 s on the node (budgets.yml), the lab's SSH hops on top
        assert took < 10 + 5, took
        assert _reason(node).startswith("rackready: ")
    finally:
        lab.heal(node)
    rc, line, _ = _health(slurm_lab, node)
    assert rc == 0 and f"resumed {node}" in line, line
    _wait_for(node, "idle", 30)
