"""Limits that follow the variables that provisioned the node: driver and library pins,
GPU modes, the fabric, RoCE QoS and MTU, the ConnectX firmware settings; and with_site,
the profile as a node of that site sees it."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from validation.model import Threshold
from validation.profile.calibration import calibration_thresholds
from validation.profile.errors import ProfileError
from validation.profile.model import Profile, limit, threshold_key
from validation.workloads.common_env import nccl_ib_tc

# Largest IB MTU a RoCE port runs over an Ethernet MTU: Linux include/rdma/ib_addr.h
# iboe_get_mtu() subtracts 96 bytes of headers (GRH, UDP, BTH, XRC, AtomicETH, ICRC).
ROCE_HEADER_BYTES = 96
IB_MTUS = (4096, 2048, 1024, 512, 256)
# An InfiniBand port's MTU is the subnet manager's (no role sets it): 4096 on ConnectX/NDR.
IB_FABRIC_MTU = 4096


def roce_active_mtu(eth_mtu: int) -> int:
    """The RDMA active_mtu ibv_devinfo shows for a RoCE port on a netdev of this MTU."""
    room = int(eth_mtu) - ROCE_HEADER_BYTES
    return next((m for m in IB_MTUS if m <= room), 256)


def _provisioned(site: dict[str, Any], name: str) -> Any:
    """A role variable the controller derived from the inventory (inventory.PROVISIONED_VARS)."""
    if name not in site:
        raise ProfileError(f"site file lacks {name} (the controller derives it from the "
                           "inventory's role variables)")
    return site[name]


def _truthy(v: Any) -> bool:
    """A role variable's boolean as Ansible reads it (true, "yes", 1, ...)."""
    return v is True or str(v).strip().lower() in ("true", "yes", "on", "1")


def mlxconfig_wanted(site: dict[str, Any]) -> dict[str, int | str]:
    """The firmware settings the rdma_network role sets on the compute ConnectX ports, as
    its tasks/main.yml builds them: LINK_TYPE_P1 IB(1) or ETH(2) from the fabric, then the
    site's rdma_network_mlxconfig (name -> numeric value) over it."""
    extra = site.get("rdma_network_mlxconfig") or {}
    if not isinstance(extra, dict):
        raise ProfileError("site rdma_network_mlxconfig must be a mapping of mlxconfig "
                           "names to values")
    wanted: dict[str, int | str] = {"LINK_TYPE_P1": 1 if site.get("fabric") == "ib" else 2}
    for k, v in extra.items():
        text = str(v).strip()
        wanted[str(k)] = int(text) if re.fullmatch(r"-?\d+", text) else text
    return wanted


