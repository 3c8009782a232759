"""The judge: thresholds, fleet outliers, repeats, and checks that did not run."""

from __future__ import annotations

import pytest

from validation.judge import component, fleet_outliers, judge, judge_fleet, node_outcome
from validation.model import CheckResult, Measurement, Threshold
from validation.profile import load_profile, scope

PROFILE = scope(load_profile("xe9680-h200"), gpus=2)


def res(check="gpu.health", status="ok", ms=(), needs=("gpu",), msg=""):
    return CheckResult(check, status, 0.1, tuple(ms), msg, needs)


def gpu(i: int) -> dict[str, str]:
    return {"gpu": str(i), "serial": f"SN{i}", "bus_id": f"0000:{i:02x}:00.0"}


def test_fleet_outliers_mad():
    vals = {f"g{i}": 780.0 + i for i in range(7)} | {"g7": 700.0}
    assert fleet_outliers(vals, k=4) == {"g7"}
    # higher is better: a GPU far above its peers is no fault
    assert fleet_outliers({**vals, "g7": 900.0}, k=4) == set()
    assert fleet_outliers({**vals, "g7": 900.0}, k=4, better="lower") == {"g7"}


def test_fleet_outliers_identical_peers_and_too_few():
    # MAD 0 (seven identical): a 5 % drop is still caught; identical values are not
    assert fleet_outliers({**{f"g{i}": 100.0 for i in range(7)}, "g7": 95.0}, k=3) == {"g7"}
    assert fleet_outliers({f"g{i}": 100.0 for i in range(8)}, k=3) == set()
    assert fleet_outliers({"a": 1.0, "b": 100.0}, k=1) == set()


@pytest.mark.parametrize("status", ["skipped", "error", "timeout"])
def test_required_check_that_did_not_run_fails(status):
    v = judge([res(status=status, msg="nvidia-smi not found")], PROFILE)
    bad = [x for x in v if x.outcome == "fail"]
    assert len(bad) == 1 and bad[0].metric == "check.status" and bad[0].value == status
    assert "nvidia-smi not found" in bad[0].message
    assert node_outcome(v) == "FAIL"


def test_check_needing_what_profile_does_not_require_is_not_applicable():
    p = scope(load_profile("xe9680-h200"), gpus=2, without=("nvme",))
    (v,) = [x for x in judge([res("storage.nvme", "skipped", needs=("nvme",))], p)
            if x.metric == "check.status"]
    assert v.outcome == "not_applicable" and "does not require nvme" in v.message


def test_judged_metric_without_threshold_fails():
    class Bare:
        thresholds = ()

        def required_needs(self):
            return frozenset({"gpu"})

    v = judge([res(ms=[Measurement("gpu.temperature", 40, "C", gpu(0))])], Bare())
    assert [x.outcome for x in v] == ["fail"] and "no threshold" in v[0].message
    # informational metrics need none
    assert judge([res(ms=[Measurement("gpu.serial", "x", "", gpu(0))])], Bare()) == []


def test_unknown_metric_fails():
    v = judge([res(ms=[Measurement("gpu.bogus", 1, "", {})])], PROFILE)
    assert any(x.outcome == "fail" and "unknown metric" in x.message for x in v)


def test_repeats_median_and_spread():
    ms = [Measurement("gpu.temperature", t, "C", gpu(0)) for t in (40, 95, 41)]
    (v,) = [x for x in judge([res(ms=ms)], PROFILE) if x.metric == "gpu.temperature"
            and x.outcome != "not_applicable"]
    assert v.outcome == "pass" and v.value == 41 and v.spread == {"min": 40, "max": 95, "n": 3}


def test_outlier_below_floor_peers_fails_with_component():
    t = Threshold("nvlink.link_speed", ">=", 20.0, "GB/s", "test", outlier_k=3)

    class P:
        thresholds = (t,)

        def required_needs(self):
            return frozenset({"gpu"})

    ms = [Measurement("nvlink.link_speed", 26.562 if i != 5 else 21.0, "GB/s",
                      {**gpu(i), "link": "0"}) for i in range(8)]
    v = judge([res("nvlink.links", ms=ms)], P())
    bad = [x for x in v if x.outcome == "fail"]
    # above the 20 GB/s floor, but far below seven peers at 26.562
    assert len(bad) == 1 and bad[0].labels["gpu"] == "5"
    assert "robust deviations" in bad[0].message and "SN5" in bad[0].remediation


def test_labelled_threshold_without_measurement_fails():
    ms = [Measurement("kernel.cmdline_token", True, "", {"token": "other"})]
    v = judge([res("kernel.cmdline", ms=ms, needs=())], PROFILE)
    assert any(x.outcome == "fail" and x.labels == {"token": "iommu=pt"} for x in v)


