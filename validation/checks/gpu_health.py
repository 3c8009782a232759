"""Is any GPU already failing? ECC, row remapping, retired pages, XIDs, clock events."""

from __future__ import annotations

from collections.abc import Iterator

from validation.checks.common import gpu_labels, m, smi
from validation.checks.registry import CheckSkipped, CommandFailed, Context, check
from validation.model import Measurement
from validation.probes.kernel_log import XidEvent, parse_xids, xid_bus_key
from validation.probes.nvidia_smi import ParseError

THROTTLE = ("hw_slowdown", "hw_thermal", "hw_power_brake", "sw_thermal", "sw_power_cap")


@check("gpu.health",
       emits=("gpu.ecc_mode", "gpu.ecc_uncorrected_volatile", "gpu.ecc_uncorrected_aggregate",
              "gpu.ecc_corrected_volatile", "gpu.remapped_rows_uncorrectable",
              "gpu.remapped_rows_pending", "gpu.remapped_rows_failure", "gpu.retired_pages",
              "gpu.retired_pages_pending", "gpu.retired_pages_reported", "gpu.temperature",
              *(f"gpu.throttle.{r}" for r in THROTTLE)),
       needs=("gpu",), timeout_s=90,
       title="ECC mode and errors, row remapping, retired pages, clock events, temperature")
def gpu_health(ctx: Context) -> Iterator[Measurement]:
    unread = []
    for g in smi(ctx).gpus:
        lab = gpu_labels(g)
        yield m("gpu.ecc_mode", g.ecc_mode, lab)
        for name, value in (
            ("gpu.ecc_uncorrected_volatile", g.ecc_uncorrected_volatile),
            ("gpu.ecc_uncorrected_aggregate", g.ecc_uncorrected_aggregate),
            ("gpu.ecc_corrected_volatile", g.ecc_corrected_volatile),
            ("gpu.remapped_rows_uncorrectable", g.remapped_rows_uncorrectable),
            ("gpu.remapped_rows_pending", g.remapped_rows_pending),
            ("gpu.remapped_rows_failure", g.remapped_rows_failure),
            # N/A on GPUs with row remapping: not measured rather than a false zero
            ("gpu.retired_pages", g.retired_pages),
            ("gpu.retired_pages_pending", g.retired_pages_pending),
            ("gpu.temperature", g.temperature_c),
        ):
            if value is not None:
                yield m(name, value, lab)
        # the fact that makes the retired-page limits not applicable (the profile says so)
        yield m("gpu.retired_pages_reported", g.retired_pages is not None, lab)
        for reason in THROTTLE:
            if reason in g.clock_events:
                yield m(f"gpu.throttle.{reason}", g.clock_events[reason], lab)
        if (g.ecc_mode or "").lower() == "enabled" and g.ecc_uncorrected_volatile is None \
                and g.ecc_uncorrected_aggregate is None:
            unread.append(str(g.index))
    if unread:
        # ECC on but no count read: an <ecc_errors> layout we do not know, never "no errors"
        raise ParseError(f"unparsed nvidia-smi -q -x: ECC enabled but no error count read "
                         f"on GPU {', '.join(unread)}")


def kernel_log(ctx: Context) -> str:
    """Kernel messages of this boot.

    On a simulated root the rendered kern.log is the whole boot; on a real node
    journalctl -k -b / dmesg hold only this boot, unlike kern.log (many boots).
    """
    if str(ctx.sysroot) != "/":
        try:
            return ctx.read("/var/log/kern.log")
        except FileNotFoundError:
            raise CheckSkipped(f"{ctx.path('/var/log/kern.log')} missing") from None
    for cmd in (["journalctl", "-k", "-b", "--no-pager", "-q"], ["dmesg"]):
        try:
            return ctx.run(cmd, timeout_s=30)
        except (CheckSkipped, CommandFailed):
            continue
    raise CheckSkipped("no kernel log readable (journalctl -k, dmesg)")


def xids_by_gpu(ctx: Context) -> tuple[dict[int, list[XidEvent]], list[XidEvent]]:
    events = parse_xids(kernel_log(ctx))
    by_bus = {xid_bus_key(g.bus_id): g.index for g in smi(ctx).gpus}
    per_gpu: dict[int, list[XidEvent]] = {g.index: [] for g in smi(ctx).gpus}
    orphans: list[XidEvent] = []
    for e in events:
        idx = by_bus.get(xid_bus_key(e.bus))
        (per_gpu[idx] if idx is not None else orphans).append(e)
    return per_gpu, orphans


@check("gpu.xid", emits=("gpu.xid_hardware", "gpu.xid_other"),
       needs=("gpu",), timeout_s=60, title="XID events in the kernel log since boot")
def gpu_xid(ctx: Context) -> Iterator[Measurement]:
    per_gpu, orphans = xids_by_gpu(ctx)
    labels = {g.index: gpu_labels(g) for g in smi(ctx).gpus}
    for idx, events in per_gpu.items():
        hw = sorted({e.xid for e in events if e.hardware})
        lab = {**labels[idx], **({"xids": ",".join(map(str, hw))} if hw else {})}
        yield m("gpu.xid_hardware", sum(e.hardware for e in events), lab)
        yield m("gpu.xid_other", sum(not e.hardware for e in events), labels[idx])
    for bus in sorted({e.bus for e in orphans if e.hardware}):
        # an XID from a bus id no GPU answers on: a GPU that fell off the bus
        lost = [e for e in orphans if e.bus == bus and e.hardware]
        xids = ",".join(sorted({str(e.xid) for e in lost}))
        yield m("gpu.xid_hardware", len(lost), {"gpu": "missing", "bus_id": bus, "xids": xids})