def site_thresholds(site: dict[str, Any], profile: Profile) -> list[Threshold]:
    """Limits that follow the variables that provisioned the node (fabric, RoCE QoS and
    MTU, pinned versions), under the roles' own names; none are restated here."""
    out: list[Threshold] = []
    src = "inventory variable {} (the value that provisioned this node)"
    if "nvidia_driver_branch" in site:
        branch = str(site["nvidia_driver_branch"])
        out.append(limit("gpu.driver_version", "~", rf"^{re.escape(branch)}\.",
                      src.format("nvidia_driver_branch")))
    # GPU modes as the driver role set them (ECC, MIG, persistence)
    for var, metric, on, off in (
            ("nvidia_driver_ecc_enabled", "gpu.ecc_mode", "Enabled", "Disabled"),
            ("nvidia_driver_mig_enabled", "gpu.mig_mode", "Enabled", "Disabled"),
            ("nvidia_driver_persistence_enabled", "gpu.persistence_mode", "Enabled",
             "Disabled")):
        if var in site:
            out.append(limit(metric, "==", on if _truthy(site[var]) else off, src.format(var)))
    if "cuda_toolkit_version" in site:
        out.append(limit("gpu.cuda_version", "==", str(site["cuda_toolkit_version"]),
                      src.format("cuda_toolkit_version")))
    if "nccl_version" in site:
        upstream = str(site["nccl_version"]).split("-")[0]  # 2.28.9-1 -> 2.28.9
        # the role installed the system libnccl at this pin too: judged where provisioned
        for metric in ("nccl.version", "nccl.torch_version", "nccl.system_version"):
            out.append(limit(metric, "==", upstream, src.format("nccl_version")))
    if "validation_tools_nccl_tests_version" in site:
        out.append(limit("nccl_tests.version", "==",
                      str(site["validation_tools_nccl_tests_version"]),
                      src.format("validation_tools_nccl_tests_version")))
    if "rdma" not in profile.requires:
        return out
    fabric = site.get("fabric", profile.fabric)
    fsrc = "site fabric (inventory rackready_fabric)" if "fabric" in site else \
        f"profile default fabric {fabric}"
    out.append(limit("ib.link_layer", "==", "InfiniBand" if fabric == "ib" else "Ethernet", fsrc))
    if fabric == "ib":
        out.append(limit("ib.active_mtu", "==", IB_FABRIC_MTU,
                      "InfiniBand subnet manager MTU 4096 (ConnectX-7 max_mtu; no role sets it)"))
        return out
    mtu = int(_provisioned(site, "rdma_network_roce_mtu"))
    prio = str(_provisioned(site, "rdma_network_roce_priority"))
    out += [
        limit("ib.active_mtu", "==", roce_active_mtu(mtu),
           src.format(f"rdma_network_roce_mtu={mtu}") + ", less 96 header bytes "
           "(Linux iboe_get_mtu)"),
        limit("roce.trust", "==", str(_provisioned(site, "rdma_network_roce_trust")),
           src.format("rdma_network_roce_trust")),
        limit("roce.pfc_priority_enabled", "==", True, src.format("rdma_network_roce_priority"),
           {"priority": prio}),
        limit("roce.pfc_other_priorities", "<=", 0, src.format("rdma_network_roce_priority")),
    ]
    # ECN on the lossless priority, both ends of DCQCN (the role writes the sysfs enables)
    ecn = _truthy(_provisioned(site, "rdma_network_roce_ecn"))
    for metric, point in (("roce.ecn_np_enabled", "roce_np"), ("roce.ecn_rp_enabled", "roce_rp")):
        out.append(limit(metric, "==", ecn, src.format("rdma_network_roce_ecn") +
                      f" on rdma_network_roce_priority={prio} (ecn/{point}/enable/{prio})",
                      {"priority": prio}))
    dscp = int(_provisioned(site, "rdma_network_roce_dscp"))
    try:
        nccl_ib_tc(dscp)  # refuses a DSCP out of range here, before any check runs
    except ValueError as e:
        raise ProfileError(str(e)) from None
    if str(site["rdma_network_roce_trust"]) == "dscp":
        out.append(limit("roce.dscp_priority", "==", int(prio),
                      src.format(f"rdma_network_roce_dscp={dscp}") + " mapped to "
                      f"rdma_network_roce_priority={prio} (mlnx_qos --dscp2prio)",
                      {"dscp": str(dscp)}))
    # the firmware settings the role's firmware task sets, in effect (after the reboot)
    _provisioned(site, "rdma_network_mlxconfig")
    for param, value in mlxconfig_wanted(site).items():
        why = ("inventory rackready_fabric (the role sets LINK_TYPE_P1 ETH(2) on RoCE)"
               if param == "LINK_TYPE_P1" and param not in (site["rdma_network_mlxconfig"] or {})
               else src.format(f"rdma_network_mlxconfig.{param}"))
        out.append(limit("nic.mlxconfig", "==", value, why, {"param": param}))
    out.append(limit("nic.mlxconfig_pending", "<=", 0,
                  "the role's firmware settings take effect at a reboot: one still pending "
                  "means the node runs other values than it was provisioned with"))
    return out


def with_site(profile: Profile, site: dict[str, Any]) -> Profile:
    """The profile as this node sees it: the site's fabric and its site-dependent limits."""
    fabric = site.get("fabric", profile.fabric)
    if fabric not in ("ib", "roce"):
        raise ProfileError(f"site fabric must be ib or roce, not {fabric!r}")
    strictness = site.get("provisional_limits", "gross")
    if strictness not in ("gross", "strict"):
        raise ProfileError(f"site provisional_limits must be gross or strict, not {strictness!r}")
    merged = {threshold_key(t): t for t in profile.thresholds}
    calibration = ""
    if site.get("calibration"):
        calibrated, calibration = calibration_thresholds(site["calibration"], profile)
        merged.update((threshold_key(t), t) for t in calibrated)
    for t in site_thresholds(site, profile):
        # the provisioned value wins over a profile's bench-run default
        merged[threshold_key(t)] = t
    return replace(profile, fabric=fabric, thresholds=tuple(merged.values()),
                   provisional_strict=strictness == "strict", calibration=calibration)