def test_value_none_fails():
    ms = [Measurement("health.delta.ecc_uncorrected", None, "", {**gpu(0), "missing": "end"})]
    v = judge([res("health.delta", ms=ms)], PROFILE)
    assert [x.outcome for x in v if x.metric == "health.delta.ecc_uncorrected"] == ["fail"]


def test_judge_fleet_node_outlier():
    t = Threshold("nvlink.link_speed", ">=", 1.0, "GB/s", "test", outlier_k=3)

    class P:
        thresholds = (t,)

        def required_needs(self):
            return frozenset({"gpu"})

    def node(speed: float) -> list[CheckResult]:
        return [res("nvlink.links", ms=[Measurement("nvlink.link_speed", speed, "GB/s",
                                                    {**gpu(i), "link": "0"}) for i in range(2)])]

    out = judge_fleet({f"n{i}": node(26.5 if i != 2 else 20.0) for i in range(6)}, P())
    bad = {n: [v for v in vs if v.outcome == "fail"] for n, vs in out.items()}
    assert [n for n, vs in bad.items() if vs] == ["n2"]
    assert bad["n2"][0].labels["node"] == "n2"


def test_component_words():
    assert component({"gpu": "3", "serial": "S", "bus_id": "0000:3b:00.0"}) == \
        "GPU 3 (serial S, PCI 0000:3b:00.0)"
    assert component({"nic": "mlx5_2", "port": "1"}) == "NIC mlx5_2 port 1"
    assert component({"pair": "0-1"}) == "NVLink between GPUs 0 and 1"


def test_incomplete_run_never_passes():
    assert node_outcome([], finished=False) == "INCOMPLETE"


def test_to_dict_is_what_dataclasses_asdict_gives_field_for_field():
    """Measurement, Threshold and Verdict write their dicts by hand (asdict was a third of
    judging): the same keys in field order and the same values, so a field added to the
    dataclass and not to to_dict fails here."""
    from dataclasses import asdict

    from validation.model import Measurement, Threshold, Verdict

    threshold = Threshold("nvlink.bw", ">=", [1, 2], "GB/s", "datasheet", 3.0, {"gpu": "0"},
                          "provisional", 0.5)
    objs = [Measurement("gpu.temp", 41.5, "C", {"gpu": "0"}, "raw/smi.xml"),
            Measurement("gpu.count", 8, ""), threshold, Threshold("x", "==", True, "", "p"),
            Verdict("nvlink", "nvlink.bw", "fail", 12.5, "GB/s", {"gpu": "0"}, threshold,
                    "low", "reseat", {"min": 1.0, "max": 2.0, "n": 3}),
            Verdict("gpu", "gpu.count", "pass", 8, "")]
    for obj in objs:
        want = asdict(obj)
        if isinstance(obj, Verdict):
            want["threshold"] = asdict(obj.threshold) if obj.threshold else None
        got = obj.to_dict()
        assert list(got) == list(want) and got == want, type(obj).__name__
    # copies, as asdict made: editing the dict never reaches the verdict
    d = objs[4].to_dict()
    d["labels"]["gpu"] = "9"
    d["threshold"]["value"].append(3)
    assert objs[4].labels == {"gpu": "0"} and threshold.value == [1, 2]


# --- a limit no measurement met: judged from why, never the silent pass -------------------

def _reasons(results, profile=PROFILE):
    return {(v.metric, v.outcome): v.message for v in judge(results, profile)
            if v.threshold is not None and v.value is None}


def test_a_check_that_ran_ok_but_emitted_nothing_fails_as_not_measured_naming_it():
    ran = res(check="gpu.inventory", ms=(Measurement("gpu.model", "NVIDIA H200", "", gpu(0)),))
    v = [x for x in judge([ran], PROFILE) if x.metric == "gpu.count"]
    assert [(x.check, x.outcome) for x in v] == [("gpu.inventory", "fail")]
    assert "gpu.count not measured: gpu.inventory ran and reported no gpu.count" in v[0].message
    assert "GPU is missing" in v[0].remediation  # the metric's own remediation


