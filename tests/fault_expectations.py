"""What each simulated fault must make the validation say: the failing checks and the
words that name the faulted part. Shared by the hwsim end-to-end test (unit) and the
lab test over SSH, so both hold the suite to the same expectation."""

from __future__ import annotations

from typing import Any

# The checks that read hardware state (no workloads): a fault lives in that state.
HARDWARE_CHECKS = (
    "gpu.inventory", "nccl.version", "gpu.health", "gpu.xid", "nvlink.topology", "nvlink.links",
    "pcie.gpu_link", "pcie.nic_link", "pcie.numa", "pcie.acs", "fabric.state", "fabric.manager",
    "network.ports", "network.roce_qos", "network.peermem", "storage.nvme", "storage.raid",
    "kernel.cmdline", "kernel.nouveau", "health.delta",
)


def expected_failure(kind: str, comp: dict[str, Any], raid: bool = True
                     ) -> tuple[tuple[str, ...], list[str]]:
    """(checks expected to fail, strings that name the faulted part) for one fault record.
    raid=False: the node has no md RAID to break (the lab), so the drive count tells."""
    if comp["type"] == "gpu":
        gpu = [f"serial {comp['serial']}", comp["bus_id"]]
        return {
            # nothing on the node names an absent GPU (no expected bus-id list): the
            # count says one is missing; see the assertion on the message below
            "gpu-missing": (("gpu.inventory",), ["gpu.count = 7"]),
            "nvlink-down": (("nvlink.links",), [*gpu, f"NVLink {comp.get('nvlink')}"]),
            "pcie-downtrained": (("pcie.gpu_link",), gpu),
            "ecc-uncorrectable": (("gpu.health", "gpu.xid"), gpu),
            "row-remap-pending": (("gpu.health",), gpu),
            # the lost GPU makes nvidia-smi fail naming its bus id (rc 15)
            "xid-79": (("gpu.inventory", "gpu.health"), [comp["bus_id"]]),
            "thermal-throttle": (("gpu.health",), gpu),
        }[kind]
    if comp["type"] == "service":
        return ("fabric.manager", "fabric.state"), [comp["name"]]
    if comp["type"] == "nic":
        return ("network.ports",), [f"NIC {comp['name']}"]
    # an absent NVMe drive: md names the array it broke (and storage.nvme counts one
    # short); no node-side output names the drive that is gone
    if not raid:
        return ("storage.nvme",), ["nvme.count = 7"]
    return ("storage.raid",), ["md array md0"]
