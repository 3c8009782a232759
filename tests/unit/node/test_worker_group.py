"""The long-lived worker group and the timeouts that kill, on CPU (gloo), 2 processes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.integration


from validation import procs, runner  # noqa: E402
from validation.checks import registry  # noqa: E402
from validation.checks.registry import CheckSpec  # noqa: E402
from validation.profile import load_profile, scope  # noqa: E402
from validation.workloads.launch import (  # noqa: E402
    WorkerGroup,
    WorkloadFailed,
    WorkloadTimedOut,
    run_workload,
)

HANG = "tests.unit.workloads.hang"
HBM = ["--device", "cpu", "--bw-bytes", str(1 << 20), "--pattern-bytes", str(1 << 20),
       "--bits", "0:64:16", "--random-passes", "1"]
COLL = ["--device", "cpu", "--sizes", "64K", "--iters", "1", "--repeats", "1", "--pair-size",
        "0", "--ops", "all_reduce,alltoall"]
# figures that do not depend on timing: the same in a group as in separate launches
EXACT = ("hbm.pattern_bytes", "hbm.pattern_errors", "nccl.correct")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _key(ms):
    return sorted((m.name, tuple(sorted(m.labels.items())), m.value if m.name in EXACT else None)
                  for m in ms)


def test_group_runs_workloads_with_one_init_and_same_measurements(tmp_path):
    g = WorkerGroup(2, "cpu", tmp_path / "group")
    try:
        hbm_g, _ = g.run("hbm", HBM, tmp_path / "g" / "hbm", timeout_s=120)
        assert g.pg_inits() == [1, 1]
        coll_g, _ = g.run("collectives", COLL, tmp_path / "g" / "coll", timeout_s=120)
        # the second workload joined the group the first one used: still one init per rank
        assert g.pg_inits() == [1, 1]
        assert g.launches == 1
    finally:
        g.close()
    assert not g.alive()
    hbm_s, _ = run_workload("hbm", 2, HBM, tmp_path / "s" / "hbm", timeout_s=120)
    coll_s, _ = run_workload("collectives", 2, COLL, tmp_path / "s" / "coll", timeout_s=120)
    assert hbm_g and coll_g
    assert _key(hbm_g) == _key(hbm_s)
    assert _key(coll_g) == _key(coll_s)
    assert all(m.value is True for m in coll_g if m.name == "nccl.correct")


def test_hung_workload_kills_the_whole_group_and_the_rest_do_not_run(tmp_path):
    g = WorkerGroup(2, "cpu", tmp_path / "group")
    g.run("hbm", HBM, tmp_path / "hbm", timeout_s=120)
    leader = g._proc.pid  # noqa: SLF001  (the session's id: torchrun started it)
    t0 = time.monotonic()
    with pytest.raises(WorkloadTimedOut, match="ran past 8 s"):
        g.run(HANG, ["--device", "cpu"], tmp_path / "hang", timeout_s=8, label="hangcheck")
    assert time.monotonic() - t0 < 60
    pids = [int(p) for f in (tmp_path / "hang").glob("pids.rank*") for p in f.read_text().split()]
    assert len(pids) == 4  # both ranks and the child each started
    assert not [p for p in pids if _alive(p)]
    assert procs.group_members(leader) == []
    with pytest.raises(procs.NotRun,
                       match="not run: worker group killed after hangcheck timed out"):
        g.run("hbm", HBM, tmp_path / "hbm2", timeout_s=120)


def test_a_failing_workload_ends_the_group_and_the_next_starts_a_fresh_one(tmp_path):
    g = WorkerGroup(2, "cpu", tmp_path / "group")
    try:
        with pytest.raises(WorkloadFailed, match="unknown op"):
            g.run("collectives", ["--device", "cpu", "--ops", "nope"], tmp_path / "c",
                  timeout_s=120)
        ms, _ = g.run("hbm", HBM, tmp_path / "hbm", timeout_s=120)
        assert ms and g.launches == 2 and g.killed_after is None
    finally:
        g.close()


def _register(monkeypatch, name, fn, needs=("gpu", "torch"), timeout_s=8.0):
    monkeypatch.setitem(registry._REGISTRY, name, CheckSpec(name, fn, needs, registry.LEVELS,
                                                            timeout_s, name))


def test_node_fails_naming_the_hung_check_and_no_worker_survives(tmp_path, monkeypatch):
    from validation.checks import workload_checks as wc

    seen: dict[str, object] = {}

    def hung(ctx):
        yield from wc._run(ctx, HANG, [], 5)

    def after(ctx):
        seen["group"] = ctx.cache.get("workloads.group")
        yield from wc._run(ctx, "hbm", HBM[2:], 5)

    def plain(ctx):
        seen["plain_ran"] = True
        return []

    # its workload runs to the check's deadline less workload_checks.KILL_MARGIN_S
    _register(monkeypatch, "t.hung", hung, timeout_s=30.0)
    _register(monkeypatch, "t.after", after)
    _register(monkeypatch, "t.plain", plain, needs=())
    profile = scope(load_profile("xe9680-h200"), gpus=2)
    site = {"workloads": {"device": "cpu"}}
    with open(os.devnull, "w") as devnull:
        result = runner.run_suite(profile, "quick", tmp_path / "out", site=site,
                                  only=["t.hung", "t.plain", "t.after"], stdout=devnull)
    by = {c["check"]: c for c in result["checks"]}
    assert by["t.hung"]["status"] == "timeout", by["t.hung"]
    assert by["t.plain"]["status"] == "ok" and seen.get("plain_ran")
    assert by["t.after"]["status"] == "error"
    assert by["t.after"]["message"] == "not run: worker group killed after t.hung timed out"
    assert result["outcome"] == "FAIL"
    assert any(v["check"] == "t.hung" and v["outcome"] == "fail" for v in result["verdicts"])
    pids = [int(p) for f in (tmp_path / "out").rglob("pids.rank*") for p in f.read_text().split()]
    assert len(pids) == 4 and not [p for p in pids if _alive(p)]


def test_check_timeout_kills_what_the_check_started_before_the_next_check(tmp_path,
                                                                          monkeypatch):
    started: dict[str, int] = {}
    alive_at_next: list[bool] = []

    def stuck(ctx):
        # a probe that ignores its own timeout: the runner's backstop must kill it
        p = subprocess.Popen(["sleep", "600"], start_new_session=True)
        started["pid"] = p.pid
        p.wait()
        return []

    def nxt(ctx):
        alive_at_next.append(_alive(started["pid"]))
        return []

    _register(monkeypatch, "t.stuck", stuck, needs=(), timeout_s=3.0)
    _register(monkeypatch, "t.next", nxt, needs=())
    profile = scope(load_profile("xe9680-h200"), gpus=2)
    with open(os.devnull, "w") as devnull:
        result = runner.run_suite(profile, "quick", tmp_path / "out", only=["t.stuck", "t.next"],
                                  stdout=devnull)
    by = {c["check"]: c for c in result["checks"]}
    assert by["t.stuck"]["status"] == "timeout"
    assert "killed" in by["t.stuck"]["message"]
    assert alive_at_next == [False]
    assert result["outcome"] == "FAIL"
