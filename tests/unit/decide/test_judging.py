"""The controller judges: real node-suite results (hwsim node) re-judged against the plan.

The node runs the real `python -m validation run` on simulated hardware; the
tests then edit what the node sent, as a misbehaving node would, and check
what the controller decides (rackready.decide.node) and what every report says.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from fault_expectations import HARDWARE_CHECKS

from rackready.decide.judge import judge_run
from rackready.decide.outcome import rack_outcome
from rackready.report.build import build_reports
from rackready.run.rundir import Plan, PlannedNode, RunDir
from rackready.site.paths import PROJECT_ROOT

PROFILE = "xe9680-h200-lab"


@pytest.fixture(scope="module")
def hw_run(healthy_hardware_run) -> tuple[dict, dict]:
    """One real node-side run of the hardware checks (once a session, in conftest.py):
    (this module's copy of its result.json, site)."""
    run = healthy_hardware_run
    result = run.result()
    assert run.returncode == 0 and result["outcome"] == "PASS", run.stderr[-2000:]
    EVIDENCE["artifacts"] = run.out / "artifacts"
    return result, copy.deepcopy(run.site)


# the artifacts the real run cites, fetched beside every node's result as the session does
EVIDENCE: dict[str, Path] = {}


def _run(tmp: Path, results: dict[str, dict | None], site: dict, only=None) -> RunDir:
    """A run directory as `invoke validate` leaves it before judging."""
    plan = Plan(run_id="r1", inventory="lab", level="quick", only=only,
                # these synthetic nodes have no BMC (lab profiles require one)
                nodes=[PlannedNode(n, PROFILE, {**site, "node": n}, without=("bmc",))
                       for n in results])
    run = RunDir.create(None, str(tmp / "run"), plan)
    for name, res in results.items():
        paths = run.prepare_node(name)
        if res is not None:
            paths.result.write_text(json.dumps({**res, "node": name}))
            if "artifacts" in EVIDENCE:
                shutil.copytree(EVIDENCE["artifacts"], paths.artifacts, dirs_exist_ok=True)
    return run


def test_narrowed_run_is_partial_never_pass(tmp_path, hw_run):
    result, site = hw_run
    run = _run(tmp_path, {"gpu01": result}, site, only=list(HARDWARE_CHECKS))
    j = judge_run(run)["gpu01"]
    assert j["outcome"] == "PARTIAL" and j["scope"]["partial"]
    assert "not an acceptance" in j["outcome_reason"]
    assert rack_outcome([j["outcome"]]) == "PARTIAL"
    build_reports(run.path, {"json", "junit"})
    rack = json.loads((run.report_dir / "rack.json").read_text())
    assert rack["outcome"] == "PARTIAL" and rack["partial"] is True
    junit = (run.report_dir / "junit.xml").read_text()
    assert 'type="partial"' in junit and "PARTIAL run" in junit


def test_a_result_with_a_subset_of_checks_is_not_a_pass(tmp_path, hw_run):
    # the node was asked for the whole quick level and sent its hardware checks only,
    # claiming PASS: the workload checks never reported
    result, site = hw_run
    j = judge_run(_run(tmp_path, {"gpu01": result}, site))["gpu01"]
    assert j["outcome"] == "INCOMPLETE"
    assert "gemm_burnin" in j["scope"]["missing_checks"]
    assert "did not report" in j["outcome_reason"]
    assert any("claimed PASS" in p for p in j["problems"])


def test_forged_one_check_pass_is_not_a_pass(tmp_path, hw_run):
    result, site = hw_run
    forged = {**result, "checks": [c for c in result["checks"] if c["check"] == "kernel.cmdline"],
              "verdicts": [], "outcome": "PASS"}
    j = judge_run(_run(tmp_path, {"gpu01": forged}, site, only=list(HARDWARE_CHECKS)))["gpu01"]
    missing = j["scope"]["missing_checks"]
    assert j["outcome"] == "INCOMPLETE" and len(missing) == len(HARDWARE_CHECKS) - 1


def test_the_node_verdicts_are_advisory(tmp_path, hw_run):
    # the node reports 7 GPUs and still claims PASS with passing verdicts
    result, site = hw_run
    res = copy.deepcopy(result)
    for c in res["checks"]:
        for m in c["measurements"]:
            if m["name"] == "gpu.count":
                m["value"] = 7
    j = judge_run(_run(tmp_path, {"gpu01": res}, site, only=list(HARDWARE_CHECKS)))["gpu01"]
    assert j["outcome"] == "FAIL" and j["node_claimed_outcome"] == "PASS"
    fail = [v for v in j["verdicts"] if v["outcome"] == "fail"]
    assert [v["metric"] for v in fail] == ["gpu.count"]
    assert j["profile_sha256"] and len(j["profile_sha256"]) == 64


def test_non_finite_numbers_become_null_and_fail(tmp_path, hw_run):
    result, site = hw_run
    run = _run(tmp_path, {"gpu01": None}, site, only=list(HARDWARE_CHECKS))
    text = json.dumps({**result, "node": "gpu01"})
    temp = next(m for c in result["checks"] for m in c["measurements"]
                if m["name"] == "gpu.temperature")
    text = text.replace(json.dumps(temp), json.dumps({**temp, "value": 1.5}).replace(
        "1.5", "NaN"), 1)
    run.paths("gpu01").result.write_text(text)
    shutil.copytree(EVIDENCE["artifacts"], run.paths("gpu01").artifacts)
    j = judge_run(run)["gpu01"]
    assert any("non-finite" in p for p in j["problems"])
    assert j["outcome"] == "FAIL"
    assert any(v["metric"] == "gpu.temperature" and v["outcome"] == "fail"
               and "could not be read" in v["message"] for v in j["verdicts"])


@pytest.mark.parametrize("edit, words", [
    (lambda r: r.update(schema_version="9.0"), "unknown schema_version"),
    (lambda r: r.update(level="burnin"), "the plan says 'quick'"),
    (lambda r: r.update(profile="xe9680-h100-lab"), "the plan says"),
    (lambda r: r.update(checks="all of them"), "no list of checks"),
])
def test_results_that_do_not_fit_the_plan_are_incomplete(tmp_path, hw_run, edit, words):
    result, site = hw_run
    res = copy.deepcopy(result)
    edit(res)
    j = judge_run(_run(tmp_path, {"gpu01": res}, site, only=list(HARDWARE_CHECKS)))["gpu01"]
    assert j["outcome"] == "INCOMPLETE", j["outcome_reason"]
    assert any(words in p for p in j["problems"]), j["problems"]


def test_a_node_that_never_reported_is_incomplete_everywhere(tmp_path, hw_run):
    result, site = hw_run
    run = _run(tmp_path, {"gpu01": result, "gpu02": None}, site, only=list(HARDWARE_CHECKS))
    run.write_session("gpu02", {"problem": "unreachable: gpu02: unreachable at 192.0.2.2"})
    judgements = judge_run(run)
    assert judgements["gpu02"]["outcome"] == "INCOMPLETE"
    assert "unreachable" in judgements["gpu02"]["outcome_reason"]
    build_reports(run.path, {"json", "html", "junit"})
    rack = json.loads((run.report_dir / "rack.json").read_text())
    assert rack["outcome"] == "INCOMPLETE" and rack["counts"]["INCOMPLETE"] == 1
    assert [n["node"] for n in rack["nodes"]] == ["gpu01", "gpu02"]
    assert "gpu02" in rack["incomplete_nodes"]
    assert "gpu02" in (run.report_dir / "rack.html").read_text()
    junit = (run.report_dir / "junit.xml").read_text()
    assert 'testsuite name="gpu02"' in junit and "unreachable" in junit


def test_judging_never_rewrites_the_node_result(tmp_path, hw_run):
    result, site = hw_run
    run = _run(tmp_path, {"gpu01": result}, site, only=list(HARDWARE_CHECKS))
    before = run.paths("gpu01").result.read_bytes()
    judge_run(run)
    assert run.paths("gpu01").result.read_bytes() == before
    assert json.loads(run.paths("gpu01").judgement.read_text())["by"] == "controller"


FLEET_PROFILE = """\
description: fleet test profile
extends: xe9680-h200
thresholds:
  - metric: nvlink.link_speed
    op: ">="
    value: 20
    unit: GB/s
    provenance: "test: floor well below every node"
    outlier_k: 4
"""


def _fleet_profile(tmp: Path) -> str:
    """A test profile beside copies of the real one it extends."""
    profiles = PROJECT_ROOT / "validation" / "profiles"
    for path in [profiles / "xe9680-h200.yml", *profiles.glob("_*.yml")]:  # and its bases
        shutil.copy(path, tmp / path.name)
    (tmp / "fleet.yml").write_text(FLEET_PROFILE)
    return str(tmp / "fleet.yml")


def _nvlink_run(tmp: Path, speeds: dict[str, float]) -> RunDir:
    profile = _fleet_profile(tmp)
    plan = Plan(run_id="r1", inventory="lab", level="quick", only=None,
                nodes=[PlannedNode(n, profile, {"node": n}) for n in speeds])
    run = RunDir.create(None, str(tmp / "run"), plan)
    for name, res in _nvlink_nodes(speeds, profile).items():
        run.prepare_node(name).result.write_text(json.dumps(res))
    return run


def _nvlink_nodes(speeds: dict[str, float], profile: str) -> dict[str, dict]:
    from validation.model import CheckResult, Measurement

    out = {}
    for name, speed in speeds.items():
        check = CheckResult("nvlink.topology", "ok", 0.1, tuple(
            Measurement("nvlink.link_speed", speed + 0.01 * gpu, "GB/s", {"gpu": str(gpu)})
            for gpu in range(8)))
        out[name] = {"schema_version": "1.0", "node": name, "profile": profile,
                     "level": "quick", "outcome": "PASS", "checks": [check.to_dict()],
                     "verdicts": []}
    return out


def test_fleet_judge_fails_the_node_far_below_its_peers(tmp_path, monkeypatch):
    # only nvlink.topology is expected, so the fleet comparison is the only difference
    monkeypatch.setattr("rackready.decide.node.expected_checks", lambda level, only: [])
    speeds = {"gpu01": 26.5, "gpu02": 26.4, "gpu03": 26.6, "gpu04": 22.0}
    run = _nvlink_run(tmp_path, speeds)
    judgements = judge_run(run)
    fleet = {n: [v for v in j["fleet_verdicts"] if v["outcome"] == "fail"]
             for n, j in judgements.items()}
    assert [n for n, f in fleet.items() if f] == ["gpu04"]
    assert fleet["gpu04"][0]["labels"]["node"] == "gpu04"
    assert judgements["gpu04"]["outcome"] == "FAIL"


def test_two_nodes_are_not_a_fleet(tmp_path, monkeypatch):
    monkeypatch.setattr("rackready.decide.node.expected_checks", lambda level, only: [])
    run = _nvlink_run(tmp_path, {"gpu01": 26.5, "gpu02": 20.0})
    assert all(j["fleet_verdicts"] == [] for j in judge_run(run).values())


def test_run_directories_are_created_exclusively(tmp_path):
    plan = Plan(run_id="r", inventory="lab", level="quick", only=None, nodes=[])
    RunDir.create(None, str(tmp_path / "a"), plan)
    from rackready.errors import UserError

    with pytest.raises(UserError, match="not empty"):
        RunDir.create(None, str(tmp_path / "a"), plan)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        RunDir.create(None, str(tmp_path / "file"), plan)
    with pytest.raises(UserError, match="a parent of it is a file"):
        RunDir.create(None, str(tmp_path / "file" / "run"), plan)


def test_resume_sets_aside_without_overwriting(tmp_path):
    plan = Plan(run_id="r", inventory="lab", level="quick", only=None,
                nodes=[PlannedNode("gpu01", PROFILE)])
    run = RunDir.create(None, str(tmp_path / "run"), plan)
    paths = run.prepare_node("gpu01")
    for i in range(2):
        paths.events.write_text(f"attempt {i}\n")
        run.set_aside_for_resume("gpu01")
    kept = sorted(p.read_text() for p in paths.dir.glob("events.interrupted-*.jsonl"))
    assert kept == ["attempt 0\n", "attempt 1\n"] and not paths.events.exists()


def test_a_torn_run_plan_is_one_line(tmp_path):
    from rackready.errors import UserError

    (tmp_path / "run.json").write_text('{"run_id": "x", "nodes": [')
    with pytest.raises(UserError, match="not a readable run plan") as e:
        RunDir.open(tmp_path)
    assert "\n" not in str(e.value)
    shutil.rmtree(tmp_path)


def _serials(res: dict) -> list[dict]:
    return [m for c in res["checks"] for m in c["measurements"] if m["name"] == "gpu.serial"]


def test_gpu_identity_is_cross_checked(tmp_path, hw_run):
    result, site = hw_run
    # one node reports the same serial for two GPUs
    twin = copy.deepcopy(result)
    first, second = _serials(twin)[:2]
    second["value"] = first["value"]
    j = judge_run(_run(tmp_path / "a", {"gpu01": twin}, site, only=list(HARDWARE_CHECKS)))
    assert j["gpu01"]["outcome"] == "INCOMPLETE"
    assert f"GPU serial {first['value']} reported for GPUs" in j["gpu01"]["outcome_reason"]
    # two nodes report the same GPUs: neither is believed, each names the other
    j = judge_run(_run(tmp_path / "b", {"gpu01": result, "gpu02": result}, site,
                       only=list(HARDWARE_CHECKS)))
    assert [j[n]["outcome"] for n in ("gpu01", "gpu02")] == ["INCOMPLETE", "INCOMPLETE"]
    assert "also reported by gpu02" in j["gpu01"]["outcome_reason"]
    assert "also reported by gpu01" in j["gpu02"]["outcome_reason"]
    # the inventory lists the serials (rackready_gpu_serials): a swapped GPU fails
    run = _run(tmp_path / "c", {"gpu01": result}, site, only=list(HARDWARE_CHECKS))
    want = [str(m["value"]) for m in _serials(result)]
    run.plan.nodes = [dataclasses.replace(run.plan.nodes[0],
                                          identity={"gpu_serials": ["1653999999999", *want[1:]]})]
    j = judge_run(run)["gpu01"]
    assert j["outcome"] == "FAIL", j["outcome_reason"]
    assert "differ from rackready_gpu_serials" in j["outcome_reason"]
    assert f"serial {want[0]}" in j["outcome_reason"] and "1653999999999" in j["outcome_reason"]
    run.plan.nodes = [dataclasses.replace(run.plan.nodes[0], identity={"gpu_serials": want})]
    assert judge_run(run)["gpu01"]["outcome"] == "PARTIAL"  # the honest node
