"""Profiles by inheritance: bases (_*.yml) deep-merged under a profile, thresholds replaced
in place by metric and labels, slots a base leaves to each profile, one-line refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from validation.profile import ProfileError, deep_merge, list_profiles, load_profile


def T(metric: str, op: str, value, unit: str = "", prov: str = "test", **kw) -> dict:
    return {"metric": metric, "op": op, "value": value, "unit": unit, "provenance": prov, **kw}


BASE = {
    "requires": ["gpu"],
    "inventory_provenance": "test",
    "inventory": {"gpu": {"count": 8, "model": "NVIDIA H200", "memory_mib": 143771,
                          "pcie": {"gen": 5, "width": 16}},
                  "nvme": {"count": 8}},
    "thresholds": [
        T("gpu.temperature", "<=", 85, "C"),
        T("gpu.xid_hardware", "<=", 0),
        {"slot": "hbm.bandwidth"},
        T("gemm.tflops", ">=", 600.0, "TFLOP/s", labels={"dtype": "bf16"}),
    ],
}


def write(d: Path, name: str, data: dict) -> None:
    (d / f"{name}.yml").write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture
def pdir(tmp_path: Path) -> Path:
    write(tmp_path, "_base", BASE)
    return tmp_path


def one_line(exc: pytest.ExceptionInfo) -> str:
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_deep_merge_overrides_a_nested_key_and_keeps_its_siblings():
    base = {"gpu": {"count": 8, "pcie": {"gen": 5, "width": 16}}, "raid": {"mount": "/raid"},
            "kernel_cmdline": ["iommu=pt", "x"]}
    got = deep_merge(base, {"gpu": {"pcie": {"width": 8}}, "kernel_cmdline": ["y"]})
    assert got == {"gpu": {"count": 8, "pcie": {"gen": 5, "width": 8}},
                   "raid": {"mount": "/raid"}, "kernel_cmdline": ["y"]}  # a list replaces
    assert base["gpu"]["pcie"]["width"] == 16  # the base is not changed


def test_an_overlay_merges_the_inventory_and_replaces_a_threshold_in_place(pdir):
    write(pdir, "gpu-a", {"extends": "_base", "description": "overlay",
                          "inventory": {"gpu": {"memory_mib": 81559, "pcie": {"width": 8}}},
                          "thresholds": [
                              T("gemm.tflops", ">=", 570.0, "TFLOP/s", labels={"dtype": "bf16"}),
                              T("hbm.bandwidth", ">=", 2750.0, "GB/s"),
                              T("gemm.tflops", ">=", 1040.0, "TFLOP/s", labels={"dtype": "fp8"})]})
    p = load_profile("gpu-a", pdir)
    assert p.inventory["gpu"] == {"count": 8, "model": "NVIDIA H200", "memory_mib": 81559,
                                  "pcie": {"gen": 5, "width": 8}}
    assert p.inventory["nvme"] == {"count": 8}
    own = [(t.metric, t.labels, t.value) for t in p.thresholds
           if t.metric in ("gpu.temperature", "hbm.bandwidth", "gemm.tflops")]
    # the base's order: the replaced limit and the filled slot where the base put them
    assert own == [("gpu.temperature", None, 85), ("hbm.bandwidth", None, 2750.0),
                   ("gemm.tflops", {"dtype": "bf16"}, 570.0),
                   ("gemm.tflops", {"dtype": "fp8"}, 1040.0)]
    assert [t.value for t in p.thresholds_for("gpu.memory_total")] == [81559]
    assert "_base" not in list_profiles(pdir) and "gpu-a" in list_profiles(pdir)


def test_several_bases_merge_in_order_each_once(pdir):
    write(pdir, "_nic", {"extends": "_base", "inventory": {"nvme": {"count": 4}}})
    write(pdir, "_fabric", {"extends": "_base", "fabric": "roce"})
    write(pdir, "gpu-b", {"extends": ["_nic", "_fabric"],
                          "thresholds": [T("hbm.bandwidth", ">=", 1.0, "GB/s")]})
    p = load_profile("gpu-b", pdir)
    assert p.inventory["nvme"] == {"count": 4} and p.fabric == "roce"
    assert len(p.thresholds_for("gpu.temperature")) == 1


def test_a_slot_left_empty_is_refused_in_one_line(pdir):
    write(pdir, "gpu-c", {"extends": "_base"})
    with pytest.raises(ProfileError) as exc:
        load_profile("gpu-c", pdir)
    assert one_line(exc) == ("gpu-c.yml: hbm.bandwidth has no limit (a slot _base.yml "
                             "leaves to each profile)")


def test_only_a_base_declares_a_slot(pdir):
    write(pdir, "gpu-d", {**BASE, "thresholds": [{"slot": "hbm.bandwidth"}]})
    with pytest.raises(ProfileError, match=r"gpu-d.yml: slot hbm.bandwidth: only a base"):
        load_profile("gpu-d", pdir)


def test_a_cycle_in_inheritance_is_refused_in_one_line(pdir):
    write(pdir, "_a", {"extends": "_b"})
    write(pdir, "_b", {"extends": ["_base", "_a"]})
    write(pdir, "gpu-e", {"extends": "_a"})
    with pytest.raises(ProfileError) as exc:
        load_profile("gpu-e", pdir)
    assert one_line(exc) == "gpu-e.yml: extends cycle gpu-e -> _a -> _b -> _a"


def test_an_unknown_base_is_refused_in_one_line(pdir):
    write(pdir, "gpu-f", {"extends": ["_base", "_nope"]})
    with pytest.raises(ProfileError) as exc:
        load_profile("gpu-f", pdir)
    assert one_line(exc).startswith("gpu-f.yml: extends unknown profile '_nope' (known: ")


def test_an_overlay_may_not_loosen_an_inherited_health_limit(pdir):
    write(pdir, "gpu-g", {"extends": "_base", "thresholds": [
        T("hbm.bandwidth", ">=", 1.0, "GB/s"), T("gpu.xid_hardware", "<=", 3)]})
    with pytest.raises(ProfileError) as exc:
        load_profile("gpu-g", pdir)
    assert one_line(exc) == ("gpu-g.yml: gpu.xid_hardware: a profile may not loosen a health "
                             "limit (<= 0 -> <= 3)")


def test_a_variant_still_inherits_the_inventory_whole(pdir):
    write(pdir, "gpu-h", {"extends": "_base", "thresholds": [
        T("hbm.bandwidth", ">=", 1.0, "GB/s")]})
    write(pdir, "gpu-h-lab", {"extends": "gpu-h", "simulated": True,
                              "inventory": {"gpu": {"count": 2}}})
    with pytest.raises(ProfileError, match="a variant inherits the inventory; do not restate it"):
        load_profile("gpu-h-lab", pdir)
    write(pdir, "gpu-h-lab", {"extends": ["gpu-h", "_base"], "simulated": True})
    with pytest.raises(ProfileError, match=r"a variant extends one profile \(gpu-h\), not a list"):
        load_profile("gpu-h-lab", pdir)


def test_provisional_stands_where_a_base_says_so(pdir):
    write(pdir, "_perf", {"extends": "_base", "thresholds": [
        T("hbm.bandwidth", ">=", 1.0, "GB/s", "{provisional}: measured on two GPUs", gross=0.7)]})
    write(pdir, "gpu-i", {"extends": "_perf", "provisional": "PROVISIONAL until measured on X"})
    t = load_profile("gpu-i", pdir).thresholds_for("hbm.bandwidth")[0]
    assert t.provenance == "PROVISIONAL until measured on X: measured on two GPUs"
    assert t.tier == "provisional"
    write(pdir, "gpu-j", {"extends": "_perf"})
    with pytest.raises(ProfileError, match=r"gpu-j.yml: hbm.bandwidth: provenance starts with "
                                           r"\{provisional\}, so the profile needs"):
        load_profile("gpu-j", pdir)


def test_the_shipped_profiles_are_chassis_bases_plus_gpu_overlays():
    from validation.profile.load import PROFILE_DIR, profile_layers

    chain = {n: [name for name, _ in profile_layers(n, PROFILE_DIR)] for n in
             ("xe9680-h200", "xe9680-h100", "dl380a-gen11-h100nvl", "dl380a-gen12-h200nvl")}
    assert chain["xe9680-h100"] == ["_common", "_xe9680", "xe9680-h100"]
    # the H200 overlay: one memory size and HBM floor for the SXM and the NVL part
    assert chain["xe9680-h200"] == ["_common", "_xe9680", "_gpu-h200", "xe9680-h200"]
    assert chain["dl380a-gen12-h200nvl"] == ["_common", "_dl380a", "_gpu-h200",
                                             "dl380a-gen12-h200nvl"]
    h100, h200 = load_profile("xe9680-h100"), load_profile("xe9680-h200")
    assert h100.inventory["nvswitch"] == h200.inventory["nvswitch"] == {"count": 4}
    assert h100.gpu("memory_mib") == 81559 and h200.gpu("memory_mib") == 143771


def test_a_named_provenance_is_written_once_and_stands_where_a_limit_names_it(pdir):
    write(pdir, "_chassis", {"extends": "_base", "provenances": {
        "pcie_bound": "collectives cross PCIe Gen5, so busbw is PCIe-bound;"}, "thresholds": [
        T("hbm.bandwidth", ">=", 1.0, "GB/s", "{provisional}: {pcie_bound} floor at 64 MiB",
          gross=0.7)]})
    write(pdir, "gpu-n", {"extends": "_chassis", "provisional": "PROVISIONAL until X"})
    t = load_profile("gpu-n", pdir).thresholds_for("hbm.bandwidth")[0]
    assert t.provenance == ("PROVISIONAL until X: collectives cross PCIe Gen5, so busbw is "
                            "PCIe-bound; floor at 64 MiB")
    # a later file's sentence of the same name replaces the base's
    write(pdir, "gpu-o", {"extends": "_chassis", "provisional": "PROVISIONAL until X",
                          "provenances": {"pcie_bound": "other"}})
    assert load_profile("gpu-o", pdir).thresholds_for("hbm.bandwidth")[0].provenance == (
        "PROVISIONAL until X: other floor at 64 MiB")


def test_a_provenance_naming_an_undefined_sentence_is_refused(pdir):
    write(pdir, "gpu-p", {"extends": "_base", "thresholds": [
        T("hbm.bandwidth", ">=", 1.0, "GB/s", "{nowhere}: measured")]})
    with pytest.raises(ProfileError) as exc:
        load_profile("gpu-p", pdir)
    assert one_line(exc) == ("gpu-p.yml: hbm.bandwidth: provenance names {nowhere}, which no "
                             "file's `provenances:` defines")
    write(pdir, "gpu-p", {"extends": "_base", "provenances": {"a": "says {b}"}, "thresholds": [
        T("hbm.bandwidth", ">=", 1.0, "GB/s", "{a}")]})
    with pytest.raises(ProfileError, match=r"provenances.a: a non-empty sentence naming no other"):
        load_profile("gpu-p", pdir)
