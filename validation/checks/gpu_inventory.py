"""Is this the GPU inventory the customer bought? Count, model, memory, firmware, software."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

from validation.checks.common import gpu_labels, m, smi
from validation.checks.registry import CheckSkipped, CommandFailed, Context, check
from validation.model import Measurement
from validation.probes.system import parse_driver_version

XML = "artifacts/nvidia-smi-q-x.xml"


@check("gpu.inventory",
       emits=("gpu.count", "gpu.driver_version", "gpu.cuda_version", "gpu.model",
              "gpu.memory_total", "gpu.vbios", "gpu.uuid", "gpu.serial", "gpu.power_limit",
              "gpu.persistence_mode", "gpu.mig_mode", "gpu.uniform"),
       needs=("gpu",), timeout_s=90,
       title="GPU count, model, memory, VBIOS, driver and CUDA versions, uniform across GPUs")
def gpu_inventory(ctx: Context) -> Iterator[Measurement]:
    rep = smi(ctx)
    yield m("gpu.count", len(rep.gpus), artifact=XML)
    yield m("gpu.driver_version", rep.driver_version, {"source": "nvidia-smi"})
    if rep.cuda_version:
        yield m("gpu.cuda_version", rep.cuda_version)
    # the proc file is a cross-check of the loaded module; nvidia-smi's reading stands alone
    if ctx.exists("/proc/driver/nvidia/version"):
        yield m("gpu.driver_version", parse_driver_version(ctx.read("/proc/driver/nvidia/version")),
                {"source": "proc"})
    for g in rep.gpus:
        lab = gpu_labels(g)
        yield m("gpu.model", g.name, lab)
        yield m("gpu.memory_total", g.memory_total_mib, lab)
        yield m("gpu.vbios", g.vbios, lab)
        yield m("gpu.uuid", g.uuid, lab)
        yield m("gpu.serial", g.serial, lab)
        if g.power_limit_w is not None:
            yield m("gpu.power_limit", g.power_limit_w, lab)
        yield m("gpu.persistence_mode", g.persistence_mode, lab)
        yield m("gpu.mig_mode", g.mig_mode or "Disabled", lab)  # N/A: GPU without MIG
    # one model, one VBIOS, one memory size on every GPU of a node
    identity = {(g.name, g.vbios, g.memory_total_mib) for g in rep.gpus}
    yield m("gpu.uniform", len(identity) == 1)


def _nccl_from_dpkg(ctx: Context) -> str | None:
    try:
        out = ctx.run(["dpkg-query", "-W", "-f", "${Version}", "libnccl2"], timeout_s=20)
    except (CheckSkipped, CommandFailed):
        return None
    v = re.match(r"(\d+\.\d+\.\d+)", out.strip())
    return v.group(1) if v else None


def _nccl_from_ldconfig(ctx: Context) -> str | None:
    import os

    try:
        out = ctx.run(["ldconfig", "-p"], timeout_s=20)
    except (CheckSkipped, CommandFailed):
        return None
    for ln in out.splitlines():
        if "libnccl.so.2 " in ln or ln.strip().startswith("libnccl.so.2 "):
            path = ln.split("=>")[-1].strip()
            v = re.search(r"libnccl\.so\.(\d+\.\d+\.\d+)", os.path.realpath(path))
            if v:
                return v.group(1)
    return None


# Run by the interpreter that runs the workloads (torchrun is started from it): the NCCL
# PyTorch loads is its own (the nvidia-nccl wheel), not necessarily the system libnccl.
_TORCH_NCCL = (
    "import json, torch, torch.distributed as d\n"
    "print(json.dumps(torch.cuda.nccl.version() if d.is_nccl_available() else None))"
)


def torch_nccl_version(timeout_s: float = 60) -> str | None:
    """torch.cuda.nccl.version() of the workloads' Python as 'major.minor.patch'; None where
    torch is absent or built without NCCL (a CPU build)."""
    try:
        p = subprocess.run([sys.executable, "-c", _TORCH_NCCL], capture_output=True, text=True,
                           timeout=timeout_s, check=False)
        raw = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else None
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        return None
    if isinstance(raw, list):
        return ".".join(str(x) for x in raw[:3])
    if isinstance(raw, int):  # older torch: NCCL_VERSION_CODE, major*10000 + minor*100 + patch
        return f"{raw // 10000}.{raw // 100 % 100}.{raw % 100}"
    return None


def _workloads_on_cpu(ctx: Context) -> bool:
    """The site runs the workloads on CPU (the lab): gloo, no NCCL loaded by them."""
    return str((ctx.site.get("workloads") or {}).get("device", "cuda")) == "cpu"


@check("nccl.version", emits=("nccl.version", "nccl.system_version"),
       needs=("gpu",), timeout_s=90,
       title="NCCL the workloads load (PyTorch's), the system libnccl beside it")
def nccl_version(ctx: Context) -> Iterator[Measurement]:
    system = _nccl_from_dpkg(ctx) or _nccl_from_ldconfig(ctx)
    loaded = None if _workloads_on_cpu(ctx) else ctx.once("nccl.torch", torch_nccl_version)
    if loaded is not None:
        # judged: what every workload runs; the system library is a fact beside it
        # (nccl-tests links it), judged only where a pin asks
        yield m("nccl.version", loaded, {"source": "torch"})
        if system is not None:
            yield m("nccl.system_version", system, {"source": "system"})
        return
    if system is None:
        raise CheckSkipped("libnccl2 not found (dpkg-query, ldconfig) and PyTorch loads no NCCL")
    # no NCCL of PyTorch's (absent, a CPU build, workloads on CPU): the system library is
    # the only NCCL on the node, and the system library a pin asks about
    yield m("nccl.version", system, {"source": "system"})
    yield m("nccl.system_version", system, {"source": "system"})
