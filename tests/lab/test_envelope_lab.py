"""The power and thermal envelope on the lab: `invoke validate` samples each node's BMC while
its burn-in runs; the lab BMC's readings follow the node's real load (its processes' CPU
time), so the draw rises under the burn-in; a fan that stalls and a PSU that drops out only
under load fail the node naming the part.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rackready_lab import lab
from tests.lab.test_bmc_lab import _invoke

pytestmark = pytest.mark.lab

ENVELOPE = ("bmc.envelope.samples", "bmc.power.one_lost_load_ratio", "bmc.inlet.peak_c",
            "bmc.fan.health_under_load", "bmc.psu.health_under_load")


def _validate(tmp_path, node: str, name: str, formats: str = "json") -> dict:
    """The quick burn-in alone (8 s of CPU GEMM on a lab node) with the BMC sampled beside
    it; a narrowed run is PARTIAL (exit 1) even when everything passed."""
    out = tmp_path / name
    done = _invoke("validate", "--node", node, "--inventory", "lab", "--level", "quick",
                   "--only", "gemm_burnin", "--out", str(out), "--report-formats", formats)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads((out / node / "judgement.json").read_text())


def _envelope_verdicts(j: dict, outcome: str) -> list[dict]:
    return [v for v in j["verdicts"] if v["metric"] in ENVELOPE and v["outcome"] == outcome]


def test_the_draw_follows_the_burn_in_and_a_healthy_envelope_passes(provisioned_lab, tmp_path):
    node = "lab-gpu01"
    lab.heal(node)
    j = _validate(tmp_path, node, "healthy", formats="json,html")
    assert _envelope_verdicts(j, "fail") == []
    assert {v["metric"] for v in _envelope_verdicts(j, "pass")} == set(ENVELOPE)
    env = j["bmc"]["envelope"]
    power = [p for p in env["power_w"] if p is not None]
    assert env["count"] >= 5 and len(power) == len(env["t_s"])
    # the burn-in keeps the node's CPU busy: its chassis draw rises well above idle
    assert max(power) > min(power) * 1.3, power
    assert env["one_lost_capacity_w"] > max(power)
    html = (tmp_path / "healthy" / "report" / f"node-{node}.html").read_text()
    assert "Power and thermal envelope" in html


@pytest.mark.parametrize("node,kind,metric,words", [
    ("lab-gpu01", "fan-fails-under-load", "bmc.fan.health_under_load", ("Fan",)),
    ("lab-gpu02", "psu-fails-under-load", "bmc.psu.health_under_load", ("serial",)),
])
def test_a_part_that_fails_only_under_load_fails_the_node_naming_it(provisioned_lab, tmp_path,
                                                                   node, kind, metric, words):
    lab.fault(node, kind)
    try:
        j = _validate(tmp_path, node, kind)
    finally:
        lab.heal(node)
    assert j["outcome"] == "FAIL"
    bad = [v for v in _envelope_verdicts(j, "fail") if v["metric"] == metric]
    assert bad and all(w in bad[0]["message"] for w in words), _envelope_verdicts(j, "fail")


def test_a_bmc_answering_nan_fails_its_node_and_every_node_is_reported(provisioned_lab,
                                                                      tmp_path):
    """One run of the whole lab (10 s: gpu.inventory alone) with lab-gpu01's BMC answering
    NaN for its draw: that node fails naming the reading; every node has its report (the
    run ended before, on 'Out of range float', with none)."""
    from rackready_lab.redfish import bmc

    node = "lab-gpu01"
    spec = provisioned_lab.spec(node)
    old = bmc.pid_of(spec)
    bmc.stop(spec)  # a BMC started before bmc-nan-reading existed renders without it
    deadline = time.monotonic() + 10
    while old and Path(f"/proc/{old}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    bmc.start(spec)  # its state (BIOS, logs) is kept
    lab.fault(node, "bmc-nan-reading")
    out = tmp_path / "nan"
    try:
        done = _invoke("validate", "--inventory", "lab", "--level", "quick", "--only",
                       "gpu.inventory", "--out", str(out), "--report-formats", "json")
    finally:
        lab.heal(node)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    names = [n["name"] for n in json.loads((out / "run.json").read_text())["nodes"]]
    assert node in names and len(names) >= 2
    assert {p.name for p in (out / "report").glob("node-*.json")} == {
        f"node-{n}.json" for n in names}
    for name in names:
        j = json.loads((out / name / "judgement.json").read_text())
        refused = [v for v in j["verdicts"] if v["metric"] == "bmc.envelope.refused_readings"]
        if name == node:
            assert j["outcome"] == "FAIL" and refused[0]["outcome"] == "fail"
            assert "PowerConsumedWatts" in refused[0]["message"] and "NaN" in \
                refused[0]["message"]
        else:
            assert refused and refused[0]["outcome"] == "pass", (name, refused)
