"""GPU workload checks: burn-in, HBM, collectives, host transfers, P2P, storage, reference FSDP job.

Each check runs its worker on one process per GPU and turns the workers' JSON
lines into Measurements; the judge decides. Where a run has more than one GPU
workload, they share one long-lived worker group (launch.WorkerGroup: torchrun
and NCCL init paid once); otherwise each starts its own torchrun. A workload runs
to its check's deadline (runner: from validation/budgets.yml). Sizes and
durations come from the level, overridable per site under `workloads:`
(e.g. `workloads: {gemm_burnin: {duration_s: 7200}, device: cpu}`). The reference
job's shape is planned from the node's GPU count and memory (fsdp_plan): the level's
largest shape that fits, or a failure that says why none does.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from validation import budgets, procs
from validation.checks.common import smi
from validation.checks.registry import CheckSkipped, Context, check, family
from validation.model import Measurement
from validation.probes import nccl_tests
from validation.workloads import fsdp_plan
from validation.workloads.burnin_log import done_s, log_path, read_intervals
from validation.workloads.busbw import OPS
from validation.workloads.common_env import nvls_enabled, roce_env
from validation.workloads.golden import golden_deviation
from validation.workloads.launch import (
    WorkerGroup,
    WorkloadFailed,
    WorkloadTimedOut,
    run_workload,
)

# per level: worker arguments and the seconds the run is expected to take (progress, timeout)
LEVELS: dict[str, dict[str, dict[str, Any]]] = {
    "gemm_burnin": {
        # quick and standard fit their budget shares (validation/budgets.yml)
        "quick": {"duration_s": 15},
        "standard": {"duration_s": 84},
        "burnin": {"duration_s": 4 * 3600},
    },
    "hbm": {
        "quick": {"bits": "0:64:8", "random_passes": 1},
        "standard": {"bits": "0:64", "random_passes": 2},
        "burnin": {"bits": "0:64", "random_passes": 8},
    },
    "collectives": {
        "quick": {"sizes": "64M,1G", "pair_size": "256M"},
        "standard": {"sizes": "1M:4G:x4", "pair_size": "256M"},
        "burnin": {"sizes": "1M:8G:x2", "pair_size": "1G"},
    },
}

# The reference job's shapes per level, largest first: the plan (fsdp_plan) runs the first
# whose memory estimate fits the node's GPUs. llama3-8b cannot fit one GPU of 141 GB (its
# fp32 weights, gradients and AdamW state alone are 120 GiB); llama3-1b runs there with the
# config of its one-GPU golden curve (validation/golden/llama3-1b.w1.bf16.json: 16 steps).
# quick: no checkpoint round trip (~25 s of an 18 GB write and read on 2x H200, a third of
# the level's 90 s); standard and burnin carry it.
FSDP_SHAPES: dict[str, list[dict[str, Any]]] = {
    "quick": [{"shape": "llama3-1b", "steps": 16, "ckpt_step": 0}],
    "standard": [{"shape": "llama3-8b", "steps": 30, "ckpt_step": 15},
                 {"shape": "llama3-1b", "steps": 16, "ckpt_step": 8}],
    "burnin": [{"shape": "llama3-8b", "steps": 300, "ckpt_step": 150},
               {"shape": "llama3-1b", "steps": 300, "ckpt_step": 150}],
}
LEVELS["fsdp"] = {level: shapes[0] for level, shapes in FSDP_SHAPES.items()}


def _site(ctx: Context, key: str) -> dict[str, Any]:
    w = ctx.site.get("workloads") or {}
    return dict(w.get(key) or {})


def _device(ctx: Context) -> str:
    return str((ctx.site.get("workloads") or {}).get("device", "cuda"))


def _gpu_count(ctx: Context) -> int:
    def count() -> int:
        if _device(ctx) == "cpu":
            return 2
        try:
            p = subprocess.run(
                [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise CheckSkipped("torch did not answer how many GPUs it sees") from None
        if p.returncode != 0:
            raise CheckSkipped("torch is not importable on this node")
        return int(p.stdout.strip() or 0)

    n = ctx.once("workloads.gpu_count", count)
    if n < 1:
        raise CheckSkipped("torch sees no GPU")
    return n


def _raid_dir(ctx: Context) -> Path:
    """Where storage and checkpoint writes go: the profile's /raid, or the site's
    `workloads: {storage: {dir: ...}}` where the array is simulated (the lab) and a
    plain directory stands in for it."""
    override = _site(ctx, "storage").get("dir")
    if override:  # a stand-in directory is ours to create; a real /raid never is
        Path(str(override)).mkdir(parents=True, exist_ok=True)
        return Path(str(override))
    return Path(str(ctx.profile.inventory.get("raid", {}).get("mount", "/raid")))


def _params(ctx: Context, key: str) -> dict[str, Any]:
    return {**LEVELS[key].get(ctx.level, LEVELS[key]["quick"]), **_site(ctx, key)}


def _run(
    ctx: Context, module: str, args: list[str], expect_s: float, nproc: int | None = None
) -> list[Measurement]:
    out = ctx.artifacts / "workloads" / module
    n = nproc or _gpu_count(ctx)
    deadline = ctx.cache.get("check.deadline")
    # a little inside the check's own timeout, so the workload is killed here (and the
    # check says which workload) before the runner's backstop fires
    timeout_s = (max(1.0, deadline - time.monotonic() - KILL_MARGIN_S) if deadline
                 else max(120.0, expect_s * 2 + 120))
    nvls = nvls_enabled(getattr(ctx.profile, "nvls", False), ctx.site)
    fabric_env = roce_env(ctx.site)  # NCCL_IB_TC / NCCL_IB_GID_INDEX on RoCE
    argv = ["--device", _device(ctx), *args]
    lmap = _launch_map(ctx)
    try:
        if ctx.cache.get("workloads.use_group"):
            ms, log = _group(ctx, n, nvls, lmap, fabric_env).run(
                module, argv, out, timeout_s, progress=lambda f, eta: ctx.progress(f, eta, module),
                expect_s=expect_s, label=ctx.current_check or module)
        else:
            ms, log = run_workload(
                module, n, argv, out, timeout_s=timeout_s,
                progress=lambda f, eta: ctx.progress(f, eta, module), expect_s=expect_s, nvls=nvls,
                launch_map=lmap, nccl_env=fabric_env)
    except WorkloadTimedOut as e:
        raise procs.TimedOut(str(e)) from None
    except WorkloadFailed as e:
        raise RuntimeError(str(e)) from None
    rel = str(log.relative_to(ctx.out))
    # a probe fact: where the workload ran (GPU telemetry and PyTorch's NCCL exist on cuda)
    device = Measurement("workload.device", _device(ctx), "", {"workload": module})
    return [*(Measurement(m.name, m.value, m.unit, m.labels, rel) for m in ms), device]


KILL_MARGIN_S = 10.0


def _launch_map(ctx: Context) -> Path | None:
    """The node's launch map for the workers to bind to (pcie.launch_map's artifact, made
    here where that check did not run, e.g. under --only); None where the node cannot give
    one (no topo -m, no RDMA NIC: a VM slice), and the workers then run unbound."""
    from validation.checks.pcie import launch_map_of
    from validation.launch_read import ARTIFACT

    def make() -> Path | None:
        try:
            launch_map_of(ctx)
        except Exception as e:  # noqa: BLE001  no map is no binding, never a failure here
            print(f"launch map: not available ({e}); workers run unbound", file=sys.stderr)
            return None
        return ctx.artifacts / ARTIFACT
    return ctx.once("workloads.launch_map", make)


def _group(ctx: Context, nproc: int, nvls: bool, lmap: Path | None = None,
           nccl_env: dict[str, str] | None = None) -> WorkerGroup:
    """The run's worker group (the runner closes it at the end of the run)."""
    g = ctx.cache.get("workloads.group")
    if g is not None and not g.matches(nproc, _device(ctx), nvls, nccl_env):
        if g.killed_after:  # a killed group stays the reason the rest do not run
            return g
        g.close()
        g = None
    if g is None:
        g = WorkerGroup(nproc, _device(ctx), ctx.out / "worker-group", nvls, lmap, nccl_env)
        ctx.cache["workloads.group"] = g
    return g


