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
    "kernel.cmdline", "kernel.nouveau", "health.delta", "fabric.manager_log",
    # host health
    "nvswitch.sxid", "storage.nvme_health", "host.dimms", "host.memory_errors",
)

# host-side faults (rackready_lab/hwsim/faults_host.py) -> (checks, names)
HOST_FAULT_EXPECTATIONS = {
    "sxid": lambda c: (("nvswitch.sxid",), [f"NVSwitch {c['index']}", c["bus_id"]]),
    # the switch by the driver's number, its bus id and Fabric Manager's physical id, the port
    "fabric-manager-fatal": lambda c: (("fabric.manager_log",), [
        f"NVSwitch {c['index']} (PCI {c['bus_id']}, physical id {c['physical_id']}) "
        f"port {c['port']}", "fabricmanager.nvswitch_fatal"]),
    "fabric-manager-nonfatal": lambda c: (("fabric.manager_log",), [
        f"NVSwitch {c['index']} (PCI {c['bus_id']}, physical id {c['physical_id']}) "
        f"port {c['port']}", "fabricmanager.nvswitch_nonfatal = 3"]),
    "nvme-media-errors": lambda c: (("storage.nvme_health",),
                                    [f"serial {c['serial']}", "nvme.media_errors"]),
    "nvme-wear-out": lambda c: (("storage.nvme_health",),
                                [f"serial {c['serial']}", "nvme.percentage_used"]),
    # the empty slot is named by the count's message (SMBIOS lists the slot with no module)
    "dimm-missing": lambda c: (("host.dimms",), [f"empty DIMM slots {c['locator']}",
                                                 "host.dimm_count = 31"]),
    "edac-uncorrectable": lambda c: (("host.memory_errors",),
                                     [f"DIMM slot {c['locator']}", "host.edac_uncorrected"]),
    # sysfs counters read 0 after a reboot; rasdaemon's database still holds the errors
    "ras-logged-errors": lambda c: (("host.memory_errors",),
                                    [f"DIMM slot {c['locator']}", "host.edac_uncorrected = 2"]),
    # no SMBIOS table copy: dmidecode's text names the empty slot
    "dimm-missing-text": lambda c: (("host.dimms",), [f"empty DIMM slots {c['locator']}",
                                                      "host.dimm_count = 31"]),
}


# --- fabric and PCIe faults (rackready_lab/hwsim/faults_fabric.py) ---------------
# the checks that read them: AER totals, transceivers, GPU idle peers, and the GPUDirect
# rail bandwidth (hwsim's ib_write_bw answers at once, so it stays a hardware read here)
HARDWARE_CHECKS += ("pcie.aer", "network.transceiver", "gpu.idle_peers", "rdma.gpudirect_bw",
                    "pcie.path")
# DCGM's view (quick level): what its host engine lists and its health watches
HARDWARE_CHECKS += ("dcgm.discovery", "dcgm.health")


def _fabric_names(comp: dict[str, Any]) -> list[str]:
    if comp["type"] == "gpu":
        return [f"serial {comp['serial']}", comp["bus_id"]]
    return [f"NIC {comp['name']}"]


FABRIC_EXPECTATIONS = {
    # totals since boot (pcie.aer) and the rise during the run (health.delta)
    "aer-storm": lambda c: (("pcie.aer", "health.delta"), _fabric_names(c)),
    "link-flap": lambda c: (("health.delta",), [f"NIC {c['name']} port 1"]),
    # the switch uplink: both its ends, and the GPU and the NIC behind it
    "pcie-switch-uplink-degraded": lambda c: (
        ("pcie.path",), [*c["hop"].split(" -> "), f"serial {c['serial']}", c["bus_id"],
                         *([f"NIC {c['nic']}"] if c.get("nic") else [])]),
    "slow-rail": lambda c: (("rdma.gpudirect_bw",), [f"NIC {c['name']}"]),
    "transceiver-hot": lambda c: (("network.transceiver",),
                                  [f"NIC {c['name']} port 1", f"serial {c['cable_serial']}"]),
    # RoCE QoS drift: the NIC, its interface and the lossless priority (or the DSCP)
    "ecn-off": lambda c: (("network.roce_qos",), [f"NIC {c['name']}", f"interface {c['netdev']}",
                                                  f"priority {c['priority']}", "roce.ecn_"]),
    "dscp-map-drift": lambda c: (("network.roce_qos",),
                                 [f"NIC {c['name']}", f"interface {c['netdev']}",
                                  f"DSCP {c['dscp']}", "roce.dscp_priority"]),
}


