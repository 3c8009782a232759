"""Site calibration (rackready.decide.calibration): floors from known-good nodes by robust
statistics, outliers refused by name, never looser than the gross line; the overlay as
the judge and the planner read it.

Per-NIC GPUDirect figures are made here: about 390 Gb/s on each of 8 rails, the lab's
simulated ConnectX-7 NDR (97.5 % of 400 Gb/s less a stable per-port spread of 1.5 %).
"""

from __future__ import annotations

import shutil

import pytest
import yaml

from rackready.decide.calibration import calibrate_profile, overlay_document
from rackready.errors import UserError
from rackready.site.paths import INVENTORIES
from validation.judge import judge
from validation.model import CheckResult, Measurement
from validation.profile import ProfileError, load_profile, with_site

METRIC = "rdma.gpudirect_bw_gbps"


def _node(scale: float = 1.0, slow_nic: int | None = None, factor: float = 1.0,
          seed: int = 0) -> list[CheckResult]:
    ms = []
    for nic in range(8):
        base = 390.0 * (1 - 0.015 * ((nic * 7 + seed * 3) % 10) / 10) * scale
        value = base * (factor if nic == slow_nic else 1.0)
        ms += [Measurement(METRIC, round(value, 2), "Gb/s", {"nic": f"mlx5_{nic}"})] * 2
    return [CheckResult("rdma.gpudirect_bw", "ok", 1.0, tuple(ms))]


def _limit(limits, metric=METRIC):
    return next(x for x in limits if x["metric"] == metric)


def test_healthy_nodes_give_a_floor_between_the_gross_line_and_their_weakest():
    prof = load_profile("xe9680-h200")
    limits, refusals = calibrate_profile(prof, {f"n{i}": _node(seed=i) for i in range(3)})
    assert refusals == []
    lim = _limit(limits)
    weakest = min(m.value for i in range(3) for m in _node(seed=i)[0].measurements)
    assert 252.0 <= lim["value"] <= weakest and lim["value"] > 360.0 * 0.9
    assert lim["statistics"]["nodes"] == 3 and lim["statistics"]["devices"] == 24


def test_a_set_of_two_nodes_is_refused_as_too_small_to_find_an_outlier():
    """Two nodes, one 15 % slow on every rail: neither can outvote the other, so no outlier
    can be found, and the floor would have dropped to the gross line (252, not 360)."""
    prof = load_profile("xe9680-h200")
    limits, refusals = calibrate_profile(prof, {"n0": _node(seed=0),
                                                "n1": _node(scale=0.85, seed=1)})
    assert limits == []
    assert refusals == ["profile xe9680-h200: calibration needs at least 3 known-good nodes "
                        "(fewer cannot find an outlier among them: of two, neither outvotes "
                        "the other); the set has 2 (n0, n1)"]


def _spread_node(values: list[float]) -> list[CheckResult]:
    ms = [Measurement(METRIC, v, "Gb/s", {"nic": f"mlx5_{i}"}) for i, v in enumerate(values)]
    return [CheckResult("rdma.gpudirect_bw", "ok", 1.0, tuple(ms))]


# three nodes whose rails spread widely (362-396.5 Gb/s), every one past the profile's 360
WIDE = {f"n{i}": _spread_node([362.0 + 1.5 * (i + 3 * j) for j in range(8)]) for i in range(3)}


def test_a_node_that_misses_the_profiles_own_floor_is_refused_naming_it():
    """358 Gb/s on one rail: no outlier within a set this spread, no gross fault (the
    uncalibrated judge reads it "below expected" and passes the node), yet no reference."""
    prof = load_profile("xe9680-h200")
    nodes = {**WIDE, "n2": _spread_node([358.0] + [362.0 + 1.5 * (2 + 3 * j)
                                                     for j in range(1, 8)])}
    _, refusals = calibrate_profile(prof, nodes)
    assert refusals == ["n2: rdma.gpudirect_bw_gbps on nic=mlx5_0 358 Gb/s misses the "
                        "profile's own limit (>= 360 Gb/s): a reference must pass the "
                        "uncalibrated profile"]


def test_a_node_whose_one_rail_is_slow_is_refused_by_name():
    """312 Gb/s: below the provisional 360 but no gross fault, so the node itself would not
    fail; as a reference it would drag the site's floor down."""
    prof = load_profile("xe9680-h200")
    nodes = {"n0": _node(seed=0), "n1": _node(seed=1, slow_nic=3, factor=0.8),
             "n2": _node(seed=2)}
    _, refusals = calibrate_profile(prof, nodes)
    assert len(refusals) == 1 and refusals[0].startswith("n1: ") and "nic=mlx5_3" in refusals[0]