def _burnin_left_s(ctx: Context) -> float:
    """Seconds of burn-in still to run: the level's (or site's) duration less what an
    interrupted run already logged."""
    p = _params(ctx, "gemm_burnin")
    out = ctx.artifacts / "workloads" / "gemm_burnin"
    return max(0.0, float(p["duration_s"]) - done_s(read_intervals(log_path(out, 0))))


@budgets.planner("gemm_burnin")
def _burnin_planned_s(ctx: Context) -> float:
    return _burnin_left_s(ctx) + BURNIN_OVERHEAD_S


# SDC screens and fp8 probe around the burn-in's duration (a separate launch adds ~10 s)
BURNIN_OVERHEAD_S = 10.0


@check(
    "gemm_burnin",
    emits=(*family("gemm."), "workload.device"),
    needs=("gpu", "torch"),
    timeout_s=5 * 3600,
    title="GEMM burn-in on every GPU at once, with telemetry and an SDC screen",
)
def gemm_burnin(ctx: Context) -> Iterator[Measurement]:
    p = _params(ctx, "gemm_burnin")
    args = ["--duration-s", str(p["duration_s"])]
    for k in ("side", "dtypes", "sdc_every_s", "ramp_s", "interval_s"):
        if k in p:
            args += [f"--{k.replace('_', '-')}", str(p[k])]
    out = ctx.artifacts / "workloads" / "gemm_burnin"
    # A fresh run starts in an emptied run directory (runner.prepare_out), so interval
    # logs here can only be those of the interrupted run that `--resume` continues.
    left = _burnin_left_s(ctx)
    if log_path(out, 0).exists():
        args.append("--resume")
        _keep_aside(out / "gemm_burnin.log")  # the launcher starts a new log
    yield from _run(ctx, "gemm_burnin", args, left + BURNIN_OVERHEAD_S)


