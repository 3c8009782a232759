"""Environment every workload process gets (importable without torch)."""

from __future__ import annotations


def nvls_env(enabled: bool) -> dict[str, str]:
    """NVLink SHARP / multicast (NVLS) on or off, stated explicitly either way.

    The setting is the profile's (on for NVSwitch platforms, where customers train with
    it) unless the site file says `nccl_nvls_enable` (the lab and shared test hosts,
    whose operators forbid NVLink multicast). An inherited variable never decides.
    """
    on = "1" if enabled else "0"
    return {
        "NCCL_NVLS_ENABLE": on,
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "0" if enabled else "1",
        "NVSHMEM_DISABLE_NVLS": "0" if enabled else "1",
    }


def nvls_enabled(profile_nvls: bool, site: dict) -> bool:
    """The one decision: the site's nccl_nvls_enable where given, else the profile's."""
    value = site.get("nccl_nvls_enable")
    return bool(profile_nvls) if value is None else bool(value)


def nccl_ib_tc(dscp: int) -> int:
    """The IP traffic class NCCL_IB_TC sets for a DSCP: the DSCP in the upper six bits of
    the TOS byte, the two ECN bits (RFC 3168) left at 0 for the NIC to mark."""
    if not 0 <= int(dscp) <= 63:
        raise ValueError(f"rdma_network_roce_dscp must be 0..63, not {dscp}")
    return int(dscp) << 2


def roce_env(site: dict) -> dict[str, str]:
    """NCCL's RoCE settings from the role values the controller put in the site file:
    NCCL_IB_TC (rdma_network_roce_dscp << 2, the class the ports map to the lossless
    priority) and NCCL_IB_GID_INDEX (rdma_network_roce_gid_index, RoCE v2 on IPv4).
    Nothing on InfiniBand, or for a value the site does not carry (a bare run): NCCL's
    own defaults then stand, and the run's record shows none was set."""
    if site.get("fabric") != "roce":
        return {}
    out = {}
    if site.get("rdma_network_roce_dscp") is not None:
        out["NCCL_IB_TC"] = str(nccl_ib_tc(int(site["rdma_network_roce_dscp"])))
    if site.get("rdma_network_roce_gid_index") is not None:
        out["NCCL_IB_GID_INDEX"] = str(int(site["rdma_network_roce_gid_index"]))
    return out