def test_a_rail_past_the_profile_yet_an_outlier_among_the_set_is_refused_by_name():
    prof = load_profile("xe9680-h200")
    nodes = {"n0": _node(seed=0), "n1": _node(seed=1, slow_nic=5, factor=0.94),
             "n2": _node(seed=2)}
    _, refusals = calibrate_profile(prof, nodes)
    assert len(refusals) == 1 and refusals[0].startswith("n1: ")
    assert "on nic=mlx5_5" in refusals[0] and "outlier" in refusals[0]


def test_a_node_slower_on_every_rail_is_refused_as_an_outlier():
    """5 % slow on every rail, past the profile's floor: an outlier among four nodes."""
    prof = load_profile("xe9680-h200")
    nodes = {"n0": _node(seed=0), "n1": _node(seed=1), "n2": _node(seed=2),
             "n3": _node(scale=0.95, seed=3)}
    _, refusals = calibrate_profile(prof, nodes)
    assert len(refusals) == 1 and refusals[0].startswith("n3: ")
    assert "is an outlier among the calibration nodes (median" in refusals[0]


def test_the_floor_never_falls_below_the_profiles_by_more_than_the_sets_spread():
    """The wide set: median 379.25, weakest 362, robust sigma 13.3; median - 4 sigma
    (326) would sit 34 below the profile's 360 where the set itself fell only 17.25
    below its median: the floor is 360 - 17.25, rounded up."""
    prof = load_profile("xe9680-h200")
    limits, refusals = calibrate_profile(prof, WIDE)
    assert refusals == []
    stats = _limit(limits)["statistics"]
    assert stats["spread"] == 17.25 and stats["profile_limit"] == 360.0
    assert stats["median"] - 4 * stats["sigma"] < 330
    assert _limit(limits)["value"] == 343.0


def test_the_floor_is_never_looser_than_the_gross_line():
    """A set whose spread reaches past the profile's floor less its gross line (refused:
    its weakest misses the profile; the floor is the gross line all the same)."""
    prof = load_profile("xe9680-h200")
    values = [250.0, 300.0, 350.0, 380.0, 390.0, 395.0, 398.0, 400.0]
    limits, refusals = calibrate_profile(prof, {f"n{i}": _spread_node(values)
                                                for i in range(3)})
    assert refusals and _limit(limits)["value"] == 252.0


def _overlay(prof, nodes=None):
    limits, refusals = calibrate_profile(prof, nodes or {f"n{i}": _node(seed=i)
                                                         for i in range(3)})
    assert not refusals
    return overlay_document(prof, limits, ["n0", "n1", "n2"], {"n0": ["1653724027147"]},
                            "standard", "run-1", "2026-12-01T00:00:00+00:00",
                            {"driver": "580.159.04"})


def test_the_overlay_makes_calibrated_hard_limits_and_says_where_they_came_from():
    prof = load_profile("xe9680-h200")
    doc = yaml.safe_load(yaml.safe_dump(_overlay(prof)))  # as written and read back
    sited = with_site(prof, {"calibration": doc})
    assert sited.calibration.startswith("site calibration 2026-12-01 on n0, n1, n2")
    [t] = [t for t in sited.thresholds if t.metric == METRIC]
    assert t.tier == "calibrated" and t.gross is None
    assert "1653724027147" in t.provenance and "580.159.04" in t.provenance
    # a rail short of the calibrated floor fails; the provisional limit would have passed it
    # as below expected
    slow = [CheckResult("rdma.gpudirect_bw", "ok", 1.0,
                        (Measurement(METRIC, t.value - 5, "Gb/s", {"nic": "mlx5_0"}),))]
    [v] = [v for v in judge(slow, sited) if v.metric == METRIC]
    assert v.outcome == "fail" and v.threshold.tier == "calibrated"


def test_a_narrowed_calibration_says_which_checks_set_its_floors():
    prof = load_profile("xe9680-h200")
    limits, _ = calibrate_profile(prof, {f"n{i}": _node(seed=i) for i in range(3)})
    doc = overlay_document(prof, limits, ["n0", "n1", "n2"], {}, "standard", "run-1",
                           "2026-12-01T00:00:00+00:00", {}, checks=["rdma.gpudirect_bw"])
    assert doc["checks"] == ["rdma.gpudirect_bw"]
    assert doc["source"].endswith("level standard (rdma.gpudirect_bw only)")
    assert "(rdma.gpudirect_bw only)" in _limit(doc["thresholds"])["provenance"]
    # the whole level: no checks key, nothing said about a narrowing
    whole = overlay_document(prof, limits, ["n0"], {}, "standard", "run-1", "2026-12-01", {})
    assert "checks" not in whole and "only" not in whole["source"]