def test_each_not_applicable_reason_names_its_fact():
    lab = load_profile("xe9680-h200-lab")
    ran = [res(check="gpu.health", ms=tuple(Measurement(n, v, "", gpu(0)) for n, v in (
               ("gpu.ecc_mode", "Enabled"), ("gpu.retired_pages_reported", False)))),
           res(check="gemm_burnin", needs=("gpu", "torch"), ms=(
               Measurement("gemm.tflops", 1.0, "TFLOP/s", {"gpu": "0", "dtype": "bf16"}),
               Measurement("workload.device", "cpu", "", {"workload": "gemm_burnin"}))),
           res(check="storage.raid", status="skipped", needs=("raid",), msg="no /raid")]
    got = _reasons(ran, scope(lab, without=("raid",)))
    # a probe fact the profile names (_common.yml, _lab_facts.yml)
    assert "gpu.retired_pages_reported = False" in got[("gpu.retired_pages", "not_applicable")]
    assert "workload.device = cpu" in got[("gemm.telemetry_ok", "not_applicable")]
    # the profile does not require what the check needs, with the check's own words
    assert got[("raid.mounted", "not_applicable")].endswith(
        "the profile does not require raid (storage.raid skipped: no /raid)")
    # a check that is not part of this run (its levels)
    assert "dcgm.diag is not part of this run (dcgm.diag runs at the standard, burnin" in \
        got[("dcgm.diag_result", "not_applicable")]
    # a label the level chooses: what the check ran instead
    assert "gemm_burnin ran dtype bf16" in got[("gemm.tflops", "not_applicable")]
    # the rack step's limits are judged across nodes
    assert "rack step" in got[("rack.pair_busbw", "not_applicable")]
    assert not [m for m in got.values() if "not measured in this run" in m]


def test_a_fact_explains_only_where_every_reading_holds_it():
    lab = load_profile("xe9680-h200-lab")
    mixed = res(check="gemm_burnin", needs=("gpu", "torch"), ms=(
        Measurement("gemm.tflops", 1.0, "TFLOP/s", {"gpu": "0", "dtype": "bf16"}),
        Measurement("workload.device", "cpu", "", {"workload": "a"}),
        Measurement("workload.device", "cuda", "", {"workload": "b"})))
    got = _reasons([mixed], lab)
    assert "not measured: gemm_burnin ran and reported no gemm.telemetry_ok" in \
        got[("gemm.telemetry_ok", "fail")]
    # the CPU fact is the lab's alone: a real profile fails the same run
    cpu = res(check="gemm_burnin", needs=("gpu", "torch"), ms=mixed.measurements[:2])
    assert ("gemm.telemetry_ok", "fail") in _reasons([cpu], load_profile("xe9680-h200"))


def test_a_required_check_that_did_not_run_says_so_on_its_limits_and_fails_once():
    v = judge([res(check="gpu.inventory", status="error", msg="boom")], PROFILE)
    assert [x.metric for x in v if x.outcome == "fail"] == ["check.status"]
    count = next(x for x in v if x.metric == "gpu.count")
    assert "required check gpu.inventory crashed" in count.message


def test_a_metric_need_the_profile_does_not_require_is_not_applicable():
    ran = res(check="health.delta", ms=(Measurement("health.delta.xid_hardware", 0, "", gpu(0)),))
    got = _reasons([ran], scope(load_profile("xe9680-h200"), without=("nvswitch",)))
    assert got[("health.delta.sxid", "not_applicable")].endswith(
        "the profile does not require nvswitch")
    assert ("health.delta.sxid", "fail") in _reasons([ran])  # required: not measured fails


def test_every_limit_of_every_profile_has_a_check_that_measures_it():
    from tests.unit.profile_dump import SITES
    from validation.checks.catalog import all_checks, measured_by
    from validation.profile import list_profiles, with_site

    for name in list_profiles():
        for site in (SITES["ib"], {**SITES["ib"], **SITES["roce"]}):
            for t in with_site(load_profile(name), site).thresholds:
                assert measured_by(t.metric), (name, t.metric)
    # every check says what it measures; a rule's fact is a probe fact some check emits
    assert all(c.emits for c in all_checks().values())
    for name in list_profiles():
        for rule in load_profile(name).not_applicable:
            assert measured_by(rule.fact), rule


def test_a_not_applicable_rule_is_refused_unless_it_names_a_probe_fact_and_a_reason():
    from validation.profile import ProfileError, check_not_applicable

    ok = {"metrics": ["gpu.retired_pages"], "fact": "gpu.retired_pages_reported",
          "value": False, "reason": "row remapping"}
    assert check_not_applicable(ok, "t").fact == "gpu.retired_pages_reported"
    for bad, words in (({**ok, "fact": "gpu.count"}, "judged metric"),
                       ({**ok, "metrics": ["gpu.nope"]}, "unknown metric"),
                       ({**ok, "reason": " "}, "needs a value and a reason"),
                       ({**ok, "why": "x"}, "mapping of metrics")):
        with pytest.raises(ProfileError, match=words):
            check_not_applicable(bad, "t")
