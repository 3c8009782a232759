"""Site calibration on the three-node lab, over SSH with real validation runs.

A calibration set must be large enough to find an outlier in: at least three nodes of a
profile. The lab has two of one profile (the XE9680-like lab-gpu01 and lab-gpu03; the
DL380a-like lab-gpu02 is alone in its own), so `invoke calibrate` on the lab is refused
before any node is reached -- the first test. A fourth lab node (about 1.5 min to boot
and converge) is beyond the lab tier's budget, so the three-node cases take the lab's two
real nodes and one synthetic node, said to be so:

- lab-gpu01 and lab-gpu03 are validated at the standard level's hardware checks against
  the uncalibrated profile, as `invoke calibrate` runs them (calibrating: no overlay),
  and must pass it as invoke calibrate requires (rackready.steps.calibrate._judged);
- SYNTHETIC is no lab node: its GPUDirect rails are what hwsim's ib_write_bw model
  answers for a node of that name with lab-gpu01's NICs and GPUs (hwsim's stable
  per-port spread is a hash of the node's name, so its figures are its own, not a
  relabelled copy of a lab node's run). It stands in for the third node only in the
  statistics (rackready.decide.calibration), never in a run.

In the lab the calibratable floor is the GPUDirect rail bandwidth (hwsim's ib_write_bw
answers at a stable per-port rate; the CPU workloads' lab smoke floors are no performance
expectation and are not calibrated). With the overlay those three give:

- the lab's slow-rail and thermal-throttle faults still fail the node (a calibration
  cannot absorb a gross fault);
- a rail at 85 % of its rate, above the profile's gross-fault line (only "below expected"
  without calibration), fails against the calibrated floor;
- a set of the three with that rail on lab-gpu03 is refused naming lab-gpu03, both by
  the step (it does not pass the uncalibrated profile) and by the statistics.
"""

from __future__ import annotations

import json

import pytest
import yaml
from fault_expectations import HARDWARE_CHECKS, naming_failures

from rackready.decide.calibration import calibrate_profile, overlay_document, overlay_path
from rackready.decide.node import load_judging_profile, parse_checks
from rackready.errors import UserError
from rackready.run.rundir import RunDir
from rackready.site import inventory
from rackready.steps import validate
from rackready.steps.calibrate import _judged, run_calibration
from rackready.steps.validate import run_validation
from rackready_lab import lab
from rackready_lab.hwsim.cli.ib_write_bw import bandwidth_gbps
from rackready_lab.hwsim.sysroot import locked_node_state, read_node_state
from validation.model import CheckResult, Measurement

pytestmark = [pytest.mark.lab, pytest.mark.lab_phase("three-nodes")]

REFERENCES = ["lab-gpu01", "lab-gpu03"]
SYNTHETIC = "synthetic-gpu04"
SUSPECT = "lab-gpu03"
PROFILE = "xe9680-h200-lab"
RAIL = "rdma.gpudirect_bw_gbps"
MILD = 0.85  # of the rail's rate: above the profile's gross line, under the floor
ONLY = ",".join(HARDWARE_CHECKS)
GROSS_LINE = 252.0  # Gb/s: the profile's gross-fault line for a rail (validation/profiles)
TOO_SMALL = ("calibration needs at least 3 known-good nodes (fewer cannot find an outlier "
             "among them: of two, neither outvotes the other)")


def test_the_labs_two_nodes_of_a_profile_are_refused_as_too_small(three_nodes, tmp_path):
    """Refused before any node is reached: no run directory, no overlay."""
    for nodes, short in [(REFERENCES, [f"{PROFILE}: {TOO_SMALL}; --nodes gives 2 "
                                       "(lab-gpu01, lab-gpu03)"]),
                         (["lab-gpu01", "lab-gpu02", "lab-gpu03"],
                          [f"{PROFILE}: {TOO_SMALL}; --nodes gives 2 (lab-gpu01, lab-gpu03)",
                           f"dl380a-gen12-h200nvl-lab: {TOO_SMALL}; --nodes gives 1 "
                           "(lab-gpu02)"])]:
        with pytest.raises(UserError) as err:
            run_calibration("lab", ",".join(nodes), out=str(tmp_path / "run"), only=ONLY)
        assert str(err.value) == "; ".join(f"profile {s}" for s in short)
    assert not (tmp_path / "run").exists()
    assert not overlay_path(three_nodes.inventory.parent, PROFILE).exists()