@pytest.mark.parametrize("edit, words", [
    (lambda d: d.update(profile="xe9680-h100"), "is for profile"),
    (lambda d: d["thresholds"][0].update(value=10.0), "looser than the profile's gross"),
    (lambda d: d.update(thresholds="none"), "thresholds list"),
    (lambda d: d["thresholds"][0].update(labels={"nic": "mlx5_9"}), "has no limit"),
])
def test_an_overlay_the_judge_cannot_trust_is_refused(edit, words):
    prof = load_profile("xe9680-h200")
    doc = _overlay(prof)
    edit(doc)
    with pytest.raises(ProfileError, match=words):
        with_site(prof, {"calibration": doc})


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A copy of the example rack; nothing may connect to its (example) addresses."""
    from rackready.steps import validate

    def refuse(node, *a, **kw):
        pytest.fail(f"connected to {node.name}: the plan should have been refused")

    monkeypatch.setattr(validate.ssh, "connect", refuse)
    inv = tmp_path / "rack1"
    shutil.copytree(INVENTORIES / "rack1", inv)
    return inv


def test_validate_refuses_a_bad_overlay_before_connecting(site):
    from rackready.steps.validate import run_validation

    (site / "calibration").mkdir()
    prof = load_profile("xe9680-h200")
    doc = _overlay(prof)
    doc["thresholds"][0]["value"] = 1.0
    (site / "calibration" / "xe9680-h200.yml").write_text(yaml.safe_dump(doc))
    with pytest.raises(UserError, match="xe9680-h200.yml: calibration overlay: .* looser"):
        run_validation("gpu01", str(site), "quick", str(site / "run"), formats="json")
    (site / "calibration" / "xe9680-h200.yml").write_text("{not: yaml")
    with pytest.raises(UserError, match="unreadable calibration overlay"):
        run_validation("gpu01", str(site), "quick", str(site / "run"), formats="json")
    assert not (site / "run").exists()


def test_validate_refuses_a_typo_in_the_profile_name_before_connecting(site):
    from rackready.steps.validate import run_validation

    group = site / "group_vars" / "xe9680.yml"
    group.write_text(group.read_text().replace("rackready_profile: xe9680-h200",
                                               "rackready_profile: xe9680-h900"))
    with pytest.raises(UserError, match="rackready_profile 'xe9680-h900'"):
        run_validation("gpu01", str(site), "quick", str(site / "run"), formats="json")
    assert not (site / "run").exists()


def test_calibrate_refuses_a_set_too_small_before_connecting(site):
    """Two XE9680s and one DL380a: both profiles short of three, one line naming both."""
    from rackready.steps.calibrate import run_calibration

    with pytest.raises(UserError) as err:
        run_calibration(str(site), "gpu02,gpu03,gpu05", out=str(site / "run"))
    assert str(err.value) == (
        "profile xe9680-h200: calibration needs at least 3 known-good nodes (fewer cannot "
        "find an outlier among them: of two, neither outvotes the other); --nodes gives 2 "
        "(gpu02, gpu03); profile dl380a-gen12-h200nvl: calibration needs at least 3 "
        "known-good nodes (fewer cannot find an outlier among them: of two, neither "
        "outvotes the other); --nodes gives 1 (gpu05)")
    assert not (site / "run").exists()


class _Run:
    """A calibration run as rackready.steps.calibrate reads it: judgements and results."""

    def __init__(self, judgements):
        self.judgements = judgements

    def read_judgement(self, node):
        return self.judgements[node]

    def read_result(self, node):
        from rackready.run.rundir import NodeResult
        return NodeResult({"checks": [c.to_dict() for c in _node()]}, [])


def test_a_node_judged_pass_with_a_limit_below_expected_is_no_reference():
    """The uncalibrated judge passes a provisional miss short of the gross line; as a
    reference it is refused, naming the node and the limit it missed."""
    from rackready.steps.calibrate import _judged

    below = {"outcome": "below_expected", "metric": METRIC, "component": "NIC mlx5_3 port 1"}
    run = _Run({"a": {"outcome": "PASS", "verdicts": [{"outcome": "pass"}]},
                "b": {"outcome": "PASS", "outcome_reason": "1 verdict(s) below expected",
                      "verdicts": [{"outcome": "pass"}, below]},
                "c": {"outcome": "FAIL", "outcome_reason": "1 verdict(s) failed"}})
    refusals, results, _ = _judged(run, ["a", "b", "c"])  # type: ignore[arg-type]
    assert refusals == [
        "b: 1 verdict(s) below expected (first: rdma.gpudirect_bw_gbps on NIC mlx5_3 port 1): "
        "a reference must pass the uncalibrated profile's own limits",
        "c: FAIL (1 verdict(s) failed): a node that does not pass is no reference"]
    assert list(results) == ["a"]
