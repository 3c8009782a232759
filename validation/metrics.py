"""Every metric name the suite may emit, with its unit and which way is better.

A profile threshold names a metric from here and must use its unit, so a typo
or a GB-vs-GiB slip is refused when the profile loads, not discovered when a
node passes a check it never really took. The workloads own their metrics
(validation/workloads/metrics.py); both lists build on validation/metric.py.
"""

from __future__ import annotations

from validation.metric import Better, Metric
from validation.metric import metric as _m
from validation.workloads.metrics import WORKLOAD_METRICS

__all__ = ["METRICS", "Better", "Metric", "get"]

_CORE: list[Metric] = [
    # GPU inventory
    _m("gpu.count", "", "GPUs visible to the driver", "equal"),
    _m("gpu.model", "", "GPU product name", "equal"),
    _m("gpu.memory_total", "MiB", "framebuffer memory per GPU", "equal"),
    _m("gpu.vbios", "", "VBIOS version (matched as a regular expression)", "equal"),
    _m("gpu.driver_version", "", "NVIDIA driver version", "equal"),
    _m("gpu.cuda_version", "", "CUDA version the driver supports", "equal"),
    _m("gpu.uniform", "", "true when model, VBIOS and memory agree on every GPU", "equal"),
    _m("gpu.power_limit", "W", "enforced power limit", "equal"),
    _m("gpu.serial", "", "board serial number", "equal", judged=False),
    _m("gpu.uuid", "", "GPU UUID", "equal", judged=False),
    _m("gpu.temperature", "C", "GPU core temperature", "lower"),
    _m("gpu.persistence_mode", "", "persistence mode", "equal"),
    _m("gpu.mig_mode", "", "MIG mode currently in force", "equal"),
    _m("nccl.version", "", "NCCL the workloads load (PyTorch's, label source=torch); the "
       "system libnccl (source=system) where the workloads load no NCCL of their own", "equal"),
    _m("nccl.system_version", "", "the system libnccl (dpkg, ldconfig) beside PyTorch's NCCL; "
       "judged only where a pin asks (the site's nccl_version)", "equal", judged=False),
    # GPU health
    _m("gpu.ecc_mode", "", "ECC mode currently in force", "equal"),
    _m("gpu.ecc_uncorrected_volatile", "", "uncorrectable ECC errors since boot", "lower"),
    _m("gpu.ecc_uncorrected_aggregate", "", "uncorrectable ECC errors, lifetime", "lower"),
    _m("gpu.ecc_corrected_volatile", "", "correctable ECC since boot", "lower", judged=False),
    _m("gpu.retired_pages", "", "pages retired (pre-Ampere mechanism)", "lower"),
    _m("gpu.retired_pages_pending", "", "a page retirement awaits a reset", "equal"),
    _m("gpu.remapped_rows_uncorrectable", "", "rows remapped for uncorrectable errors", "lower"),
    _m("gpu.remapped_rows_pending", "", "a row remap awaits a GPU reset", "equal"),
    _m("gpu.remapped_rows_failure", "", "row remapping failed (GPU out of spare rows)", "equal"),
    _m("gpu.xid_hardware", "", "XID events since boot whose catalog class fails a node (reset, "
       "reboot, RMA, a workflow, unknown), per GPU and class (labels xids, action)", "lower"),
    _m("gpu.xid_other", "", "XID events since boot whose catalog class does not fail a node "
       "alone (application: restart it; IGNORE), per GPU", "lower"),
    _m("gpu.throttle.hw_slowdown", "", "HW slowdown clock event active", "equal"),
    _m("gpu.throttle.hw_thermal", "", "HW thermal slowdown clock event active", "equal"),
    _m("gpu.throttle.hw_power_brake", "", "HW power brake clock event active", "equal"),
    _m("gpu.throttle.sw_thermal", "", "SW thermal slowdown clock event active", "equal"),
    _m("gpu.throttle.sw_power_cap", "", "SW power cap clock event active", "equal", judged=False),
    # PCIe
    _m("gpu.pcie_gen", "", "current PCIe link generation of the GPU", "higher"),
    _m("gpu.pcie_width", "lanes", "current PCIe link width of the GPU", "higher"),
    _m("nic.pcie_gen", "", "current PCIe link generation of the NIC", "higher"),
    _m("nic.pcie_width", "lanes", "current PCIe link width of the NIC", "higher"),
    _m("gpu.local_nics", "", "RDMA NICs on the GPU's NUMA node", "higher"),
    # every link between a GPU or compute NIC and its root port (pcie.path): what it runs
    # at as a fraction of the lower maximum of its two ends
    _m("pcie.path_width", "", "PCIe link width on a GPU's or NIC's path (root port, switch "
       "uplink, its own link) over the lower maximum width of the link's two ends", "higher"),
    _m("pcie.path_speed", "", "PCIe link speed on a GPU's or NIC's path over the lower "
       "maximum speed of the link's two ends", "higher"),
    _m("pcie.path_emulated", "", "a device's PCIe path runs through a bridge that reports no "
       "link (width 0, speed Unknown: a hypervisor's), or has no port above it", "equal",
       judged=False),
    _m("pcie.acs_enabled", "", "ACS source validation on a bridge above a GPU/NIC", "equal"),
    # the launch map (validation/launch_map.py): GPU <-> NIC <-> NUMA <-> CPUs per local rank
    _m("launch.nic_path", "", "nvidia-smi topo -m path from a GPU to the compute NIC its rank "
       "uses (PIX/PXB: same PCIe switch; PHB/NODE: same NUMA node; none)", "equal"),
    # judged where the profile places a NIC behind every GPU's switch (nic.placement)
    _m("launch.switch_nics", "", "compute NICs behind a GPU's own PCIe switch (PIX/PXB)",
       "equal", judged=False),
    _m("launch.rank_binding", "", "one local rank's GPU, NIC, NUMA node and CPUs (labels)",
       "equal", judged=False),
    # NVLink and NVSwitch
    _m("nvlink.pair_links", "", "NVLinks bonded between two GPUs (topo -m NV#)", "equal"),
    _m("nvlink.links_up", "", "active NVLinks of a GPU", "higher"),
    _m("nvlink.link_speed", "GB/s", "per-link NVLink speed", "higher"),
    _m("nvlink.replay_errors", "", "NVLink replay errors on a link", "lower"),
    _m("nvlink.recovery_errors", "", "NVLink recovery errors on a link", "lower"),
    _m("nvlink.crc_errors", "", "NVLink CRC errors on a link", "lower"),
    _m("nvswitch.count", "", "NVSwitch devices the driver sees", "equal"),
    _m("gpu.fabric_state", "", "NVLink fabric registration state of the GPU", "equal"),
    _m("fabricmanager.active", "", "nvidia-fabricmanager service running", "equal"),
    # the Fabric Manager log since the run began, per NVSwitch (and port where it names one)
    _m("fabricmanager.nvswitch_fatal", "", "NVSwitch fatal errors Fabric Manager logged since "
       "the run began", "lower"),
    _m("fabricmanager.nvswitch_nonfatal", "", "NVSwitch non-fatal errors Fabric Manager logged "
       "since the run began", "lower"),
    _m("fabricmanager.log_errors", "", "other ERROR/CRITICAL entries of the Fabric Manager log "
       "since the run began (the last in its labels)", "lower", judged=False),
    _m("fabricmanager.log_history", "", "error entries of the Fabric Manager log from before "
       "the run began: history, not judged", "lower", judged=False),
    # network
    _m("nic.count", "", "RDMA NIC ports (ibstat CAs)", "equal"),
    _m("nic.model", "", "NIC model (CA type)", "equal"),
    _m("nic.firmware", "", "NIC firmware version", "equal", judged=False),
    _m("ib.port_state", "", "port logical state", "equal"),
    _m("ib.phys_state", "", "port physical state", "equal"),
    _m("ib.rate", "Gb/s", "port rate", "higher"),
    _m("ib.link_layer", "", "InfiniBand or Ethernet", "equal"),
    _m("ib.active_mtu", "B", "active MTU", "equal"),
    _m("roce.trust", "", "QoS trust mode (mlnx_qos)", "equal"),
    _m("roce.pfc_priority_enabled", "", "PFC on the RoCE priority", "equal"),
    _m("roce.pfc_other_priorities", "", "PFC enabled on other priorities", "lower"),
    _m("roce.ecn_np_enabled", "", "ECN notification point (CNP sender) on the RoCE priority "
       "(sysfs ecn/roce_np/enable/<prio>)", "equal"),
    _m("roce.ecn_rp_enabled", "", "ECN reaction point (rate limiter) on the RoCE priority "
       "(sysfs ecn/roce_rp/enable/<prio>)", "equal"),
    _m("roce.dscp_priority", "", "priority the port maps the RoCE DSCP to (mlnx_qos dscp2prio)",
       "equal"),
    _m("nic.mlxconfig", "", "ConnectX firmware setting in effect (mlxconfig Current, as the "
       "number `set` takes; labelled param=...)", "equal"),
    _m("nic.mlxconfig_pending", "", "ConnectX firmware settings whose next-boot value differs "
       "from the one in effect (a reboot pending)", "lower"),
    # the NCCL environment the run's workloads get on RoCE (recorded, judged by the values
    # it is derived from)
    _m("nccl.ib_tc", "", "NCCL_IB_TC every NCCL workload gets (DSCP << 2)", "equal",
       judged=False),
    _m("nccl.ib_gid_index", "", "NCCL_IB_GID_INDEX every NCCL workload gets", "equal",
       judged=False),
    _m("kernel.module_loaded", "", "kernel module loaded (labelled module=...)", "equal"),
    _m("peermem.ib_core_linked", "", "the loaded nvidia_peermem is bound to the loaded ib_core "
       "(/proc/modules: ib_core used by nvidia_peermem)", "equal"),
    _m("kernel.module_current", "", "the loaded module is the file installed now: "
       "/sys/module/<m>/srcversion equals modinfo's srcversion (labelled module=...)", "equal"),
    # field tools
    _m("dcgm.diag_result", "", "DCGM diagnostic plugin result on a GPU (Pass/Fail/Skip/Warn)",
       "equal"),
    _m("dcgm.gpu_count", "", "GPUs DCGM's host engine lists (dcgmi discovery -l)", "equal"),
    _m("dcgm.nvswitch_count", "", "NVSwitches DCGM's host engine lists (dcgmi discovery -l)",
       "equal"),
    _m("dcgm.gpu_seen", "", "a GPU the driver lists is in DCGM's discovery list (by bus id)",
       "equal"),
    _m("dcgm.health_failures", "", "DCGM health watch systems in Failure on a GPU or NVSwitch "
       "(dcgmi health -c)", "lower"),
    _m("dcgm.health_warnings", "", "DCGM health watch systems in Warning on a GPU or NVSwitch "
       "(dcgmi health -c)", "lower"),
    _m("rdma.gpudirect_bw_gbps", "Gb/s",
       "GPUDirect RDMA write bandwidth through a ConnectX port (perftest ib_write_bw)", "higher"),
    # storage
    _m("nvme.count", "", "NVMe data drives", "equal"),
    _m("nvme.model", "", "NVMe drive model", "equal", judged=False),
    _m("raid.assembled", "", "/raid md array assembled", "equal"),
    _m("raid.degraded", "", "md array members missing", "lower"),
    _m("raid.mounted", "", "/raid mounted", "equal"),
    # kernel
    _m("kernel.cmdline_token", "", "token present on the kernel command line", "equal"),
    _m("kernel.nouveau_loaded", "", "nouveau module loaded", "equal"),
    # out of band (BMC, Redfish; measured by the controller, rackready/steps/oob.py)
    _m("bmc.firmware.version", "", "firmware version by component (bios, bmc, cpld, hgx, gpu, "
       "nic, drive, psu; labelled); judged only where the profile sets a minimum", "higher",
       judged=False),
    _m("bmc.psu.redundancy", "", "PSU redundancy group health as the BMC reports it", "equal"),
    _m("bmc.psu.health", "", "power supply health (Redfish Status.Health)", "equal"),
    _m("bmc.fan.health", "", "fan health (Redfish Status.Health)", "equal"),
    _m("bmc.sensor.health", "", "temperature/voltage sensor health against the BMC's own "
       "thresholds", "equal"),
    _m("bmc.temperature.margin", "C", "the BMC's upper critical threshold less the reading",
       "higher"),
    _m("bmc.voltage.in_range", "", "voltage within the BMC's critical thresholds", "equal"),
    _m("bmc.log.critical_new", "", "critical BMC log entries (SEL, Lifecycle, IML, IEL) since "
       "provisioning", "lower"),
    _m("bmc.bios.matches_profile", "", "a BIOS setting in force equals the bios role's profile "
       "(labelled with the attribute, its value and the profile's)", "equal"),
    _m("bmc.power_on_hours", "h", "hours the system has been powered on", "lower",
       judged=False),
    # the power and thermal envelope: the BMC sampled while the suite ran (its burn-in)
    # (rackready/steps/envelope.py)
    _m("bmc.envelope.samples", "", "chassis readings taken through Redfish while the node's "
       "suite ran", "higher"),
    _m("bmc.envelope.refused_readings", "", "chassis readings refused while the node's suite "
       "ran: not a number or outside the physical range (labelled with the first)", "lower"),
    _m("bmc.power.peak_w", "W", "peak chassis draw while the suite ran", "lower",
       judged=False),
    _m("bmc.power.one_lost_load_ratio", "", "peak chassis draw over what the PSUs deliver "
       "with the largest of them lost", "lower"),
    _m("bmc.inlet.peak_c", "C", "highest inlet (intake) air temperature while the suite ran",
       "lower"),
    _m("bmc.exhaust.peak_c", "C", "highest exhaust air temperature while the suite ran",
       "lower", judged=False),
    _m("bmc.psu.health_under_load", "", "a power supply's worst health while the suite ran",
       "equal"),
    _m("bmc.fan.health_under_load", "", "a fan's worst health while the suite ran", "equal"),
    # NVSwitch SXids, NVMe SMART health, host DIMMs/EDAC/MCE, host bandwidth
    _m("nvswitch.sxid_fatal", "", "fatal (or unclassified) NVSwitch SXid events since boot",
       "lower"),
    _m("nvswitch.sxid_nonfatal", "", "non-fatal NVSwitch SXid events since boot", "lower"),
    _m("nvme.critical_warning", "", "NVMe SMART critical warning bits (0 = none)", "equal"),
    _m("nvme.media_errors", "", "NVMe media and data integrity errors, lifetime", "lower"),
    _m("nvme.percentage_used", "%", "NVMe endurance used (vendor estimate, may pass 100)",
       "lower"),
    _m("nvme.temperature", "C", "NVMe composite temperature", "lower"),
    _m("nvme.error_log_entries", "", "NVMe error information log entries, lifetime", "lower",
       judged=False),
    _m("host.dimm_count", "", "DIMMs fitted (SMBIOS memory devices with a size)", "equal"),
    _m("host.memory_total_gib", "GiB", "host memory, sum of the DIMMs", "equal"),
    _m("host.dimm_size_gib", "GiB", "size of one DIMM", "equal"),
    _m("host.dimm_speed_mts", "MT/s", "speed the memory controller runs a DIMM at (configured)",
       "higher"),
    _m("host.dimm_part", "", "DIMM part number", "equal", judged=False),
    _m("host.dimm_source", "", "where the DIMMs were read: smbios-table (the kernel's copy) "
       "or dmidecode (its text, where the table cannot be read)", "equal", judged=False),
    _m("host.edac_controllers", "", "EDAC memory controllers the kernel registered", "equal",
       judged=False),
    _m("host.edac_uncorrected", "", "uncorrected memory errors (EDAC) since boot, per DIMM",
       "lower"),
    _m("host.edac_corrected", "", "corrected memory errors (EDAC) since boot, per DIMM", "lower"),
    _m("host.mce_uncorrected", "", "uncorrected machine-check / firmware-first hardware errors "
       "in the kernel log since boot", "lower"),
    _m("host.mce_corrected", "", "corrected machine-check events in the kernel log since boot",
       "lower", judged=False),
    _m("host.memory_error_sources", "", "the memory error sources read (sysfs-edac, "
       "edac-util, rasdaemon, kernel-log); label not_read says which were not and why",
       "equal", judged=False),
    _m("host.membw_triad", "GB/s", "host memory bandwidth of one NUMA node, STREAM triad "
       "convention (3 x 8 B per element, 1e9 B/s)", "higher"),
    # fabric/PCIe health, GPU idle peers
    _m("pcie.aer_correctable", "", "PCIe AER correctable errors since boot (sysfs)", "lower"),
    _m("pcie.aer_nonfatal", "", "PCIe AER uncorrectable non-fatal errors since boot", "lower"),
    _m("pcie.aer_fatal", "", "PCIe AER uncorrectable fatal errors since boot", "lower"),
    _m("transceiver.module", "", "module identifier and cable type (mlxlink)", "equal",
       judged=False),
    _m("transceiver.temperature", "C", "transceiver module temperature (mlxlink)", "lower"),
    _m("transceiver.rx_power_dbm", "dBm", "received optical power of one lane (mlxlink)",
       "higher"),
    _m("transceiver.effective_ber", "", "bit error rate after FEC (mlxlink)", "lower"),
    _m("transceiver.raw_ber", "", "bit error rate before FEC (mlxlink)", "lower"),
    _m("gpu.idle_power_dev_w", "W", "idle board power minus the node's idle median (abs)",
       "lower"),
    _m("gpu.idle_temp_dev_c", "C", "idle GPU temperature minus the node's idle median (abs)",
       "lower"),
    # run-level
    _m("check.status", "", "how a check ended (ok/skipped/error/timeout)", "equal"),
    # probe facts: why a check measured no value of a metric; a profile's not_applicable
    # rule names the fact that makes a limit not applicable (validation.judge)
    _m("gpu.retired_pages_reported", "", "nvidia-smi reports retired pages for the GPU (N/A "
       "where it retires memory by row remapping: Ampere and later)", "equal", judged=False),
    _m("fsdp.ckpt_round_trip", "", "the reference job's plan saved and resumed a checkpoint "
       "(false where the level skips it: the GPU quick level)", "equal", judged=False),
    _m("kernel.module_sysfs", "", "the kernel's sysfs holds /sys/module/<m> of a module "
       "/proc/modules lists (labelled module=...)", "equal", judged=False),
    _m("workload.device", "", "the device the check's workload ran on (cuda, or cpu where "
       "the site runs the workloads on CPU: the lab)", "equal", judged=False),
    _m("transceiver.optical", "", "the port's module is an optical transceiver (mlxlink "
       "cable type; a copper cable has no laser, no rx power and no temperature)", "equal",
       judged=False),
    _m("bmc.voltage.sensors", "", "voltage sensors the BMC lists with a critical threshold",
       "equal", judged=False),
]

