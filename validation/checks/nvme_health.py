"""NVMe data drives' SMART health: critical warning, media errors, wear, temperature."""

from __future__ import annotations

from collections.abc import Iterator

from validation.checks.common import m
from validation.checks.registry import Context, check
from validation.checks.storage import BOOT_MODELS
from validation.model import Measurement
from validation.probes.nvme_health import parse_smart_log
from validation.probes.storage import parse_nvme_list


@check("storage.nvme_health",
       emits=("nvme.critical_warning", "nvme.media_errors", "nvme.percentage_used",
              "nvme.temperature", "nvme.error_log_entries"),
       needs=("nvme",), timeout_s=120,
       title="NVMe SMART: critical warning, media errors, percentage used, temperature")
def storage_nvme_health(ctx: Context) -> Iterator[Measurement]:
    drives = ctx.once("nvme-list", lambda: parse_nvme_list(
        ctx.run(["nvme", "list", "-o", "json"], timeout_s=30, artifact="nvme-list.json")))
    for d in drives:
        if any(b in d.model for b in BOOT_MODELS):
            continue
        name = d.device.removeprefix("/dev/")
        art = f"nvme-smart-log-{name}.json"
        s = parse_smart_log(ctx.run(["nvme", "smart-log", d.device, "-o", "json"],
                                    timeout_s=30, artifact=art))
        lab = {"drive": d.device, "serial": d.serial or "unknown"}
        a = f"artifacts/{art}"
        yield m("nvme.critical_warning", s.critical_warning, lab, a)
        yield m("nvme.media_errors", s.media_errors, lab, a)
        yield m("nvme.percentage_used", s.percentage_used, lab, a)
        if s.temperature_c is not None:
            yield m("nvme.temperature", s.temperature_c, lab, a)
        if s.error_log_entries is not None:
            yield m("nvme.error_log_entries", s.error_log_entries, lab, a)
