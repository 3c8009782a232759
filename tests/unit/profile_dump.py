"""Every listable profile, fully resolved, as canonical JSON (the profiles' golden).

The dump holds every field of the loaded Profile (requires, fabric, nvls, simulated,
inventory, each threshold's to_dict() in its order), and the same profile as a node on
an InfiniBand site, on a RoCE site and on a 2-GPU slice sees it, so a change to how
profiles are written can be proved not to change what the judge is given. A value's
type is kept (580 and "580", 1 and 1.0 differ), and so is the order of every list and of
a threshold's labels. The inventory's keys are compared as a set: every reader takes them
by name (validation.profile.inventory_thresholds in its own fixed order, the checks, the
controller's profile hash with sorted keys), and a base's keys come before an overlay's.

    PYTHONPATH=$PWD python tests/unit/profile_dump.py   # rewrites GOLDEN
"""

from __future__ import annotations

import json
import lzma
from pathlib import Path
from typing import Any

from validation.profile import Profile, list_profiles, load_profile, scope, with_site

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "profiles" / "resolved.json.xz"
SITES = {
    "ib": {"fabric": "ib", "nvidia_driver_branch": "580", "cuda_toolkit_version": "13.0",
           "nccl_version": "2.28.9-1", "validation_tools_nccl_tests_version": "2.19.6",
           "nvidia_driver_ecc_enabled": True, "nvidia_driver_mig_enabled": False,
           "nvidia_driver_persistence_enabled": True},
    "roce": {"fabric": "roce", "rdma_network_roce_mtu": 4200, "rdma_network_roce_priority": 3,
             "rdma_network_roce_trust": "dscp", "rdma_network_roce_dscp": 26,
             "rdma_network_roce_ecn": True, "rdma_network_mlxconfig": {}},
}


def canon(v: Any, ordered: bool = True) -> Any:
    """v with its types spelled out where JSON would blur them (and, ordered, the order
    of every mapping's keys)."""
    if isinstance(v, dict):
        keys = [f"{type(k).__name__}:{k}" for k in v]
        body = {n: canon(x, ordered) for n, x in zip(keys, v.values(), strict=True)}
        return {"(order)": keys, **body} if ordered else body
    if isinstance(v, (list, tuple, frozenset, set)):
        items = [canon(x, ordered) for x in v]
        return sorted(items, key=json.dumps) if isinstance(v, (set, frozenset)) else items
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        return {type(v).__name__: v}
    raise TypeError(f"cannot dump {type(v).__name__}")


def fields(p: Profile) -> dict[str, Any]:
    return {"name": p.name, "description": p.description, "simulated": p.simulated,
            "requires": canon(p.requires), "fabric": p.fabric, "nvls": p.nvls,
            "inventory": canon(p.inventory, ordered=False), "scope": canon(p.scope),
            "provisional_strict": p.provisional_strict, "calibration": p.calibration,
            "thresholds": [canon(t.to_dict()) for t in p.thresholds]}


def resolved() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in list_profiles():
        p = load_profile(name)
        out[name] = {"profile": fields(p),
                     **{f"site_{k}": [canon(t.to_dict()) for t in with_site(p, s).thresholds]
                        for k, s in SITES.items()},
                     "gpus_2": fields(scope(p, gpus=2))}
    return out


def dump() -> str:
    return json.dumps(resolved(), indent=0, sort_keys=True) + "\n"


def golden() -> dict[str, Any]:
    return json.loads(lzma.decompress(GOLDEN.read_bytes()))


if __name__ == "__main__":
    GOLDEN.write_bytes(lzma.compress(dump().encode(), preset=9 | lzma.PRESET_EXTREME))