def _keep_aside(log: Path) -> None:
    """The interrupted worker's log stays beside the new one (gemm_burnin.log.1, .2, ...)."""
    if not log.exists():
        return
    k = 1
    while log.with_name(f"{log.name}.{k}").exists():
        k += 1
    log.rename(log.with_name(f"{log.name}.{k}"))


@check(
    "hbm",
    emits=(*family("hbm."), "workload.device"),
    needs=("gpu", "torch"),
    timeout_s=3600,
    title="HBM bandwidth and pattern test on every GPU",
)
def hbm(ctx: Context) -> Iterator[Measurement]:
    p = _params(ctx, "hbm")
    yield from _run(
        ctx, "hbm", ["--bits", str(p["bits"]), "--random-passes", str(p["random_passes"])], 60
    )


@check(
    "collectives",
    emits=("nccl.busbw", "nccl.algbw", "nccl.correct", "nccl.pair_busbw",
           "nccl.torch_version", "workload.device"),
    needs=("gpu", "multi-gpu", "torch"),
    timeout_s=3600,
    title="NCCL collectives: busbw over a size sweep, correctness, every GPU pair",
)
def collectives(ctx: Context) -> Iterator[Measurement]:
    p = _params(ctx, "collectives")
    if _device(ctx) == "cpu":
        # gloo on a CPU node (the lab): GPU-sized tensors (1 GiB x 2 ranks x ops) exhaust a
        # small node's memory; the site may still set sizes explicitly
        site = _site(ctx, "collectives")
        p = {**p, "sizes": site.get("sizes", "64K,1M"), "pair_size": site.get("pair_size", "1M")}
    yield from _run(
        ctx, "collectives", ["--sizes", str(p["sizes"]), "--pair-size", str(p["pair_size"])], 120
    )


def nccl_tests_dir(ctx: Context) -> Path:
    """Where the validation_tools role built nccl-tests: <validation_tools_nccl_tests_dir>/build
    (the site's role variable; the role's default where a bare node run has no site)."""
    d = ctx.site.get("validation_tools_nccl_tests_dir", "/opt/rackready/nccl-tests")
    return Path(str(d)) / "build"


