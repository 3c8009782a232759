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
