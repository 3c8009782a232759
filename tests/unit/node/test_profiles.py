"""Hardware profiles: every shipped profile loads; malformed thresholds are refused."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from rackready.site.inventory import provisioned
from validation import metrics
from validation.profile import (
    PROFILE_DIR,
    ProfileError,
    expected_pair_links,
    list_profiles,
    load_profile,
    scope,
    with_site,
)

BASES = ["xe9680-h100", "xe9680-h200", "dl380a-gen12-h200nvl", "dl380a-gen11-h100nvl"]


def test_every_required_profile_and_lab_variant_exists():
    assert set(list_profiles()) == set(BASES) | {f"{b}-lab" for b in BASES}


@pytest.mark.parametrize("name", BASES)
def test_lab_variant_same_inventory_never_looser(name):
    base, lab = load_profile(name), load_profile(f"{name}-lab")
    assert lab.simulated and not base.simulated
    assert lab.inventory == base.inventory
    health = {(t.metric, str(t.labels)): (t.op, t.value) for t in base.thresholds
              if t.metric.startswith(("health.", "gpu.ecc", "gpu.remapped", "gpu.xid"))}
    lab_t = {(t.metric, str(t.labels)): (t.op, t.value) for t in lab.thresholds}
    assert health and all(lab_t[k] == v for k, v in health.items())


@pytest.mark.parametrize("name", BASES)
def test_every_threshold_has_known_metric_unit_and_provenance(name):
    for t in load_profile(name).thresholds:
        assert t.metric in metrics.METRICS
        assert t.unit == metrics.METRICS[t.metric].unit
        assert t.provenance.strip()


def test_capture_facts_are_in_the_h200_profile():
    inv = load_profile("xe9680-h200").inventory
    assert inv["gpu"]["model"] == "NVIDIA H200" and inv["gpu"]["memory_mib"] == 143771
    assert inv["gpu"]["power_limit_w"] == 700
    assert inv["nvlink"]["links_per_gpu"] == 18 and inv["nvlink"]["link_speed_gbs"] == 26.562
    assert inv["gpu"]["bf16_dense_tflops"]["value"] == 989.4


def test_topologies():
    h200 = load_profile("xe9680-h200").inventory
    assert set(expected_pair_links(h200).values()) == {18} and len(expected_pair_links(h200)) == 28
    nvl = expected_pair_links(load_profile("dl380a-gen12-h200nvl").inventory)
    assert nvl[(0, 3)] > 0 and nvl[(3, 4)] == 0 and nvl[(4, 7)] > 0
    pairs = expected_pair_links(load_profile("dl380a-gen11-h100nvl").inventory)
    assert pairs[(0, 1)] == 12 and pairs[(1, 2)] == 0 and pairs[(2, 3)] == 12


@pytest.fixture
def pdir(tmp_path: Path) -> Path:
    for p in PROFILE_DIR.glob("*.yml"):
        shutil.copy(p, tmp_path / p.name)
    return tmp_path


def write_with(pdir: Path, threshold: dict, base: str = "xe9680-h200") -> None:
    data = yaml.safe_load((pdir / f"{base}.yml").read_text())
    data["thresholds"] = [*data["thresholds"], threshold]  # the base's slots stay filled
    (pdir / "bad.yml").write_text(yaml.safe_dump(data))


GOOD = {"metric": "gpu.temperature", "op": "<=", "value": 80, "unit": "C",
        "provenance": "test"}


@pytest.mark.parametrize("change,message", [
    ({"unit": None}, "has no unit"),
    ({"provenance": None}, "has no provenance"),
    ({"provenance": "  "}, "empty provenance"),
    ({"unit": "F"}, "is measured in 'C'"),
    ({"metric": "gpu.temprature"}, "unknown metric"),
    ({"op": ">>"}, "op"),
    ({"value": "hot"}, "needs a number"),
    ({"outlier_k": -1}, "outlier_k"),
])
def test_bad_thresholds_refused_in_one_line(pdir, change, message):
    t = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    write_with(pdir, t)
    with pytest.raises(ProfileError) as exc:
        load_profile("bad", pdir)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_good_threshold_accepted(pdir):
    write_with(pdir, GOOD)
    assert any(t.value == 80 for t in load_profile("bad", pdir).thresholds_for("gpu.temperature"))


def test_lab_variant_may_not_loosen_health(pdir):
    (pdir / "loose-lab.yml").write_text(yaml.safe_dump({
        "extends": "xe9680-h200", "simulated": True, "thresholds": [
            {"metric": "health.delta.ecc_uncorrected", "op": "<=", "value": 5, "unit": "",
             "provenance": "lab"}]}))
    with pytest.raises(ProfileError, match="may not loosen a health limit"):
        load_profile("loose-lab", pdir)


def test_unknown_profile_and_bad_yaml(pdir):
    with pytest.raises(ProfileError, match="no profile 'nope'"):
        load_profile("nope", pdir)
    (pdir / "broken.yml").write_text("thresholds: [\n")
    with pytest.raises(ProfileError, match="not valid YAML"):
        load_profile("broken", pdir)


def test_scope_and_site():
    p = scope(load_profile("xe9680-h200"), gpus=2, without=("rdma", "nvme"))
    assert p.inventory["gpu"]["count"] == 2
    assert [t.labels for t in p.thresholds_for("nvlink.pair_links")] == [{"pair": "0-1"}]
    assert "rdma" not in p.required_needs() and "ib" not in p.required_needs()
    assert p.scope == {"gpus": 2, "without": ["nvme", "rdma"]}
    roles = provisioned({}, Path("roles"))  # the role defaults, as the controller ships them
    roce = with_site(load_profile("xe9680-h200"), {"fabric": "roce", **roles})
    assert "roce" in roce.required_needs() and "ib" not in roce.required_needs()
    assert roce.thresholds_for("ib.link_layer")[0].value == "Ethernet"
    # RoCE over the role's 9000-byte Ethernet MTU runs the 4096 RDMA MTU
    assert roce.thresholds_for("ib.active_mtu")[0].value == 4096
    assert "rdma_network_roce_mtu" in roce.thresholds_for("ib.active_mtu")[0].provenance
    assert roce.thresholds_for("roce.trust")[0].value == roles["rdma_network_roce_trust"]
    # a RoCE site file without the role's variables is refused, never judged on a default
    with pytest.raises(ProfileError, match="rdma_network_roce_priority"):
        with_site(load_profile("xe9680-h200"), {"fabric": "roce", "rdma_network_roce_mtu": 9000,
                                                "rdma_network_roce_trust": "dscp"})
    with pytest.raises(ProfileError):
        scope(load_profile("xe9680-h200"), gpus=9)
    with pytest.raises(ProfileError):
        with_site(load_profile("xe9680-h200"), {"fabric": "ethernet"})


# --- workload thresholds (every judged workload metric, correctness, provenance) ---

from validation.judge import judge  # noqa: E402
from validation.model import CheckResult, Measurement  # noqa: E402
from validation.workloads.metrics import WORKLOAD_METRICS  # noqa: E402

JUDGED_WORKLOAD = sorted(m.name for m in WORKLOAD_METRICS if m.judged)
# pinned versions, judged against the inventory (or the site's role variables), not floors
PINNED = {"nccl.torch_version"}
# acceptance policies, the same on every platform (not a measured floor)
POLICY = {"gemm.telemetry_ok", "gemm.slowdown_margin_c"}
CORRECTNESS = {  # metric -> (op, the only acceptable limit)
    "nccl.correct": ("==", True),
    "gemm.sdc_mismatches": ("<=", 0),
    "hbm.pattern_errors": ("<=", 0),
}
PER_GPU = ["gemm.tflops", "hbm.bandwidth", "host.h2d_bandwidth", "host.d2h_bandwidth",
           "p2p.bandwidth", "nccl.pair_busbw"]


@pytest.mark.parametrize("name", BASES + [f"{b}-lab" for b in BASES])
def test_every_judged_workload_metric_has_a_threshold(name):
    have = {t.metric for t in load_profile(name).thresholds}
    assert not [m for m in JUDGED_WORKLOAD if m not in have]


@pytest.mark.parametrize("name", BASES + [f"{b}-lab" for b in BASES])
def test_correctness_is_exact_everywhere(name):
    p = load_profile(name)
    for metric, (op, value) in CORRECTNESS.items():
        ts = p.thresholds_for(metric)
        assert ts and all((t.op, t.value) == (op, value) for t in ts), metric
    for metric in ("fsdp.loss_deviation", "fsdp.ckpt_resume_max_abs_diff"):
        assert [t.op for t in p.thresholds_for(metric)] == ["<="], metric


@pytest.mark.parametrize("name", BASES)
def test_lab_correctness_never_looser_than_the_real_profile(name):
    base, lab = load_profile(name), load_profile(f"{name}-lab")
    for metric in ("fsdp.loss_deviation", "fsdp.ckpt_resume_max_abs_diff",
                   "gemm.sdc_mismatches", "hbm.pattern_errors"):
        (b,), (lb,) = base.thresholds_for(metric), lab.thresholds_for(metric)
        assert lb.value <= b.value, metric
    # bitwise resume is judged in the lab (CPU/gloo is deterministic), not on GPUs
    assert [t.value for t in lab.thresholds_for("fsdp.ckpt_resume_bitwise")] == [True]


@pytest.mark.parametrize("name", BASES)
def test_real_floors_have_outliers_units_and_provenance(name):
    p = load_profile(name)
    for metric in PER_GPU:
        ts = p.thresholds_for(metric)
        assert ts and all(t.outlier_k for t in ts if not t.labels or "dtype" in t.labels), metric
    for t in p.thresholds:
        if t.metric in JUDGED_WORKLOAD and t.metric not in {*CORRECTNESS, *PINNED, *POLICY}:
            assert t.unit == metrics.METRICS[t.metric].unit
            # a number from a run or a datasheet, with the margin applied
            assert re.search(r"\d", t.provenance) and ("bench" in t.provenance
                                                      or "datasheet" in t.provenance
                                                      or "policy" in t.provenance), t


def test_provisional_wording():
    # the 8-GPU collectives are 2-GPU numbers until the blocked 8-GPU run
    for t in load_profile("xe9680-h200").thresholds_for("nccl.busbw"):
        assert "PROVISIONAL" in t.provenance and "8-GPU run" in t.provenance
    for name in ("xe9680-h100", "dl380a-gen12-h200nvl", "dl380a-gen11-h100nvl"):
        ws = [t for t in load_profile(name).thresholds if t.metric in JUDGED_WORKLOAD
              and t.metric not in {*CORRECTNESS, *PINNED, *POLICY}]
        assert ws and all("PROVISIONAL until measured" in t.provenance for t in ws), name


def test_h200_floors_sit_below_the_measured_numbers():
    # the bench numbers (bench/results/h200x2-2026-11-30.md) must pass their own profile
    p = load_profile("xe9680-h200")

    def floor(metric: str, **labels: str) -> float:
        return max(t.value for t in p.thresholds_for(metric)
                   if all((t.labels or {}).get(k) == v for k, v in labels.items())
                   and set(t.labels or {}) <= set(labels))

    assert floor("nccl.busbw", op="all_reduce", size_bytes=str(4 << 30)) < 346.8
    assert floor("nccl.busbw", op="all_reduce", size_bytes=str(64 << 20)) < 259.9
    assert floor("gemm.tflops", dtype="bf16") < 667.6
    assert floor("hbm.bandwidth") < 4247
    assert floor("host.h2d_bandwidth") < 55.23
    assert floor("fsdp.tokens_per_s_per_gpu", shape="llama3-1b") < 35340
    assert floor("fsdp.mfu", shape="llama3-8b") < 0.468
    # and they are real floors: 15% below the measurement fails
    assert floor("hbm.bandwidth") > 4247 * 0.85
    assert floor("gemm.tflops", dtype="bf16") > 667.6 * 0.85


def test_golden_curves_and_tolerance():
    inv = load_profile("xe9680-h200-lab").inventory
    tiny = inv["fsdp_golden"]["tiny"]["loss"]
    assert sorted(int(s) for s in tiny) == [1, 4, 8, 12, 16]
    # the curve falls from ln(vocab 256) = 5.545 at init: a model that learns nothing,
    # or restores nothing, misses the limit by far more than the tolerance
    (tol,) = load_profile("xe9680-h200-lab").thresholds_for("fsdp.loss_deviation")
    assert abs(tiny[1] - 5.545) < 0.01 and tiny[1] - tiny[16] > 40 * tol.value


def _ran(metric: str, value, **labels: str) -> CheckResult:
    return CheckResult("collectives", "ok", 1.0, (Measurement(metric, value, "GB/s", labels),))


def test_level_dependent_labels_are_not_applicable_but_missing_pairs_fail():
    p = load_profile("xe9680-h200")
    # quick level: 64 MiB and 1 GiB only; the 256 MiB / 4 GiB floors are not applicable
    res = [_ran("nccl.busbw", 300.0, op="all_reduce", size_bytes=str(1 << 30), impl="torch")]
    v = [x for x in judge(res, p) if x.metric == "nccl.busbw"]
    assert {x.outcome for x in v if x.labels.get("size_bytes") == str(4 << 30)} == {
        "not_applicable"}
    assert [x.outcome for x in v if x.value == 300.0] == ["pass", "pass"]
    # a slow 1 GiB all_reduce fails its size floor even above the any-size floor
    slow = judge([_ran("nccl.busbw", 100.0, op="all_reduce", size_bytes=str(1 << 30))], p)
    assert any(x.outcome == "fail" and x.metric == "nccl.busbw" for x in slow)
    # a labelled NVLink pair that went missing still fails
    nvl = judge([CheckResult("nvlink.topology", "ok", 1.0, (
        Measurement("nvlink.pair_links", 18, "", {"pair": "0-1"}),))], p)
    assert any(x.outcome == "fail" and x.labels == {"pair": "0-2"} for x in nvl)