# --- DCGM faults (rackready_lab/hwsim/faults_dcgm.py) ------------------------------
DCGM_EXPECTATIONS = {
    # the incident: the GPU (serial, bus id) and the health watch system that reported it
    "dcgm-health-fail": lambda c: (("dcgm.health",), [f"serial {c['serial']}", c["bus_id"],
                                                      "dcgm.health_failures", c["system"]]),
    # the GPU the driver lists and DCGM does not, by its bus id and serial
    "dcgm-gpu-unseen": lambda c: (("dcgm.discovery",), [f"serial {c['serial']}", c["bus_id"],
                                                        "dcgm.gpu_seen"]),
}


def expected_failure(kind: str, comp: dict[str, Any], raid: bool = True
                     ) -> tuple[tuple[str, ...], list[str]]:
    """(checks expected to fail, strings that name the faulted part) for one fault record.
    raid=False: the node has no md RAID to break (the lab), so the drive count tells."""
    if kind in HOST_FAULT_EXPECTATIONS:
        return HOST_FAULT_EXPECTATIONS[kind](comp)
    if kind in FABRIC_EXPECTATIONS:
        return FABRIC_EXPECTATIONS[kind](comp)
    if kind in DCGM_EXPECTATIONS:
        return DCGM_EXPECTATIONS[kind](comp)
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
            # XIDs judged by the catalog's class: the GPU, the XID and the action
            "xid-13": (("gpu.xid",), [*gpu, "XID 13", "restart the application"]),
            "xid-119": (("gpu.xid",), [*gpu, "XID 119", "reset the GPU"]),
            "xid-61": (("gpu.xid",), [*gpu, "XID 61", "replace the GPU (RMA by serial)"]),
            "xid-54": (("gpu.xid",), [*gpu, "XID 54", "auxiliary power cable"]),
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



def naming_failures(verdicts: list[dict[str, Any]], kind: str, comp: dict[str, Any],
                    raid: bool = True) -> list[dict[str, Any]]:
    """The failed verdicts that are the fault's: an expected check, naming the part."""
    checks, names = expected_failure(kind, comp, raid=raid)
    return [v for v in verdicts if v["outcome"] == "fail" and v["check"] in checks
            and all(n in v["message"] + " " + v["remediation"] for n in names)]


# Fault families: the simulated kinds grouped by the part they hit. Every kind runs
# through hwsim in the unit tier (test_validation_hwsim.py); over SSH on the lab
# (test_faults_lab.py) each family runs once, through its first kind: the part of the
# path the lab adds (the shipped suite, the node's own systemd and tools, fetch and
# judging on the controller) is the same for every kind of a family. The first kinds
# are the ones whose lab path differs most: a GPU that vanishes (nvidia-smi fails), a
# real systemd unit stopped, counters that rise during the run (AER, link flaps, EDAC),
# a drive's SMART log read over SSH.
FAULT_FAMILIES: dict[str, tuple[str, ...]] = {
    "gpu": ("xid-79", "gpu-missing", "ecc-uncorrectable", "row-remap-pending",
            "thermal-throttle", "xid-13", "xid-119", "xid-61", "xid-54", "dcgm-health-fail",
            "dcgm-gpu-unseen"),
    "nvlink-nvswitch": ("nvlink-down", "sxid"),
    "fabric-manager": ("fabric-manager-down", "fabric-manager-fatal", "fabric-manager-nonfatal"),
    "pcie": ("aer-storm", "pcie-downtrained", "pcie-switch-uplink-degraded"),
    "nic-rail": ("link-flap", "ib-port-down", "slow-rail", "transceiver-hot", "ecn-off",
                 "dscp-map-drift"),
    "storage": ("nvme-media-errors", "nvme-missing", "nvme-wear-out"),
    "host-memory": ("edac-uncorrectable", "dimm-missing", "ras-logged-errors",
                    "dimm-missing-text"),
}
# the kind each family runs over SSH
LAB_FAULT_KINDS: tuple[str, ...] = tuple(kinds[0] for kinds in FAULT_FAMILIES.values())
