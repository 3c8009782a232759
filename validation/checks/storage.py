"""NVMe data drives and the /raid md array: count, model, assembled, not degraded, mounted."""

from __future__ import annotations

from collections.abc import Iterator

from validation.checks.common import m
from validation.checks.registry import Context, check
from validation.model import Measurement
from validation.probes.storage import parse_mdstat, parse_nvme_list
from validation.probes.system import parse_mounts

# boot devices that are NVMe too (Dell BOSS-N1, HPE NS204i) are not data drives
BOOT_MODELS = ("BOSS", "NS204")


@check("storage.nvme", emits=("nvme.count", "nvme.model"),
       needs=("nvme",), timeout_s=60, title="NVMe data drive count and model")
def storage_nvme(ctx: Context) -> Iterator[Measurement]:
    drives = parse_nvme_list(ctx.run(["nvme", "list", "-o", "json"], timeout_s=30,
                                     artifact="nvme-list.json"))
    data = [d for d in drives if not any(b in d.model for b in BOOT_MODELS)]
    yield m("nvme.count", len(data), artifact="artifacts/nvme-list.json")
    for d in data:
        yield m("nvme.model", d.model, {"device": d.device, "serial": d.serial})


@check("storage.raid", emits=("raid.assembled", "raid.degraded", "raid.mounted"),
       needs=("raid",), timeout_s=30,
       title="/raid md array assembled, not degraded, mounted")
def storage_raid(ctx: Context) -> Iterator[Measurement]:
    mount_point = str(ctx.profile.inventory.get("raid", {}).get("mount", "/raid"))
    # no /proc/mdstat: the md driver is not loaded, so no array is assembled (a reading)
    arrays = parse_mdstat(ctx.read("/proc/mdstat")) if ctx.exists("/proc/mdstat") else []
    mounts = parse_mounts(ctx.read("/proc/mounts"))
    dev = mounts.get(mount_point, ("", ""))[0]
    # /dev/md0 or /dev/md/raid: match by name; with one array, it is that one
    arr = next((a for a in arrays if dev.endswith(a.name)), None)
    if arr is None and len(arrays) == 1:
        arr = arrays[0]
    lab = {"mount": mount_point, "array": arr.name if arr else "none"}
    yield m("raid.assembled", bool(arr and arr.active), lab)
    if arr is not None:
        yield m("raid.degraded", arr.missing,
                {**lab, "failed": ",".join(arr.failed) or "none"})
    yield m("raid.mounted", mount_point in mounts, {**lab, "device": dev or "none"})