@check(
    "nccl_tests",
    emits=("nccl.busbw", "nccl.algbw", "nccl.correct", "nccl_tests.version"),
    needs=("gpu", "multi-gpu", "nccl-tests"),
    # quick keeps to the torch sweep (a minutes budget); the acceptance levels run both
    levels=("standard", "burnin"),
    timeout_s=3600,
    title="nccl-tests beside the PyTorch collectives: busbw per op and size, #wrong",
)
def nccl_tests_check(ctx: Context) -> Iterator[Measurement]:
    """nccl-tests (single process, -g N), out-of-place figures, judged as the torch ones."""
    build = nccl_tests_dir(ctx)
    missing = [op for op in OPS if not (build / f"{op}_perf").is_file()]
    if missing:
        # required by the profile: the judge fails the node with this message
        raise CheckSkipped(f"nccl-tests not built: {build} lacks "
                           f"{', '.join(m + '_perf' for m in missing)} (the validation_tools "
                           "role builds it when validation_tools_nccl_tests_url is set)")
    p = _params(ctx, "collectives")
    sizes = str(p["sizes"])
    lo, hi = sizes.split(":")[:2] if ":" in sizes else (sizes.split(",")[0], sizes.split(",")[-1])
    # nccl-tests is no torch job: where the site runs torch on CPU (the lab) the GPUs it
    # drives are the ones nvidia-smi lists (the lab's are hwsim's, and so is nccl-tests)
    n = len(smi(ctx).gpus) if _device(ctx) == "cpu" else _gpu_count(ctx)
    for op in OPS:
        name = f"nccl-tests-{op}.txt"
        text = ctx.run([str(build / f"{op}_perf"), "-b", lo, "-e", hi, "-f", "4", "-g", str(n),
                        "-d", "bfloat16", "-w", "5", "-n", "20"],
                       timeout_s=900, artifact=name)
        # an unknown layout raises ParseError ("unparsed"): the check errors, never 0 GB/s
        rows, _ = nccl_tests.parse(text, op)
        version = nccl_tests_version(text)
        if version:
            yield Measurement("nccl_tests.version", version, "", {"op": op},
                              f"artifacts/{name}")
        for r in rows:
            lab = {"op": op, "size_bytes": str(r.size_bytes), "impl": "nccl-tests", "ranks": str(n)}
            yield Measurement("nccl.busbw", r.oop_busbw, "GB/s", lab, f"artifacts/{name}")
            yield Measurement("nccl.algbw", r.oop_algbw, "GB/s", lab, f"artifacts/{name}")
            if r.oop_wrong is not None:
                yield Measurement("nccl.correct", r.oop_wrong == 0, "", lab, f"artifacts/{name}")


def nccl_tests_version(text: str) -> str | None:
    """'# nccl-tests version 2.19.6 nccl-headers=...' (2.14 and later); None before."""
    for line in text.splitlines()[:5]:
        words = line.lstrip("#").split()
        if words[:2] == ["nccl-tests", "version"] and len(words) > 2:
            return words[2]
    return None


@check(
    "host_transfers",
    emits=("host.h2d_bandwidth", "host.d2h_bandwidth", "host.bidir_bandwidth", "p2p.bandwidth",
           "workload.device"),
    needs=("gpu", "torch"),
    # peer to peer needs a peer: a one-GPU scope (a VM slice) does not require it
    metric_needs={"p2p.bandwidth": ("multi-gpu",)},
    timeout_s=1800,
    title="Pinned H2D/D2H/bidirectional per GPU from its NUMA node, and P2P per GPU pair",
)
def host_transfers(ctx: Context) -> Iterator[Measurement]:
    yield from _run(ctx, "transfers", [], 60)


@check(
    "storage_fio",
    emits=("storage.fio_read", "storage.fio_write"),
    needs=("raid", "fio"),
    timeout_s=1800,
    title="fio sequential read/write on /raid",
)
def storage_fio(ctx: Context) -> Iterator[Measurement]:
    from validation.workloads.storage import run_fio

    if shutil.which("fio") is None:
        raise CheckSkipped("fio is not installed")
    mount = _raid_dir(ctx)
    res = run_fio(mount, size=str(_site(ctx, "storage").get("fio_size", "8G")))
    yield Measurement("storage.fio_read", round(res["read"], 3), "GB/s", {"mount": str(mount)})
    yield Measurement("storage.fio_write", round(res["write"], 3), "GB/s", {"mount": str(mount)})


