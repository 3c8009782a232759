"""The controller's fleet judge: compare nodes of one run that share a profile.

A node far below its peers fails even above the profile's floor; this needs
the whole rack, so it runs on the controller after every node has reported.
Verdicts are added to each result.json as "fleet_verdicts".
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from rackready.errors import UserError
from validation.judge import judge_fleet
from validation.model import CheckResult
from validation.profile import ProfileError, load_profile


def judge_run_dir(run_dir: Path) -> dict[str, list[dict]]:
    """Judge every complete node of the run against its profile's peers."""
    groups: dict[str, dict[str, Path]] = defaultdict(dict)
    for path in sorted(Path(run_dir).glob("*/result.json")):
        result = json.loads(path.read_text())
        if result.get("outcome") in ("PASS", "FAIL"):
            groups[result["profile"]][result.get("node") or path.parent.name] = path
    added: dict[str, list[dict]] = {}
    for profile_name, paths in groups.items():
        if len(paths) < 3:
            continue  # robust deviations need at least three peers
        try:
            profile = load_profile(profile_name)
        except ProfileError as exc:
            raise UserError(f"fleet judge: {exc}") from None
        results = {
            node: [CheckResult.from_dict(c) for c in json.loads(p.read_text())["checks"]]
            for node, p in paths.items()
        }
        for node, verdicts in judge_fleet(results, profile).items():
            fleet = [v.to_dict() for v in verdicts if v.check == "fleet"]
            added[node] = fleet
            _record(paths[node], fleet)
    return added


def _record(path: Path, fleet: list[dict]) -> None:
    result = json.loads(path.read_text())
    result["fleet_verdicts"] = fleet
    if any(v["outcome"] == "fail" for v in fleet):
        result["outcome"] = "FAIL"
    path.write_text(json.dumps(result, indent=2) + "\n")
