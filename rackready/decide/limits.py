"""The limits record of a node judgement: how many verdicts rest on each tier of limit,
how many read below expected, the site's choices (carried into every report)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rackready.decide.records import Judgement, Limits


def limits_record(j: Judgement) -> Limits:
    """How many of the node's judged verdicts rest on each tier of limit, how many read
    below expected, and the site's choices: carried into every report as decided here."""
    # the site's choices as judge_node recorded them (a record made elsewhere may lack them)
    given: object = j.get("limits")
    previous: Mapping[str, Any] = given if isinstance(given, dict) else {}
    tiers = {"spec": 0, "measured": 0, "provisional": 0, "calibrated": 0}
    below = 0
    for v in j["verdicts"] + j["fleet_verdicts"] + j.get("rack_verdicts", []):
        t: object = v.get("threshold")  # a judgement read back may hold anything here
        if v["outcome"] not in ("pass", "fail", "below_expected") or not isinstance(t, dict):
            continue
        tier = str(t.get("tier") or "spec")
        tiers[tier if tier in tiers else "spec"] += 1
        below += v["outcome"] == "below_expected"
    return {"judged": sum(tiers.values()), "spec": tiers["spec"], "measured": tiers["measured"],
            "provisional": tiers["provisional"], "calibrated": tiers["calibrated"],
            "below_expected": below,
            "provisional_limits": previous.get("provisional_limits", "gross"),
            "calibration": previous.get("calibration", "")}