@check(
    "storage_ckpt",
    emits=("storage.ckpt_write", "storage.ckpt_read"),
    needs=("raid",),
    timeout_s=1800,
    title="Checkpoint-shaped parallel write/read on /raid",
)
def storage_ckpt(ctx: Context) -> Iterator[Measurement]:
    from validation.workloads.storage import checkpoint_io

    mount = _raid_dir(ctx)
    if not mount.is_dir():
        raise CheckSkipped(f"{mount} is not a directory")
    s = _site(ctx, "storage")
    files = int(s.get("ckpt_files", 16 if ctx.level != "quick" else 8))
    res = checkpoint_io(mount, files=files, file_bytes=int(s.get("ckpt_file_bytes", 1 << 30)))
    lab = {"mount": str(mount), "files": str(files)}
    yield Measurement("storage.ckpt_write", round(res["write"], 3), "GB/s", lab)
    yield Measurement("storage.ckpt_read", round(res["read"], 3), "GB/s", lab)


class GpuOutOfMemory(RuntimeError):
    """A workload ran out of GPU memory; the message names the job, the world and the GPUs'
    memory (the runner prefixes the class name, which says the cause)."""


def _fsdp_candidates(ctx: Context) -> list[dict[str, Any]]:
    """The level's shapes, largest first, with the site's settings over each; a site that
    names a shape makes it the only candidate."""
    site = _site(ctx, "fsdp")
    shapes = FSDP_SHAPES.get(ctx.level, FSDP_SHAPES["quick"])
    if "shape" in site:
        return [{**shapes[0], **site}]
    return [{**c, **site} for c in shapes]


def _gpu_memory(ctx: Context) -> tuple[int, str]:
    """(bytes of the smallest GPU, where the figure came from): nvidia-smi's framebuffer size,
    else the profile's inventory where nvidia-smi cannot answer."""
    try:
        sizes = [g.memory_total_mib for g in smi(ctx).gpus if g.memory_total_mib]
    except Exception:  # no nvidia-smi, or one that fails: the profile's figure stands in
        sizes = []
    if sizes:
        return min(sizes) << 20, "nvidia-smi"
    return int(ctx.profile.gpu("memory_mib", 0) or 0) << 20, "profile"


def _plan_measurements(pl: fsdp_plan.Plan, world: int, source: str) -> list[Measurement]:
    """The plan as the report shows it: the shape chosen and why, and every estimate."""
    labels = {"world": str(world), "gpu_memory_gib": f"{pl.gpu_bytes / fsdp_plan.GiB:.1f}",
              "usable_gib": f"{pl.usable_bytes / fsdp_plan.GiB:.1f}", "memory_source": source,
              "reason": pl.reason}
    out = [Measurement("fsdp.plan", str(pl.chosen["shape"]) if pl.chosen else "none", "",
                       labels)]
    for cand, est, fits in pl.estimates:
        out.append(Measurement("fsdp.plan_estimate_gib", round(est.total / fsdp_plan.GiB, 1),
                               "GiB", {"shape": str(cand["shape"]), "world": str(world),
                                       "fits": "yes" if fits else "no"}))
    return out


def _plan_fsdp(ctx: Context) -> tuple[dict[str, Any], fsdp_plan.Plan, list[Measurement]]:
    """The shape this node can hold; a node that can hold none fails the check with why."""
    world = _gpu_count(ctx)
    gpu_bytes, source = _gpu_memory(ctx)
    pl = fsdp_plan.plan(_fsdp_candidates(ctx), world, gpu_bytes)
    return (pl.chosen or {}), pl, _plan_measurements(pl, world, source)


def _is_oom(message: str) -> bool:
    return "out of memory" in message.lower()


