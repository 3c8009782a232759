"""A real, healthy node never fails for a fact of the node's size: one GPU without NVLink, the
NCCL PyTorch loads beside an older system libnccl, fp8's lower clock under the power cap, a
reference-job shape too large for the GPUs (planned, never an out-of-memory crash)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from validation import judge as judge_mod
from validation.checks import gpu_inventory, workload_checks
from validation.checks.catalog import all_checks
from validation.checks.registry import Context
from validation.judge import judge
from validation.model import CheckResult, Measurement
from validation.profile import load_profile, scope, with_site
from validation.runner import run_check
from validation.workloads import fsdp_plan
from validation.workloads.golden import load_golden

H200_MIB = 143771  # nvidia-smi's framebuffer total of an H200 (tests/fixtures/hgx-h200-2gpu)
BASES = ["xe9680-h200", "xe9680-h100", "dl380a-gen11-h100nvl", "dl380a-gen12-h200nvl"]
ONE_GPU_WITHOUT = ("rdma", "nvme", "raid", "nvswitch", "fabric-manager", "nccl-tests", "fio")


def one_gpu_profile():
    """The profile as bench/validate_on_gpu.sh scopes it on a one-GPU machine."""
    return scope(load_profile("xe9680-h200"), gpus=1, without=ONE_GPU_WITHOUT)


class FakeNode(Context):
    """A Context whose probe commands answer from a table (a missing tool skips, as on a node)."""

    answers: dict[str, str]

    def run(self, cmd: list[str], timeout_s: float = 60, artifact: str | None = None,
            ok_codes: tuple[int, ...] = (0,)) -> str:
        key = " ".join(cmd[:2])
        if key not in self.answers:
            from validation.checks.registry import CheckSkipped
            raise CheckSkipped(f"{cmd[0]} not found on this node")
        return self.answers[key]


def node(tmp_path: Path, profile: Any, level: str = "quick", site: dict | None = None,
         **answers: str) -> FakeNode:
    ctx = FakeNode(profile=profile, level=level, out=tmp_path, site=dict(site or {}))
    ctx.answers = {k.replace("_", " "): v for k, v in answers.items()}
    return ctx


def outcomes(results: list[CheckResult], profile: Any) -> dict[tuple[str, str], str]:
    return {(v.check, v.metric): v.outcome for v in judge(results, profile)}


# --- NVLink on one GPU --------------------------------------------------------------------

def test_one_gpu_scope_makes_nvlink_links_not_applicable_like_the_topology(tmp_path):
    profile = one_gpu_profile()
    ctx = node(tmp_path, profile, **{"nvidia-smi_nvlink": ""})  # a VM slice lists no NVLink
    specs = all_checks()
    results = [run_check(specs[n], ctx, profile.required_needs())
               for n in ("nvlink.links", "nvlink.topology")]
    verdicts = [v for v in judge(results, profile) if v.check.startswith("nvlink")]
    assert {v.check for v in verdicts} == {"nvlink.links", "nvlink.topology"}
    assert all(v.outcome == "not_applicable" for v in verdicts), verdicts
    assert "nvlink" not in profile.required_needs()


def test_a_full_machine_still_fails_a_gpu_without_nvlink(tmp_path):
    profile = load_profile("xe9680-h200")
    assert "nvlink" in profile.required_needs()
    # no NVLink listed at all on an 8-GPU HGX: the required check could not run, a FAIL
    ctx = node(tmp_path, profile, **{"nvidia-smi_nvlink": ""})
    res = run_check(all_checks()["nvlink.links"], ctx, profile.required_needs())
    assert outcomes([res], profile)[("nvlink.links", "check.status")] == "fail"
    # a GPU whose links are all down reads as 0 links up: below the inventory's 18
    lab = {"gpu": "3", "serial": "1654922000001", "bus_id": "00000000:5D:00.0"}
    down = CheckResult("nvlink.links", "ok", 0.1,
                       (Measurement("nvlink.links_up", 0, "", lab),), needs=("gpu", "nvlink"))
    assert outcomes([down], profile)[("nvlink.links", "nvlink.links_up")] == "fail"


# --- NCCL: the library the workloads load --------------------------------------------------

def _nccl(tmp_path, monkeypatch, profile, torch_nccl, site=None):
    monkeypatch.setattr(gpu_inventory, "torch_nccl_version", lambda: torch_nccl)
    ctx = node(tmp_path, profile, site=site, **{"dpkg-query_-W": "2.28.3-1+cuda13.0"})
    return run_check(all_checks()["nccl.version"], ctx, profile.required_needs())


def test_nccl_version_judges_pytorchs_nccl_and_reports_the_system_library_beside_it(
        tmp_path, monkeypatch):
    profile = one_gpu_profile()
    res = _nccl(tmp_path, monkeypatch, profile, "2.28.9")
    got = {m.name: (m.value, m.labels) for m in res.measurements}
    assert got["nccl.version"] == ("2.28.9", {"source": "torch"})
    assert got["nccl.system_version"] == ("2.28.3", {"source": "system"})
    out = outcomes([res], profile)
    assert out[("nccl.version", "nccl.version")] == "pass"
    assert ("nccl.version", "nccl.system_version") not in out  # a fact, not judged on a bare run


def test_a_provisioned_nodes_pin_judges_the_system_library_too(tmp_path, monkeypatch):
    profile = with_site(one_gpu_profile(), {"nccl_version": "2.28.9-1"})
    res = _nccl(tmp_path, monkeypatch, profile, "2.28.9", site={"nccl_version": "2.28.9-1"})
    out = outcomes([res], profile)
    assert out[("nccl.version", "nccl.version")] == "pass"
    assert out[("nccl.version", "nccl.system_version")] == "fail"  # the role's install differs


def test_without_pytorchs_nccl_the_system_library_is_judged_as_before(tmp_path, monkeypatch):
    profile = one_gpu_profile()
    res = _nccl(tmp_path, monkeypatch, profile, None)  # torch absent or a CPU build
    assert [(m.name, m.value) for m in res.measurements] == [("nccl.version", "2.28.3"),
                                                             ("nccl.system_version", "2.28.3")]
    assert outcomes([res], profile)[("nccl.version", "nccl.version")] == "fail"


def test_workloads_on_cpu_load_no_nccl_so_torch_is_not_asked(tmp_path, monkeypatch):
    def never() -> str:
        raise AssertionError("the lab's workloads run gloo: PyTorch's NCCL is not theirs")

    monkeypatch.setattr(gpu_inventory, "torch_nccl_version", never)
    profile = one_gpu_profile()
    ctx = node(tmp_path, profile, site={"workloads": {"device": "cpu"}},
               **{"dpkg-query_-W": "2.28.9-1+cuda13.0"})
    res = run_check(all_checks()["nccl.version"], ctx, profile.required_needs())
    assert res.status == "ok"
    assert [(m.name, m.value) for m in res.measurements] == [("nccl.version", "2.28.9"),
                                                             ("nccl.system_version", "2.28.9")]


def test_torch_nccl_version_of_a_cpu_build_is_none():
    pytest.importorskip("torch")
    import torch.distributed as dist

    if dist.is_nccl_available():
        pytest.skip("this torch has NCCL")
    assert gpu_inventory.torch_nccl_version() is None


# --- GEMM clock floors per dtype ------------------------------------------------------------

@pytest.mark.parametrize("name", BASES)
def test_each_dtype_has_its_own_provisional_clock_floor(name):
    ts = {(t.labels or {}).get("dtype"): t
          for t in load_profile(name).thresholds_for("gemm.load_sm_clock_mhz")}
    assert set(ts) == {"bf16", "fp8"}
    assert ts["fp8"].value < ts["bf16"].value
    assert all("PROVISIONAL" in t.provenance for t in ts.values())


def _clock(dtype: str, mhz: float) -> Measurement:
    return Measurement("gemm.load_sm_clock_mhz", mhz, "MHz",
                       {"gpu": "0", "serial": "1654922000001", "dtype": dtype})


@pytest.mark.parametrize("dtype, mhz, outcome", [
    ("bf16", 1380, "pass"),  # the lowest bf16 clock of a healthy H200 at its 700 W cap
    ("fp8", 1270, "pass"),   # fp8 on a healthy H200 at 693 W, the SW power cap its only reason
    ("bf16", 990, "fail"),   # a thermal slowdown: half the 1980 MHz max (the lab's fault)
    ("fp8", 990, "fail"),
])
def test_clock_floors_pass_a_healthy_gpu_and_catch_a_throttle(dtype, mhz, outcome):
    profile = one_gpu_profile()
    res = CheckResult("gemm_burnin", "ok", 1.0, (_clock(dtype, mhz),), needs=("gpu", "torch"))
    verdicts = [v for v in judge([res], profile) if v.metric == "gemm.load_sm_clock_mhz"
                and v.value is not None]
    assert [v.outcome for v in verdicts] == [outcome]


# --- the reference job planned from the node -----------------------------------------------

def _golden_measurements(shape: str, world: int, steps: int) -> list[Measurement]:
    """What fsdp_train reports for a run that follows the stored golden curve exactly."""
    cfg = {"seq": 8192, "steps": steps, "seed": 1234, "batch": 1, "lr": 5e-05, "warmup": 5,
           "max_norm": 1.0, "min_lr_factor": 0.0}
    g = load_golden(shape, world, cfg)
    assert g is not None
    curve = {"world": str(world), "shape": shape, "dtype": "bf16", "seed": "1234", "ac": "none"}
    config = {**curve, **{k: str(v) for k, v in cfg.items()}}
    ms = [Measurement("fsdp.run_config", True, "", config)]
    ms += [Measurement("fsdp.loss", v, "", {"step": str(s), **curve}) for s, v in g.loss.items()]
    return ms


@pytest.fixture
def gpu_node(monkeypatch, tmp_path):
    """A GPU node of `world` H200s: torch's count and nvidia-smi's memory; _run recorded."""
    calls: list[list[str]] = []

    def make(world: int, level: str, site: dict | None = None, run=None):
        monkeypatch.setattr(workload_checks, "_gpu_count", lambda ctx: world)
        gpus = [SimpleNamespace(memory_total_mib=H200_MIB) for _ in range(world)]
        monkeypatch.setattr(workload_checks, "smi", lambda ctx: SimpleNamespace(gpus=gpus))

        def fake_run(ctx, module, args, expect_s, nproc=None):
            calls.append(args)
            if run is not None:
                return run(args)
            shape, steps = args[args.index("--shape") + 1], int(args[args.index("--steps") + 1])
            return _golden_measurements(shape, world, steps)

        monkeypatch.setattr(workload_checks, "_run", fake_run)
        profile = scope(load_profile("xe9680-h200"), gpus=world, without=ONE_GPU_WITHOUT)
        ctx = Context(profile=profile, level=level, out=tmp_path, site=dict(site or {}))
        return ctx, calls

    return make


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


@pytest.mark.parametrize("world, level, shape, steps, golden", [
    (1, "standard", "llama3-1b", "16", "llama3-1b.w1.bf16.json"),
    (2, "standard", "llama3-8b", "30", "llama3-8b.w2.bf16.json"),
    (1, "quick", "llama3-1b", "16", "llama3-1b.w1.bf16.json"),
    (2, "quick", "llama3-1b", "16", "llama3-1b.w2.bf16.json"),
])
def test_the_level_runs_the_largest_shape_that_fits_against_its_golden_curve(
        gpu_node, world, level, shape, steps, golden):
    ctx, calls = gpu_node(world, level)
    ms = list(workload_checks.fsdp_reference(ctx))
    assert _arg(calls[0], "--shape") == shape and _arg(calls[0], "--steps") == steps
    plan = next(m for m in ms if m.name == "fsdp.plan")
    assert plan.value == shape and plan.labels["world"] == str(world)
    assert plan.labels["gpu_memory_gib"] == "140.4" and "fits" in plan.labels["reason"]
    est = {m.labels["shape"]: m for m in ms if m.name == "fsdp.plan_estimate_gib"}
    assert est[shape].labels["fits"] == "yes"
    dev = next(m for m in ms if m.name == "fsdp.loss_deviation")
    assert dev.labels["golden"] == golden and dev.value == 0


def test_llama3_8b_on_one_gpu_is_planned_out_with_its_estimate(gpu_node):
    ctx, _ = gpu_node(1, "standard")
    ms = list(workload_checks.fsdp_reference(ctx))
    est = {m.labels["shape"]: m for m in ms if m.name == "fsdp.plan_estimate_gib"}
    assert est["llama3-8b"].labels["fits"] == "no" and est["llama3-8b"].value > 140.4
    reason = next(m for m in ms if m.name == "fsdp.plan").labels["reason"]
    assert "larger shapes do not: llama3-8b needs" in reason


def test_no_shape_that_fits_fails_the_check_with_the_reason_never_a_crash(gpu_node):
    ctx, calls = gpu_node(1, "standard", site={"workloads": {"fsdp": {"shape": "llama3-8b"}}})
    profile = ctx.profile
    res = run_check(all_checks()["fsdp_reference"], ctx, profile.required_needs())
    assert calls == []  # never started
    assert res.status == "error"
    assert "no configured shape fits in GPU memory on 1 GPU of 140.4 GiB" in res.message
    assert "llama3-8b needs ~171.8 GiB per GPU" in res.message
    assert [m.value for m in res.measurements if m.name == "fsdp.plan"] == ["none"]
    v = next(v for v in judge([res], profile) if v.check == "fsdp_reference")
    assert v.outcome == "fail" and "out of GPU memory" in v.remediation
    assert "install or repair" not in v.remediation


def test_an_out_of_memory_failure_names_shape_world_and_memory(gpu_node):
    def oom(args):
        raise RuntimeError("fsdp_train exited 1: torch.OutOfMemoryError: CUDA out of memory. "
                           "Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 139.81 GiB")

    ctx, _ = gpu_node(2, "standard", run=oom)
    res = run_check(all_checks()["fsdp_reference"], ctx, ctx.profile.required_needs())
    assert res.status == "error"
    assert res.message.startswith("GpuOutOfMemory: out of memory: llama3-8b (seq 8192, AC none) "
                                  "on 2 GPU(s) of 140.4 GiB, planned ~112.0 GiB per GPU")
    v = next(v for v in judge([res], ctx.profile) if v.check == "fsdp_reference")
    assert "out of GPU memory" in v.remediation and "install or repair" not in v.remediation


def test_other_failures_keep_the_install_or_repair_remediation():
    res = CheckResult("hbm", "error", 1.0, (), "RuntimeError: hbm exited 1: CUDA error: "
                      "an illegal memory access was encountered", ("gpu", "torch"))
    v = judge_mod._status_verdicts([res], one_gpu_profile())[0]
    assert v.remediation.startswith("install or repair what the check needs (gpu, torch)")


def test_the_lab_keeps_the_tiny_cpu_job_unplanned(gpu_node):
    ctx, calls = gpu_node(2, "standard", site={"workloads": {"device": "cpu"}},
                          run=lambda args: [])
    ms = list(workload_checks.fsdp_reference(ctx))
    assert _arg(calls[0], "--shape") == "tiny" and _arg(calls[0], "--seq") == "128"
    assert _arg(calls[0], "--ckpt-step") == "15"
    assert not [m for m in ms if m.name.startswith("fsdp.plan")]


def test_estimates_match_the_measured_peaks_within_the_headroom():
    """bench/results/h200x2-2026-11-30.md, eager, seq 8192, batch 1, AC none, peak allocated."""
    measured = {("llama3-8b", 2): 111.4, ("llama3-1b", 1): 43.8, ("llama3-1b", 2): 35.4}
    for (shape, world), gib in measured.items():
        est = fsdp_plan.estimate(shape, world, 8192).total / fsdp_plan.GiB
        assert abs(est - gib) / gib <= fsdp_plan.HEADROOM, (shape, world, est)


@pytest.mark.parametrize("name, world, level, shape", [
    ("xe9680-h100", 8, "standard", "llama3-8b"),          # 80 GB: 8B still fits on 8
    ("dl380a-gen11-h100nvl", 4, "standard", "llama3-8b"),  # 94 GB on 4
    ("dl380a-gen12-h200nvl", 8, "standard", "llama3-8b"),
    ("xe9680-h200", 8, "burnin", "llama3-8b"),
])
def test_full_machines_keep_the_levels_largest_shape(name, world, level, shape):
    mib = int(load_profile(name).gpu("memory_mib"))
    pl = fsdp_plan.plan(workload_checks.FSDP_SHAPES[level], world, mib << 20)
    assert pl.chosen is not None and pl.chosen["shape"] == shape, pl.reason
