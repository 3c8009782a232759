"""Every check, in registration order, and which checks measure a metric.

The check modules import validation.checks.registry for `check`; this module imports
them, so the registry never imports a check and no check module imports this one.
"""

from __future__ import annotations

from validation.checks.registry import LEVELS, NEEDS, CheckSpec, registered

# Checks the controller runs, not the node: the out-of-band read of the BMC
# (rackready/steps/oob.py and envelope.py: the check "bmc") and the rack step's cross-node
# collectives (rackready/steps/rack.py, judged by rackready.decide.rack, never per node).
CONTROLLER_CHECKS: dict[str, tuple[str, ...]] = {
    "bmc": ("bmc.",),
    "rack": ("rack.",),
}
RACK_CHECK = "rack"


def measured_by(metric: str) -> list[CheckSpec]:
    """The checks that measure a metric: the node's (by their emits), then the
    controller's (a pseudo-spec holding its name and the bmc need)."""
    found = [c for c in all_checks().values() if metric in c.emits]
    for name, prefixes in CONTROLLER_CHECKS.items():
        if metric.startswith(prefixes):
            found.append(CheckSpec(name, lambda ctx: (), (name,) if name in NEEDS else (),
                                   LEVELS, 0.0, name, (metric,)))
    return found


def all_checks() -> dict[str, CheckSpec]:
    """Every registered check by name, in registration order (the order imported here;
    health_delta last: it reads the end-of-run counters)."""
    # importing a check module registers its checks; imported on first use, as before the
    # registry and this catalog were two modules
    from validation.checks import (  # noqa: F401, I001  (the order is the registration order)
        gpu_inventory,
        gpu_health,
        nvlink,
        pcie,
        fabric,
        fabric_manager_log,
        network,
        storage,
        kernel,
        dcgm,
        rdma_perf,
        nvswitch,
        nvme_health,
        host,
        fabric_health,
        gpu_idle,
        health_delta,
        workload_checks,
    )

    return registered()
