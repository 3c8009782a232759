"""The controller's fleet judge: a node far below its peers fails, others don't."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rackready.fleet import judge_run_dir
from validation.model import CheckResult, Measurement

PROFILES = Path(__file__).resolve().parents[2] / "validation" / "profiles"

PROFILE = """\
description: fleet test profile
extends: xe9680-h200
thresholds:
  - metric: nvlink.link_speed
    op: ">="
    value: 20
    unit: GB/s
    provenance: "test: floor well below every node"
    outlier_k: 4
"""


def _profile(tmp_path: Path) -> Path:
    """A test profile beside copies of the real one it extends."""
    for name in ("xe9680-h200.yml", "_health.yml"):
        shutil.copy(PROFILES / name, tmp_path / name)
    path = tmp_path / "fleet.yml"
    path.write_text(PROFILE)
    return path


def _node(run: Path, name: str, speed: float, profile: Path) -> Path:
    check = CheckResult("nvlink.topology", "ok", 0.1, tuple(
        Measurement("nvlink.link_speed", speed + 0.01 * gpu, "GB/s", {"gpu": str(gpu)})
        for gpu in range(8)
    ))
    path = run / name / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"node": name, "profile": str(profile), "outcome": "PASS",
                                "checks": [check.to_dict()], "verdicts": []}))
    return path


def test_a_node_far_below_its_peers_fails_the_others_pass(tmp_path):
    profile = _profile(tmp_path)
    speeds = {"gpu01": 26.5, "gpu02": 26.4, "gpu03": 26.6, "gpu04": 22.0}
    paths = {n: _node(tmp_path, n, s, profile) for n, s in speeds.items()}
    added = judge_run_dir(tmp_path)
    outcomes = {n: json.loads(p.read_text())["outcome"] for n, p in paths.items()}
    assert outcomes == {"gpu01": "PASS", "gpu02": "PASS", "gpu03": "PASS", "gpu04": "FAIL"}
    [verdict] = added["gpu04"]
    assert verdict["outcome"] == "fail" and verdict["labels"]["node"] == "gpu04"


def test_two_nodes_are_not_a_fleet(tmp_path):
    profile = _profile(tmp_path)
    _node(tmp_path, "gpu01", 26.5, profile)
    _node(tmp_path, "gpu02", 10.0, profile)
    assert judge_run_dir(tmp_path) == {}
