"""XID faults, one per class of NVIDIA's XID catalog (validation/xid_catalog.yml) that
the node may be failed for without losing the GPU: xid-13 (application: one job's faults,
repeated on one GPU), xid-119 (GSP RPC timeout: reset the GPU), xid-61 (PMU breakpoint:
the catalog's CONTACT_SUPPORT, RMA), xid-54 (auxiliary power not connected: check the
mechanicals, the part named). xid-79 (reboot the node) lives in faults.py: the GPU is lost.

Each adds kernel log lines in the driver's format (sysroot_render._kern_log), with the
process the driver blames where the real line names one.
"""

from __future__ import annotations

from typing import Any

from .fault_base import FaultFn, gpu_component, target_gpu


def _add(state: dict[str, Any], target: str | None, xid: int, lines: list[dict[str, Any]],
         what: str) -> dict[str, Any]:
    g = target_gpu(state, target)
    g["xids"].extend({"xid": xid, **ln} for ln in lines)
    return {"component": gpu_component(g),
            "description": f"GPU {g['index']} serial {g['serial']}: XID {xid}, {what}"}


def _xid_13(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    # two processes' faults, each logged as an SM warp line and an ESR line: two events,
    # one more than the profile's per-GPU limit for application-class XIDs
    lines = []
    for pid in (4242, 4317):
        lines += [{"pid": str(pid), "name": "python",
                   "text": "Graphics SM Warp Exception on (GPC 7, TPC 1, SM 0): "
                           "Out Of Range Address"},
                  {"pid": str(pid), "name": "python",
                   "text": "Graphics Exception: ESR 0x53ce48=0x102000e 0x53ce50=0x20 "
                           "0x53ce44=0xd3eff2 0x53ce4c=0x17f"}]
    return _add(state, target, 13, lines, "graphics engine exception, twice (two jobs)")


def _xid_119(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    return _add(state, target, 119, [{
        "pid": "2024380", "name": "nvidia-smi",
        "text": "Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected "
                "function 103 (GSP_RM_ALLOC) (0x2081 0x4)."}], "GSP RPC timeout")


def _xid_61(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    return _add(state, target, 61, [{"text": "Internal micro-controller breakpoint/warning "
                                             "(PMU_BREAKPOINT)"}], "PMU breakpoint")


def _xid_54(state: dict[str, Any], target: str | None) -> dict[str, Any]:
    return _add(state, target, 54, [{"text": "Auxiliary power is not connected to the GPU "
                                             "board"}], "auxiliary power not connected")


XID_FAULTS: dict[str, FaultFn] = {
    "xid-13": _xid_13,
    "xid-119": _xid_119,
    "xid-61": _xid_61,
    "xid-54": _xid_54,
}
