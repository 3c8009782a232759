"""Is any GPU already failing? ECC, row remapping, retired pages, XIDs, clock events."""

from __future__ import annotations

from collections.abc import Iterator

from validation import xid_catalog
from validation.checks.common import gpu_labels, m, smi
from validation.checks.registry import CheckSkipped, CommandFailed, Context, check
from validation.model import Measurement
from validation.probes.kernel_log import XidEvent, distinct_events, parse_xids, xid_bus_key
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
       needs=("gpu",), timeout_s=60, title="XID events in the kernel log since boot, "
                                            "judged by NVIDIA's XID catalog")
def gpu_xid(ctx: Context) -> Iterator[Measurement]:
    """Per GPU: the XID events whose catalog class fails a node (reset, reboot, RMA, a
    workflow, one the catalog does not know), one measurement per class naming its XIDs
    and action; and the application-class ones (restart the application, or none), which
    only the profile's per-GPU limit judges. A site's overrides (xid_overrides) apply."""
    try:
        cat = xid_catalog.for_site(ctx.site)
    except xid_catalog.XidCatalogError as exc:
        raise ParseError(f"site settings: {exc}") from None
    per_gpu, orphans = xids_by_gpu(ctx)
    labels = {g.index: gpu_labels(g) for g in smi(ctx).gpus}
    for idx, events in per_gpu.items():
        yield from _xid_measurements(cat, distinct_events(events), labels[idx])
    for bus in sorted({e.bus for e in orphans}):
        # an XID from a bus id no GPU answers on: a GPU that fell off the bus
        lost = [e for e in distinct_events(orphans) if e.bus == bus and cat.fails(e.xid)]
        for cls, found in _by_class(cat, lost).items():
            yield m("gpu.xid_hardware", len(found),
                    {"gpu": "missing", "bus_id": bus, **_xid_labels(cat, cls, found)})


def _by_class(cat: xid_catalog.Catalog, events: list[XidEvent]) -> dict[str, list[XidEvent]]:
    out: dict[str, list[XidEvent]] = {}
    for e in events:
        out.setdefault(cat.class_of(e.xid), []).append(e)
    return dict(sorted(out.items()))


def _xid_labels(cat: xid_catalog.Catalog, cls: str | None, events: list[XidEvent]
                ) -> dict[str, str]:
    xids = sorted({e.xid for e in events})
    out = {"xids": ",".join(map(str, xids))} if xids else {}
    if cls:
        out["action"] = cls
    overridden = [w for w in map(cat.override_words, xids) if w]
    if overridden:
        out["override"] = "; ".join(overridden)
    return out


def _xid_measurements(cat: xid_catalog.Catalog, events: list[XidEvent],
                      lab: dict[str, str]) -> Iterator[Measurement]:
    quiet = [e for e in events if not cat.fails(e.xid)]
    yield m("gpu.xid_other", len(quiet), {**lab, **_xid_labels(cat, None, quiet)})
    failing = _by_class(cat, [e for e in events if cat.fails(e.xid)])
    if not failing:
        yield m("gpu.xid_hardware", 0, lab)
    for cls, found in failing.items():
        yield m("gpu.xid_hardware", len(found), {**lab, **_xid_labels(cat, cls, found)})