@check(
    "fsdp_reference",
    # the rack deviation is the fleet's (rackready.decide.fleet), not this node's
    emits=(*(n for n in family("fsdp.") if n != "fsdp.loss_rack_deviation"),
           "launch.rank_binding", "workload.device"),
    needs=("gpu", "torch"),
    timeout_s=3 * 3600,
    title="Reference FSDP2 training job: throughput, MFU, loss curve, checkpoint round trip",
)
def fsdp_reference(ctx: Context) -> Iterator[Measurement]:
    p = _params(ctx, "fsdp")
    gpu = ctx.profile.inventory.get("gpu", {})
    peak = gpu.get("bf16_dense_tflops", {})
    peak = float(peak.get("value", 0) if isinstance(peak, dict) else peak or 0)
    pl: fsdp_plan.Plan | None = None
    if _device(ctx) == "cpu":
        # the tiny CPU model's round trip costs nothing, so CPU runs (the lab, CI) keep the
        # resume check at every level; GPU quick drops it for its time budget
        p = {**p, "shape": "tiny", "seq": p.get("seq", 128),
             "ckpt_step": p.get("ckpt_step") or int(p["steps"]) // 2}
    else:
        p, pl, plan_ms = _plan_fsdp(ctx)
        yield from plan_ms
        if pl.chosen is None:
            raise procs.NotRun(f"fsdp_reference not run: {pl.reason}")
    mount = _raid_dir(ctx)
    ckdir = Path(str(p.get("ckpt_dir", mount if mount.is_dir() else ctx.out / "ckpt")))
    args = [
        "--shape",
        str(p["shape"]),
        "--steps",
        str(p["steps"]),
        "--ckpt-step",
        str(p["ckpt_step"]),
        "--ckpt-dir",
        str(ckdir),
        "--seq",
        str(p.get("seq", 8192)),
        "--ac",
        str(p.get("ac", "none")),
    ]
    if peak:
        args += ["--peak-tflops", str(peak)]
    if p.get("compile"):
        args.append("--compile")
    try:
        ms = _run(ctx, "fsdp_train", args, 60 + 4 * float(p["steps"]))
    except RuntimeError as e:
        if pl is None or isinstance(e, (procs.TimedOut, procs.NotRun)) or not _is_oom(str(e)):
            raise
        raise GpuOutOfMemory(_oom_message(p, pl, str(e))) from None
    yield from ms
    # whether the plan ran the checkpoint round trip (the GPU quick level skips it for its
    # time budget): the profile's not_applicable rule reads it, so a planned round trip
    # that reported nothing still fails as not measured
    yield Measurement("fsdp.ckpt_round_trip", int(p["ckpt_step"]) > 0, "",
                      {"shape": str(p["shape"])})
    yield from _loss_deviation(ctx, p, ms)


def _oom_message(p: dict[str, Any], pl: fsdp_plan.Plan, error: str) -> str:
    est = next((e for c, e, _ in pl.estimates if c is pl.chosen), None)
    world = est.world if est else "?"
    planned = f", planned ~{fsdp_plan.gib(est.total)} per GPU" if est else ""
    return (f"out of memory: {p['shape']} (seq {p.get('seq', 8192)}, AC {p.get('ac', 'none')}) "
            f"on {world} GPU(s) of {fsdp_plan.gib(pl.gpu_bytes)}{planned}: {error}")


def _loss_deviation(ctx: Context, p: dict[str, Any], ms: list[Measurement]
                    ) -> Iterator[Measurement]:
    """The loss curve against the golden curve of the shape and world that ran."""
    got_golden = golden_deviation(ms)
    if got_golden is not None:  # a stored curve for this exact run config
        dev, labels = got_golden
        yield Measurement("fsdp.loss_deviation", dev, "", labels)
        return
    # no stored curve for this config: the profile's inventory curve
    golden = (ctx.profile.inventory.get("fsdp_golden") or {}).get(str(p["shape"])) or {}
    curve = {str(k): float(v) for k, v in (golden.get("loss") or {}).items()}
    got = {m.labels.get("step"): float(m.value) for m in ms if m.name == "fsdp.loss"}  # type: ignore[arg-type]
    if curve:
        missing = [s for s in curve if s not in got]
        dev = float("inf") if missing else max(abs(got[s] - v) for s, v in curve.items())
        yield Measurement(
            "fsdp.loss_deviation", dev, "", {"shape": str(p["shape"]), "steps": ",".join(curve)}
        )
