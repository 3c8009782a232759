"""What each simulated platform is made of: GPU models, PCI layout, NVLink wiring.

Numbers for the H200 SXM come from the real capture (captures/); the other
GPU models differ only in the fields listed in GPU_MODELS, taken from NVIDIA's
published product specifications. Bus numbers follow the usual layout of the
chassis (one PCIe switch per GPU/NIC pair, four pairs per CPU socket).
"""

from __future__ import annotations

from typing import Any

NVLINK_GBPS = 26.562  # per-link speed shown by `nvidia-smi nvlink -s` in the capture

GPU_MODELS: dict[str, dict[str, Any]] = {
    # From the capture (nvidia-smi-q-x.xml).
    "h200-sxm": {"name": "NVIDIA H200", "device_id": "2335", "subsys_id": "18BF",
                 "memory_mib": 143771, "power_limit_w": 700.0, "power_min_w": 200.0,
                 "max_sm_mhz": 1980, "vbios": "96.00.A5.00.1A",
                 "board_part": "692-2G520-0282-001", "gpu_part": "2335-895-A1",
                 "inforom": "G520.0282.02.02", "nvlinks": 18, "form": "SXM"},
    "h100-sxm": {"name": "NVIDIA H100 80GB HBM3", "device_id": "2330", "subsys_id": "16C1",
                 "memory_mib": 81559, "power_limit_w": 700.0, "power_min_w": 200.0,
                 "max_sm_mhz": 1980, "vbios": "96.00.99.00.01",
                 "board_part": "692-2G520-0200-000", "gpu_part": "2330-885-A1",
                 "inforom": "G520.0200.00.05", "nvlinks": 18, "form": "SXM"},
    "h200-nvl": {"name": "NVIDIA H200 NVL", "device_id": "233B", "subsys_id": "1996",
                 "memory_mib": 143771, "power_limit_w": 600.0, "power_min_w": 200.0,
                 "max_sm_mhz": 1785, "vbios": "96.00.AF.00.01",
                 "board_part": "699-2G530-0200-000", "gpu_part": "233B-885-A1",
                 "inforom": "G530.0200.00.01", "nvlinks": 18, "form": "PCIe"},
    "h100-nvl": {"name": "NVIDIA H100 NVL", "device_id": "2321", "subsys_id": "1839",
                 "memory_mib": 95830, "power_limit_w": 400.0, "power_min_w": 200.0,
                 "max_sm_mhz": 1785, "vbios": "96.00.61.00.01",
                 "board_part": "699-2G530-0200-000", "gpu_part": "2321-885-A1",
                 "inforom": "G530.0200.00.01", "nvlinks": 12, "form": "PCIe"},
}

NVME_MODELS: dict[str, dict[str, Any]] = {
    "dell-cm7": {"model": "Dell Ent NVMe CM7 E3.S RI 7.68TB", "vendor": "1e0f",
                 "device": "0013", "fw": "2.1.0", "bytes": 7681501126656, "serial_prefix": "Y3K0A"},
    "pm1743": {"model": "SAMSUNG MZWLO7T6HBLA-00A07", "vendor": "144d", "device": "a80c",
               "fw": "GDC7502Q", "bytes": 7681501126656, "serial_prefix": "S7J1NA0W"},
    "boss-n1": {"model": "Dell BOSS-N1", "vendor": "1b4b", "device": "2241", "fw": "2.1.13.2025",
                "bytes": 960197124096, "serial_prefix": "3FA0"},
    "ns204i": {"model": "HPE NS204i-u Gen11 Boot Controller", "vendor": "1b4b",
               "device": "2241", "fw": "1.2.14.1019", "bytes": 480103981056,
               "serial_prefix": "PXTRV0"},
}

SXM_BUSES = [0x19, 0x3B, 0x4C, 0x5D, 0x9B, 0xBB, 0xCB, 0xDB]
NVL_BUSES = [0x0E, 0x13, 0x18, 0x1D, 0x8E, 0x93, 0x98, 0x9D]

PLATFORMS: dict[str, dict[str, Any]] = {
    "xe9680-h200": {"vendor": "Dell Inc.", "product": "PowerEdge XE9680", "gpu": "h200-sxm",
                    "gpu_buses": SXM_BUSES, "nvswitches": 4, "nvlink_groups": [list(range(8))],
                    "storage_nics": 2, "data_nvme": "dell-cm7", "os_nvme": "boss-n1",
                    "cpus_per_socket": 56, "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
                    "compute_nics": 8},
    "xe9680-h100": {"vendor": "Dell Inc.", "product": "PowerEdge XE9680", "gpu": "h100-sxm",
                    "gpu_buses": SXM_BUSES, "nvswitches": 4, "nvlink_groups": [list(range(8))],
                    "storage_nics": 2, "data_nvme": "dell-cm7", "os_nvme": "boss-n1",
                    "cpus_per_socket": 56, "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
                    "compute_nics": 8},
    "dl380a-gen12-h200nvl": {"vendor": "HPE", "product": "ProLiant DL380a Gen12",
                             "gpu": "h200-nvl", "gpu_buses": NVL_BUSES, "nvswitches": 0,
                             "nvlink_groups": [[0, 1, 2, 3], [4, 5, 6, 7]], "storage_nics": 0,
                             "data_nvme": "pm1743", "os_nvme": "ns204i", "cpus_per_socket": 64,
                             "cpu_model": "Intel(R) Xeon(R) 6767P", "compute_nics": 4},
    "dl380a-gen11-h100nvl": {"vendor": "HPE", "product": "ProLiant DL380a Gen11",
                             "gpu": "h100-nvl", "gpu_buses": NVL_BUSES, "nvswitches": 0,
                             "nvlink_groups": [[0, 1], [2, 3], [4, 5], [6, 7]],
                             "storage_nics": 0, "data_nvme": "pm1743", "os_nvme": "ns204i",
                             "cpus_per_socket": 56,
                             "cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "compute_nics": 4},
}

GPUS_PER_NODE = 8
GPUS_PER_SOCKET = 4


def nvlink_peers(platform: dict[str, Any], index: int, links: int) -> list[str]:
    """Remote end of each NVLink of one GPU: "nvswitch:N" or "gpu:N".

    HGX: links are spread over the 4 NVSwitches (5/4/4/5 as on the baseboard).
    NVL bridges: links split evenly among the GPUs of the bridge group.
    """
    if platform["nvswitches"]:
        split = [5, 4, 4, 5]
        return [f"nvswitch:{sw}" for sw, n in enumerate(split) for _ in range(n)][:links]
    group = next(g for g in platform["nvlink_groups"] if index in g)
    others = [g for g in group if g != index]
    per_peer = links // len(others)
    return [f"gpu:{p}" for p in others for _ in range(per_peer)]
