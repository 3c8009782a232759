"""A site's calibrated limits (invoke calibrate writes them) merged over a profile's."""

from __future__ import annotations

from typing import Any

from validation.model import Threshold
from validation.profile.errors import ProfileError
from validation.profile.model import Profile, threshold_key
from validation.profile.thresholds import check_threshold


def calibration_thresholds(overlay: Any, profile: Profile) -> tuple[list[Threshold], str]:
    """A site's calibrated limits (invoke calibrate writes them) for this profile.

    Each replaces the profile's limit of the same metric and labels, never looser than
    that limit's gross-fault line (a calibration cannot absorb a gross fault); the overlay
    must be for this very profile. Returns the limits and where they came from."""
    where = "calibration overlay"
    if not isinstance(overlay, dict) or not isinstance(overlay.get("thresholds"), list):
        raise ProfileError(f"{where}: must be a mapping with a thresholds list")
    if overlay.get("profile") != profile.name.removesuffix("-lab") and \
            overlay.get("profile") != profile.name:
        raise ProfileError(f"{where}: is for profile {overlay.get('profile')!r}, "
                           f"not {profile.name!r}")
    base = {threshold_key(t): t for t in profile.thresholds}
    out = []
    for raw in overlay["thresholds"]:
        t = check_threshold({**raw, "tier": "calibrated"} if isinstance(raw, dict) else raw,
                            where)
        floor = base.get(threshold_key(t))
        if floor is None:
            raise ProfileError(f"{where}: {t.metric} {t.labels or ''} has no limit in "
                               f"{profile.name} to calibrate")
        line = floor.gross if floor.gross is not None else floor.value
        if t.op != floor.op or not isinstance(line, (int, float)) or (
                t.op == ">=" and t.value < line) or (t.op == "<=" and t.value > line):
            raise ProfileError(f"{where}: {t.metric} {t.op} {t.value} is looser than the "
                               f"profile's gross-fault line {floor.op} {line}")
        out.append(t)
    return out, str(overlay.get("source") or where)

