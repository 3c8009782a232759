"""NVSwitch fabric: every GPU registered (state Completed), switches present, manager running."""

from __future__ import annotations

from collections.abc import Iterator

from validation.checks.common import gpu_labels, m, smi
from validation.checks.registry import Context, check
from validation.model import Measurement

NVSWITCH_DIR = "/proc/driver/nvidia-nvswitch/devices"


@check("fabric.state", emits=("gpu.fabric_state",),
       needs=("gpu", "nvswitch"), timeout_s=60,
       title="NVLink fabric state of every GPU (Completed)")
def fabric_state(ctx: Context) -> Iterator[Measurement]:
    for g in smi(ctx).gpus:
        yield m("gpu.fabric_state", g.fabric_state or "N/A",
                {**gpu_labels(g), "status": g.fabric_status or "N/A"})


@check("fabric.manager", emits=("nvswitch.count", "fabricmanager.active"),
       needs=("nvswitch", "fabric-manager"), timeout_s=30,
       title="NVSwitch devices present and nvidia-fabricmanager running")
def fabric_manager(ctx: Context) -> Iterator[Measurement]:
    d = ctx.path(NVSWITCH_DIR)
    yield m("nvswitch.count", len(list(d.iterdir())) if d.is_dir() else 0)
    # is-active exits 3 for inactive: a reading, not a failure of the probe
    state = ctx.run(["systemctl", "is-active", "nvidia-fabricmanager"], timeout_s=15,
                    ok_codes=(0, 1, 2, 3, 4)).strip()
    yield m("fabricmanager.active", state == "active", {"state": state or "unknown"})