def _calibration_run(out, nodes: list[str]) -> tuple[list[str], dict[str, list[CheckResult]]]:
    """The nodes' hardware checks at the standard level against the uncalibrated profile,
    as invoke calibrate runs them: the step's refusals, and every node's checks."""
    run_validation(None, "lab", "standard", str(out), formats="json", nodes=nodes,
                   calibrating=True, only=ONLY)
    run = RunDir.open(out)
    refusals, _, _ = _judged(run, nodes, narrowed=True)
    return refusals, {n: parse_checks(run.read_result(n).result or {}, []) for n in nodes}


def _synthetic(model: list[CheckResult]) -> list[CheckResult]:
    """SYNTHETIC's rails: hwsim's ib_write_bw model for a node of that name with
    lab-gpu01's NICs and GPUs, each rail on the GPU lab-gpu01's run paired it with (its
    labels), none of lab-gpu01's figures."""
    state = read_node_state(lab.find("lab-gpu01").root)
    nics = {n["name"]: n for n in state["nics"]}
    rails = [m for r in model for m in r.measurements if m.name == RAIL]
    assert len(rails) == 8, rails
    ms = tuple(Measurement(RAIL, bandwidth_gbps({**state, "node": SYNTHETIC},
                                                nics[m.labels["nic"]],
                                                state["gpus"][int(m.labels["gpu"])]),
                           "Gb/s", dict(m.labels)) for m in rails)
    assert [m.value for m in ms] != [m.value for m in rails]  # its own, not a copy
    return [CheckResult("rdma.gpudirect_bw", "ok", 1.0, ms)]


def _profile():
    node = inventory.find(REFERENCES[0], "lab")
    return load_judging_profile(PROFILE, tuple(node.validation_without), None,
                                validate._site(node))


@pytest.fixture(scope="module")
def references(three_nodes, tmp_path_factory) -> dict[str, list[CheckResult]]:
    for name in REFERENCES:
        lab.heal(name)
    refusals, results = _calibration_run(tmp_path_factory.mktemp("calibrate") / "healthy",
                                         REFERENCES)
    assert refusals == []
    return {**results, SYNTHETIC: _synthetic(results["lab-gpu01"])}


@pytest.fixture(scope="module")
def overlay(references):
    """The overlay calibrated on the two lab nodes and SYNTHETIC, written where invoke
    calibrate writes it (removed afterwards: later lab tests judge against the profile's
    own limits)."""
    path = overlay_path(inventory.inventory_path("lab").parent, PROFILE)
    prof = _profile()
    limits, refusals = calibrate_profile(prof, references)
    assert refusals == []
    assert [x["metric"] for x in limits] == [RAIL], "only the rails calibrate in the lab"
    names = [*REFERENCES, SYNTHETIC]
    doc = overlay_document(prof, limits, names, {}, "standard", "lab-calibration",
                           "2026-12-05T00:00:00+00:00", {}, checks=list(HARDWARE_CHECKS))
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=100))
    yield path
    path.unlink(missing_ok=True)


def _rail_limit(path) -> dict:
    doc = yaml.safe_load(path.read_text())
    limits = [t for t in doc["thresholds"] if t["metric"] == RAIL]
    assert len(limits) == 1, doc["thresholds"]
    return {**limits[0], "doc": doc}


def _hardware_run(tmp_path, name: str) -> dict:
    out = tmp_path / name
    run_validation(SUSPECT, "lab", "quick", str(out), formats="json",
                   only=",".join(HARDWARE_CHECKS))
    return json.loads((out / SUSPECT / "judgement.json").read_text())


