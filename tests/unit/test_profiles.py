"""Hardware profiles: every shipped profile loads; malformed thresholds are refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

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
    data["thresholds"] = [threshold]
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
    roce = with_site(load_profile("xe9680-h200"), {"fabric": "roce", "mtu": 4096})
    assert "roce" in roce.required_needs() and "ib" not in roce.required_needs()
    assert roce.thresholds_for("ib.link_layer")[0].value == "Ethernet"
    with pytest.raises(ProfileError):
        scope(load_profile("xe9680-h200"), gpus=9)
    with pytest.raises(ProfileError):
        with_site(load_profile("xe9680-h200"), {"fabric": "ethernet"})
