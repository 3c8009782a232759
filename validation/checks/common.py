"""Probe calls shared by several checks, cached once per pass in the context."""

from __future__ import annotations

from validation.checks.registry import CheckSkipped, Context
from validation.model import Measurement, Value
from validation.probes import nvidia_smi


def smi(ctx: Context) -> nvidia_smi.SmiReport:
    """`nvidia-smi -q -x`, parsed; a node with no GPU visible skips the check."""
    def make() -> nvidia_smi.SmiReport:
        rep = nvidia_smi.parse_query_xml(
            ctx.run(["nvidia-smi", "-q", "-x"], timeout_s=60, artifact="nvidia-smi-q-x.xml"))
        if not rep.gpus:
            raise CheckSkipped("nvidia-smi sees no GPU")
        return rep
    return ctx.once("smi", make)


def topo_text(ctx: Context) -> str:
    """`nvidia-smi topo -m` as printed, read once per pass (NVLink topology and the launch
    map both read it)."""
    return str(ctx.once("topo-m", lambda: ctx.run(["nvidia-smi", "topo", "-m"], timeout_s=30,
                                                 artifact="nvidia-smi-topo-m.txt")))


def gpu_labels(g: nvidia_smi.GpuInfo) -> dict[str, str]:
    return {"gpu": str(g.index), "serial": g.serial or "unknown",
            "bus_id": nvidia_smi.short_bus_id(g.bus_id)}


def labels_by_index(ctx: Context) -> dict[int, dict[str, str]]:
    return {g.index: gpu_labels(g) for g in smi(ctx).gpus}


def m(name: str, value: Value, labels: dict[str, str] | None = None,
      artifact: str | None = None) -> Measurement:
    """A measurement whose unit comes from the metric registry, so they never disagree."""
    from validation import metrics

    return Measurement(name, value, metrics.get(name).unit, dict(labels or {}), artifact)


def rdma_devices(ctx: Context) -> frozenset[str] | None:
    """PCI addresses of the compute-fabric NICs the site names (`rdma_devices`, as the
    rdma_network role's rdma_network_mlx_devices); None: every ConnectX is compute.

    Storage/front-end ConnectX ports the roles leave alone must not be judged as compute.
    """
    devs = ctx.site.get("rdma_devices")
    if devs is None:
        return None
    return frozenset(str(d).lower() for d in devs)
