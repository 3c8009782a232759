"""Health counters read at the start and the end of a run; the judge sees the increase.

A burn-in that breaks something (a new uncorrectable error, a remapped row, an
XID, NVLink/PCIe replays, IB symbol errors) is caught even when the absolute
counter was never zero (the capture's GPU 0 reads one PCIe replay from boot).
"""

from __future__ import annotations

from collections.abc import Iterator

from validation.checks.common import gpu_labels, m, smi
from validation.checks.registry import Context, check
from validation.metrics import HEALTH_COUNTERS
from validation.model import Measurement

Key = tuple[str, tuple[tuple[str, str], ...]]


def read_counters(ctx: Context) -> dict[Key, float]:
    """Every health counter on the node, keyed (counter, labels). Reads fresh values."""
    from validation import xid_catalog
    from validation.checks.gpu_health import xids_by_gpu
    from validation.checks.network import ib_error_counters
    from validation.checks.nvlink import nvlink_error_counters

    ctx.cache.pop("smi", None)
    out: dict[Key, float] = {}

    def put(counter: str, labels: dict[str, str], value: float | None) -> None:
        if value is not None:
            out[(counter, tuple(sorted(labels.items())))] = float(value)

    gpus = smi(ctx).gpus
    for g in gpus:
        lab = gpu_labels(g)
        put("ecc_uncorrected", lab, g.ecc_uncorrected_volatile)
        put("ecc_corrected", lab, g.ecc_corrected_volatile)
        put("remapped_rows", lab, (g.remapped_rows_correctable or 0)
            + (g.remapped_rows_uncorrectable or 0))
        put("pcie_replay", lab, g.pcie_replay)
    labels = {g.index: gpu_labels(g) for g in gpus}
    per_gpu, _ = xids_by_gpu(ctx)
    cat = xid_catalog.for_site(ctx.site)  # the XIDs whose catalog class fails a node
    for idx, events in per_gpu.items():
        put("xid_hardware", labels[idx], sum(cat.fails(e.xid) for e in events))
    if ctx.profile is None or "nvlink" in ctx.profile.requires:
        for gpu, links in nvlink_error_counters(ctx).items():
            for link, counters in links.items():
                lab = {**labels.get(gpu, {"gpu": str(gpu)}), "link": str(link)}
                for kind in ("replay", "recovery", "crc"):
                    put(f"nvlink_{kind}", lab, counters.get(kind))
    for port, port_errors in ib_error_counters(ctx).items():
        put("ib_errors", {"port": port}, port_errors)
    # SXids, uncorrected EDAC errors, uncorrected machine checks
    from validation.checks.host import health_counters

    for counter, lab, value in health_counters(ctx):
        put(counter, lab, value)
    # PCIe AER totals per GPU/NIC and link flaps per port (fabric_health)
    from validation.checks.fabric_health import delta_counters
    for counter, lab, value in delta_counters(ctx):
        put(counter, lab, value)
    return out


def deltas(start: dict[Key, float], end: dict[Key, float]) -> Iterator[Measurement]:
    """Increase per counter; one read at the end without its start is reported as missing."""
    for key in sorted(set(start) | set(end)):
        counter, labels = key
        lab = dict(labels)
        if key not in start or key not in end:
            lab["missing"] = "start" if key not in start else "end"
            yield m(f"health.delta.{counter}", None, lab)
            continue
        yield m(f"health.delta.{counter}", end[key] - start[key], lab)


# counters read only where the node has the part (read_counters): an NVSwitch, NVLink, RDMA
_COUNTER_NEEDS = {"sxid": ("nvswitch",), "nvlink_replay": ("nvlink",),
                  "nvlink_recovery": ("nvlink",), "nvlink_crc": ("nvlink",),
                  "ib_errors": ("rdma",), "ib_link_downed": ("rdma",),
                  "ib_link_recovery": ("rdma",),
                  # sysfs AER and EDAC are the host's: a VM slice's guest has neither
                  "aer_correctable": ("bare-metal",), "aer_nonfatal": ("bare-metal",),
                  "aer_fatal": ("bare-metal",), "edac_uncorrected": ("bare-metal",)}


@check("health.delta", emits=(f"health.delta.{k}" for k in HEALTH_COUNTERS),
       metric_needs={f"health.delta.{k}": v for k, v in _COUNTER_NEEDS.items()},
       needs=("gpu",), timeout_s=120,
       title="increase of health counters between the start and the end of the run")
def health_delta(ctx: Context) -> Iterator[Measurement]:
    start = ctx.cache.get("health.start")
    if isinstance(start, Exception):
        raise RuntimeError(f"start-of-run counters unreadable: {start}")
    if start is None:
        raise RuntimeError("start-of-run counters were not read")
    yield from deltas(start, read_counters(ctx))