def _mild_slow_rail() -> str:
    """The lab's slow-rail fault, made milder: that NIC carries 85 % of its rate."""
    lab.fault(SUSPECT, "slow-rail")
    with locked_node_state(lab.find(SUSPECT).root) as state:
        nic = next(n for n in state["nics"] if "bw_factor" in n)
        nic["bw_factor"] = MILD
    return nic["name"]


def test_calibration_writes_a_tighter_floor_with_its_provenance(overlay):
    limit = _rail_limit(overlay)
    doc = limit.pop("doc")
    assert [n["name"] for n in doc["nodes"]] == [*REFERENCES, SYNTHETIC]
    assert doc["level"] == "standard" and doc["profile"] == PROFILE
    assert doc["checks"] == list(HARDWARE_CHECKS) and "only" in doc["source"]
    # hwsim's rails run at 96-97.5 % of 400 Gb/s: tighter than the 360 floor, and
    # never looser than the gross line
    assert 360 < limit["value"] < 390, limit
    assert all(n in limit["provenance"] for n in [*REFERENCES, SYNTHETIC])


def test_a_calibrated_run_says_so_and_a_healthy_node_passes(overlay, tmp_path):
    lab.heal(SUSPECT)
    judged = _hardware_run(tmp_path, "healthy")
    assert [v["message"] for v in judged["verdicts"] if v["outcome"] == "fail"] == []
    assert "site calibration" in judged["limits"]["calibration"]
    rails = [v for v in judged["verdicts"] if v["metric"] == RAIL]
    assert rails and {v["threshold"]["tier"] for v in rails} == {"calibrated"}


@pytest.mark.parametrize("kind", ["slow-rail", "thermal-throttle"])
def test_gross_faults_still_fail_the_node_naming_the_part(overlay, tmp_path, kind):
    lab.fault(SUSPECT, kind)
    try:
        record = read_node_state(lab.find(SUSPECT).root)["faults"][-1]
        judged = _hardware_run(tmp_path, kind)
    finally:
        lab.heal(SUSPECT)
    assert judged["outcome"] == "FAIL"
    assert naming_failures(judged["verdicts"], kind, record["component"], raid=False), \
        [(v["check"], v["message"]) for v in judged["verdicts"] if v["outcome"] == "fail"]


def test_a_mild_slow_rail_fails_against_the_calibrated_floor(overlay, tmp_path):
    try:
        nic = _mild_slow_rail()
        judged = _hardware_run(tmp_path, "mild")
    finally:
        lab.heal(SUSPECT)
    failed = [v for v in judged["verdicts"] if v["outcome"] == "fail" and v["metric"] == RAIL]
    assert judged["outcome"] == "FAIL" and len(failed) == 1, judged["outcome_reason"]
    assert failed[0]["threshold"]["tier"] == "calibrated"
    assert f"NIC {nic}" in failed[0]["message"] + " " + failed[0]["remediation"]
    # the same figure against the profile's own floor: above its gross line
    assert failed[0]["value"] > GROSS_LINE


def test_three_nodes_with_one_slow_rail_are_refused_naming_the_node(references, tmp_path):
    """lab-gpu03 with its mild slow rail, run as invoke calibrate runs it, beside lab-gpu01's
    and SYNTHETIC's healthy figures: the step refuses it (below expected against the
    uncalibrated profile), and so do the statistics, naming its rail."""
    try:
        nic = _mild_slow_rail()
        refused, slow = _calibration_run(tmp_path / "mild", [SUSPECT])
    finally:
        lab.heal(SUSPECT)
    assert len(refused) == 1 and refused[0].startswith(f"{SUSPECT}: "), refused
    assert "below expected" in refused[0] and f"NIC {nic}" in refused[0], refused
    _, refusals = calibrate_profile(_profile(), {**references, **slow})
    assert len(refusals) == 1 and refusals[0].startswith(f"{SUSPECT}: "), refusals
    assert f"nic={nic}" in refusals[0] and "misses the profile's own limit" in refusals[0]
