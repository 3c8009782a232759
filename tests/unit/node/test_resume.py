"""`python -m validation run --resume`: an interrupted run continues in its own directory.

The fake node (vendor tools printing the real H200 capture, a generated sysroot) is the one
of test_validation_cli. Interruptions are made two ways: the burn-in is killed for real
(SIGKILL to the runner, torchrun and its workers, as a power loss would), and for the fast
checks the events of a finished real run are cut back to the moment of an interruption.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_validation_cli as tvc
import yaml
from test_checks_gpu import GPU1, xml_fault

from validation.result_schema import check_result
from validation.workloads.burnin_log import (
    IntervalLog,
    LogBusy,
    burn_clock,
    done_s,
    read_intervals,
    sdc_carry,
    summarize,
)

pytestmark = pytest.mark.integration  # the suite as real processes

node = tvc.node  # the fake node fixture
FAST = "gpu.inventory,gpu.health,kernel.cmdline,health.delta"


def events_of(text: str) -> list[dict]:
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def run_fast(node, *extra: str, level: str = "quick", profile: str = "xe9680-h200"):
    return tvc.cli(node, "run", "--profile", profile, "--level", level, "--out",
                   str(node["out"]), "--sysroot", str(node["root"]), *tvc.SCOPE,
                   "--only", FAST, *extra)


def interrupt_after(out: Path, last_finished: str, started_next: bool = True) -> list[dict]:
    """Cut a finished run's events back to an interruption: everything up to the
    check_finished of `last_finished`, then the next check_started (the check that was
    running when the node went down); result.json never got written."""
    lines = (out / "events.jsonl").read_text().splitlines()
    evs = events_of("\n".join(lines))
    cut = next(i for i, e in enumerate(evs)
               if e["event"] == "check_finished" and e["check"] == last_finished) + 1
    if started_next:
        cut = next(i for i, e in enumerate(evs) if i >= cut and e["event"] == "check_started") + 1
    # and a torn half line, as a write cut short by the power going leaves it
    (out / "events.jsonl").write_text("\n".join(lines[:cut]) + "\n" + lines[cut][:17])
    (out / "result.json").unlink()
    return evs[:cut]


# -- (b) finished checks are taken over, the rest runs, the health counters stand --------

def test_resume_takes_over_finished_checks_and_keeps_start_counters(node):
    first = run_fast(node)
    assert first.returncode == 0, first.stderr
    original = json.loads((node["out"] / "result.json").read_text())
    kept = interrupt_after(node["out"], "gpu.health")  # kernel.cmdline was running
    assert not any(e["event"] == "check_finished" and e["check"] == "kernel.cmdline"
                   for e in kept)
    # While the node was down GPU 1 logged 3 PCIe replays and warmed up. A re-run
    # gpu.health would read 61 C; re-read start counters would hide the replays.
    (node["data"] / "nvidia-smi-q-x.xml").write_text(
        xml_fault(GPU1, replay_counter="3", gpu_temp="61 C"))

    proc = run_fast(node, "--resume")
    assert proc.returncode == 1, proc.stderr  # the replays fail the node
    assert "Traceback" not in proc.stderr
    evs = events_of(proc.stdout)
    assert evs[0]["event"] == "run_started" and evs[0]["resumed"] is True
    assert evs[0]["run_id"] == kept[0]["run_id"]
    resumed = [e["check"] for e in evs if e["event"] == "check_finished" and e.get("resumed")]
    assert resumed == ["gpu.inventory", "gpu.health"]
    ran = [e["check"] for e in evs if e["event"] == "check_started" and not e.get("resumed")]
    assert ran == ["kernel.cmdline", "health.delta"]
    measured = {e["check"] for e in evs if e["event"] == "measurement"}
    assert measured == {"kernel.cmdline", "health.delta"}
    assert evs[-1] == {**evs[-1], "event": "run_finished", "outcome": "FAIL"}
    # the node keeps the interrupted stream; the new one is complete on its own
    assert (node["out"] / "events.interrupted.jsonl").is_file()
    assert events_of((node["out"] / "events.jsonl").read_text()) == evs

    result = json.loads((node["out"] / "result.json").read_text())
    assert check_result(result) == []  # resumed_at, the taken-over checks
    assert result["run_id"] == original["run_id"] and result["started"] == original["started"]
    assert len(result["resumed_at"]) == 1
    by_check = {c["check"]: c for c in result["checks"]}
    orig = {c["check"]: c for c in original["checks"]}
    assert by_check["gpu.health"] == orig["gpu.health"]  # taken over as it was
    temp1 = [m["value"] for m in by_check["gpu.health"]["measurements"]
             if m["name"] == "gpu.temperature" and m["labels"]["gpu"] == "1"]
    assert temp1 and temp1[0] != 61
    assert by_check["kernel.cmdline"]["status"] == "ok"
    delta = {m["labels"]["gpu"]: m["value"] for m in by_check["health.delta"]["measurements"]
             if m["name"] == "health.delta.pcie_replay"}
    assert delta == {"0": 0, "1": 3}
    bad = [(v["metric"], v["labels"].get("gpu")) for v in result["verdicts"]
           if v["outcome"] == "fail"]
    assert bad == [("health.delta.pcie_replay", "1")]


def test_resume_without_recorded_start_counters_fails_the_delta(node):
    assert run_fast(node).returncode == 0
    interrupt_after(node["out"], "gpu.health")
    path = node["out"] / "events.jsonl"
    lines = [x for x in path.read_text().splitlines() if '"health_start"' not in x]
    path.write_text("\n".join(lines) + "\n")  # an interruption before they were written
    proc = run_fast(node, "--resume")
    assert proc.returncode == 1
    result = json.loads((node["out"] / "result.json").read_text())
    delta = next(c for c in result["checks"] if c["check"] == "health.delta")
    assert delta["status"] == "error" and "no start-of-run counters" in delta["message"]


def test_resumed_run_interrupted_again_resumes(node):
    assert run_fast(node).returncode == 0
    interrupt_after(node["out"], "gpu.inventory")
    assert run_fast(node, "--resume").returncode == 0
    interrupt_after(node["out"], "gpu.health")  # the resumed run is interrupted too
    proc = run_fast(node, "--resume")
    assert proc.returncode == 0, proc.stderr
    evs = events_of(proc.stdout)
    assert [e["check"] for e in evs if e["event"] == "check_finished" and e.get("resumed")] \
        == ["gpu.inventory", "gpu.health"]
    result = json.loads((node["out"] / "result.json").read_text())
    assert len(result["resumed_at"]) == 2
    assert (node["out"] / "events.interrupted.2.jsonl").is_file()


def test_start_and_finish_are_one_instant_each(node, monkeypatch):
    """result.json's started/finished and the run_started/run_finished events' ts are one
    clock read each, so a resume (which reads the start back from the event) keeps the
    original start exactly. A clock that ticks on every read makes a second read visible."""
    import io
    import itertools

    from validation import runner
    from validation.checks import registry
    from validation.profile import load_profile, scope, with_site
    from validation.resume import read_previous

    ticks = itertools.count()

    def clock() -> str:
        return f"2026-01-01T00:00:{next(ticks):02d}.000+00:00"

    monkeypatch.setattr(runner, "_now", clock)
    monkeypatch.setattr(registry, "_now", clock)
    profile = with_site(scope(load_profile("xe9680-h200"), 2, tuple(tvc.SCOPE[3].split(","))),
                        {})
    out = node["out"]

    def run(resume=None) -> tuple[dict, list[dict]]:
        buf = io.StringIO()
        result = runner.run_suite(profile, "quick", out, node["root"], only=["kernel.cmdline"],
                                  stdout=buf, resume=resume)
        return result, events_of(buf.getvalue())

    first, evs = run()
    assert evs[0]["event"] == "run_started" and evs[0]["ts"] == first["started"]
    assert evs[-1]["event"] == "run_finished" and evs[-1]["ts"] == first["finished"]
    (out / "result.json").unlink()  # interrupted before the result was fetched
    again, evs = run(read_previous(out))
    assert again["started"] == first["started"]
    assert evs[0]["ts"] == again["resumed_at"][-1] and evs[-1]["ts"] == again["finished"]


# -- (c) a different run is refused ------------------------------------------------------

@pytest.mark.parametrize("change", [{"level": "standard"}, {"profile": "xe9680-h100"}])
def test_resume_with_other_profile_or_level_is_refused(node, change):
    assert run_fast(node).returncode == 0
    interrupt_after(node["out"], "gpu.health")
    before = (node["out"] / "events.jsonl").read_text()
    proc = run_fast(node, "--resume", **change)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "--profile xe9680-h200 --level quick" in proc.stderr
    assert proc.stdout == "" and (node["out"] / "events.jsonl").read_text() == before


def test_resume_with_nothing_to_resume_is_refused(node):
    proc = run_fast(node, "--resume")
    assert proc.returncode == 2 and "nothing to resume" in proc.stderr
    assert "Traceback" not in proc.stderr


# -- (d) a finished run is left alone ----------------------------------------------------

@pytest.mark.parametrize("fault,code", [(None, 0), ("Yes", 1)])
def test_resume_of_finished_run_does_nothing(node, fault, code):
    if fault:
        (node["data"] / "nvidia-smi-q-x.xml").write_text(
            xml_fault(GPU1, remapped_row_failure=fault))
    assert run_fast(node).returncode == code
    files = {p.name: p.read_bytes() for p in node["out"].iterdir() if p.is_file()}
    proc = run_fast(node, "--resume")
    assert proc.returncode == code
    assert "already finished" in proc.stderr and proc.stdout == ""
    assert {p.name: p.read_bytes() for p in node["out"].iterdir() if p.is_file()} == files


# -- (a) the burn-in continues from its last completed interval ---------------------------

DURATION = 6.0
INTERVAL = 0.25


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def test_burnin_killed_then_resumed_covers_whole_window(node, tmp_path):
    pytest.importorskip("torch")
    site = tmp_path / "site.yml"
    site.write_text(yaml.safe_dump({"workloads": {"device": "cpu", "gemm_burnin": {
        "duration_s": DURATION, "interval_s": INTERVAL, "ramp_s": 0.5, "sdc_every_s": 1}}}))
    args = ["run", "--profile", "xe9680-h200-lab", "--level", "burnin", "--out",
            str(node["out"]), "--sysroot", str(node["root"]), "--site", str(site),
            "--gpus", "2", "--without", "rdma,nvme,raid,fabric-manager,nccl-tests,fio",
            "--only", "gemm_burnin"]
    env = {**os.environ, "PATH": f"{node['bin']}:{os.environ['PATH']}"}
    wdir = node["out"] / "artifacts/workloads/gemm_burnin"
    logs = [wdir / "intervals.rank0.jsonl", wdir / "intervals.rank1.jsonl"]
    proc = subprocess.Popen([sys.executable, "-m", "validation", *args], cwd=tvc.REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not all(len(read_intervals(p)) >= 4 for p in logs):
            assert proc.poll() is None, "the burn-in ended before it could be interrupted"
            assert time.monotonic() < deadline, "no burn-in intervals within 90 s"
            time.sleep(0.05)
    finally:
        # power loss: the runner, torchrun (its own session) and every worker at once
        for pid in _descendants(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
    before = [read_intervals(p) for p in logs]
    started = events_of((node["out"] / "events.jsonl").read_text())[0]
    assert not (node["out"] / "result.json").exists()
    assert all(r["segment"] == 0 for recs in before for r in recs)

    resumed = subprocess.run([sys.executable, "-m", "validation", *args, "--resume"],
                             cwd=tvc.REPO, env=env, capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = [read_intervals(p) for p in logs]
    for old, new in zip(before, after, strict=True):
        # the completed intervals stand as written and were not run again
        assert new[:len(old)] == old
        second = new[len(old):]
        assert second and all(r["segment"] == 1 for r in second)
        assert len(second) < len(new)
        # the burn-in clock goes on where it stopped: no overlap, no restart at 0
        starts = [r["t_s"] for r in new]
        assert starts == sorted(starts) and second[0]["t_s"] >= burn_clock(old)
    # rank 0's plan (every rank runs it) covers exactly what was left, to rounding
    old0, new0 = before[0], after[0][len(before[0]):]
    planned = new0[0]["plan_intervals"] * new0[0]["nominal_s"]
    assert len(new0) == new0[0]["plan_intervals"]
    assert abs(done_s(old0) + planned - DURATION) <= new0[0]["nominal_s"] / 2 + 1e-3

    result = json.loads((node["out"] / "result.json").read_text())
    assert result["run_id"] == started["run_id"] and result["outcome"] == "PASS"
    check = next(c for c in result["checks"] if c["check"] == "gemm_burnin")
    assert check["status"] == "ok"
    ms = check["measurements"]
    for g, recs in enumerate(after):
        # the reported intervals are the union: earlier ones and new ones
        got = [m["labels"]["t_s"] for m in ms
               if m["name"] == "gemm.interval_tflops" and m["labels"]["gpu"] == str(g)]
        assert got == [str(round(r["t_s"], 2)) for r in recs]
        screens = next(int(m["labels"]["screens"]) for m in ms
                       if m["name"] == "gemm.sdc_mismatches" and m["labels"]["gpu"] == str(g))
        # the first process's screens count too (plus one last screen at the end)
        assert screens == sdc_carry(recs)[0] + 1 > recs[-1]["sdc_screens"] + 1
    judged = {(v["metric"], v["labels"].get("gpu"), v["outcome"]) for v in result["verdicts"]}
    assert {("gemm.tflops", "0", "pass"), ("gemm.tflops", "1", "pass"),
            ("gemm.sdc_mismatches", "0", "pass"), ("gemm.sdc_mismatches", "1", "pass")} <= judged
    assert (wdir / "gemm_burnin.log.1").is_file()  # the interrupted worker's log is kept


# -- the interval log on its own ---------------------------------------------------------

def rec(seg: int, i: int, **kw) -> dict:
    base = {"dtype": "bf16", "segment": seg, "i": i, "t_s": float(i), "dur_s": 1.0,
            "tflops": 10.0, "steady": True, "sdc_screens": 0, "sdc_repeat_bad": 0,
            "power_w": None, "power_limit_w": None, "reasons": None}
    return {**base, **kw}


def test_interval_log_is_appended_and_a_torn_line_dropped(tmp_path):
    path = tmp_path / "intervals.rank0.jsonl"
    log = IntervalLog(path, fresh=True)
    log.append(rec(0, 0))
    log.append(rec(0, 1))
    log.close()
    with path.open("a") as fh:
        fh.write('{"dtype": "bf16", "segm')  # the write the kill cut short
    assert [r["i"] for r in read_intervals(path)] == [0, 1]
    log = IntervalLog(path, fresh=False)  # a resume appends
    log.append(rec(1, 0))
    log.close()
    assert [(r["segment"], r["i"]) for r in read_intervals(path)] == [(0, 0), (0, 1), (1, 0)]
    assert read_intervals(tmp_path / "absent.jsonl") == []


def test_interval_log_refuses_a_second_writer(tmp_path):
    path = tmp_path / "intervals.rank0.jsonl"
    held = IntervalLog(path, fresh=True)
    held.append(rec(0, 0))
    with pytest.raises(LogBusy, match="still running"):
        IntervalLog(path, fresh=True)
    held.close()
    assert len(read_intervals(path)) == 1  # the refused fresh start truncated nothing


def test_sdc_carry_sums_each_segments_last_count():
    recs = [rec(0, 0, sdc_screens=2, sdc_repeat_bad=0), rec(0, 1, sdc_screens=3,
            sdc_repeat_bad=5), rec(1, 0, sdc_screens=2, sdc_repeat_bad=1)]
    assert sdc_carry(recs) == (3 + 2, 5 + 1)
    assert sdc_carry([]) == (0, 0)


def test_summary_covers_every_segment_and_skips_each_ramp():
    # segment 0 ramps (5), holds 10; segment 1 ramps again (1), then holds 20
    recs = [rec(0, 0, tflops=5.0, steady=False), rec(0, 1), rec(0, 2),
            rec(1, 0, tflops=1.0, steady=False), rec(1, 1, tflops=20.0), rec(1, 2, tflops=20.0),
            rec(1, 3, tflops=20.0)]
    assert summarize(recs)["tflops"] == 20.0  # median of 10,10,20,20,20
    assert summarize(recs[:3])["tflops"] == 10.0
    power = [rec(0, 0, steady=False, power_w=100.0, power_limit_w=700.0, reasons=1),
             rec(0, 1, power_w=690.0, power_limit_w=700.0, reasons=4),
             rec(1, 0, power_w=630.0, power_limit_w=700.0, reasons=0)]
    s = summarize(power)
    assert s["power_fraction"] == pytest.approx(0.9)  # the resumed segment's weak interval
    assert s["reasons"] == 5
    assert summarize([rec(0, 0)])["power_fraction"] is None  # no NVML: no figure
