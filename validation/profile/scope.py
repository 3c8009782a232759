"""A profile narrowed to part of a machine (a GPU slice, needs left out)."""

from __future__ import annotations

import itertools
from dataclasses import replace

from validation.profile.errors import ProfileError
from validation.profile.model import Profile


def scope(profile: Profile, gpus: int | None = None, without: tuple[str, ...] = ()) -> Profile:
    """Narrow a profile to a partial machine (a 2-GPU VM slice of an HGX board).

    The narrowing is recorded in profile.scope and the result, so a scoped pass
    can never be mistaken for a full-machine pass.
    """
    # the needs' vocabulary lives with the checks, and a check reads this package: so here
    from validation.checks.registry import NEEDS

    unknown = set(without) - set(NEEDS)
    if unknown:
        raise ProfileError(f"--without: unknown needs {sorted(unknown)}")
    inv = profile.inventory
    thresholds = list(profile.thresholds)
    if gpus is not None:
        if gpus < 1 or gpus > int(inv.get("gpu", {}).get("count", 0)):
            raise ProfileError(f"--gpus {gpus}: profile has {inv.get('gpu', {}).get('count')}")
        inv = {**inv, "gpu": {**inv["gpu"], "count": gpus}}
        pairs = {f"{a}-{b}" for a, b in itertools.combinations(range(gpus), 2)}
        thresholds = [
            replace(t, value=gpus) if t.metric in ("gpu.count", "dcgm.gpu_count")
            else t for t in thresholds
            if t.metric != "nvlink.pair_links" or (t.labels or {}).get("pair") in pairs
        ]
    requires = profile.requires - set(without)
    if gpus is not None and gpus < int(profile.inventory.get("gpu", {}).get("count", 0)):
        requires -= {"bare-metal"}  # a GPU slice is a VM, not the chassis
    if gpus == 1:
        # one GPU has no peer: no collectives and no NVLink to judge (a passed-through GPU
        # lists no links); a full machine keeps both required, so a GPU with none up fails
        requires -= {"multi-gpu", "nvlink"}
    return replace(profile, inventory=inv, thresholds=tuple(thresholds),
                   requires=frozenset(requires),
                   scope={"gpus": gpus, "without": sorted(without)})