# counters read at the start and the end of a run; the difference is judged
HEALTH_COUNTERS: dict[str, str] = {
    "ecc_uncorrected": "uncorrectable ECC errors",
    "ecc_corrected": "correctable ECC errors",
    "remapped_rows": "remapped rows (correctable + uncorrectable)",
    "xid_hardware": "XID events whose catalog class fails a node",
    "pcie_replay": "PCIe replay counter",
    "nvlink_replay": "NVLink replay errors",
    "nvlink_recovery": "NVLink recovery errors",
    "nvlink_crc": "NVLink CRC errors",
    "ib_errors": "IB port error counters (symbol, link downed, rcv errors ...)",
    # fabric/PCIe health
    "aer_correctable": "PCIe AER correctable errors (TOTAL_ERR_COR)",
    "aer_nonfatal": "PCIe AER uncorrectable non-fatal errors (TOTAL_ERR_NONFATAL)",
    "aer_fatal": "PCIe AER uncorrectable fatal errors (TOTAL_ERR_FATAL)",
    "ib_link_downed": "IB/RoCE port link_downed (the link went down: a flap)",
    "ib_link_recovery": "IB/RoCE port link_error_recovery (the link retrained)",
}
# host health: NVSwitch SXids, NVMe SMART, DIMMs, EDAC and machine checks
HEALTH_COUNTERS.update({
    "sxid": "NVSwitch SXid events (fatal and non-fatal)",
    "edac_uncorrected": "uncorrected host memory errors (EDAC)",
    "mce_uncorrected": "uncorrected machine checks",
})
for _key, _what in HEALTH_COUNTERS.items():
    _CORE.append(
        _m(f"health.delta.{_key}", "", f"increase during the run: {_what}", "lower",
           judged=_key != "ecc_corrected")
    )


def _load() -> dict[str, Metric]:
    found = {m.name: m for m in _CORE}
    for metric in WORKLOAD_METRICS:
        if metric.name in found and found[metric.name] != metric:
            raise ValueError(f"metric {metric.name} registered twice with different definitions")
        found[metric.name] = metric
    return found


METRICS: dict[str, Metric] = _load()


def get(name: str) -> Metric:
    try:
        return METRICS[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}") from None
