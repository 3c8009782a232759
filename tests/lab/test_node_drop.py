"""A node that drops mid-run is INCOMPLETE with what it measured, never PASS.

Runs after the other lab tests: it powers a node off in the middle of a run.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from rackready.steps.validate import run_validation
from rackready_lab import nodes

pytestmark = [pytest.mark.lab, pytest.mark.lab_phase("node-drop")]


def test_node_powered_off_mid_run_is_incomplete_with_its_events(provisioned_lab, tmp_path):
    run_dir = tmp_path / "drop"
    events = run_dir / "lab-gpu01" / "events.jsonl"
    codes = []
    worker = threading.Thread(
        target=lambda: codes.append(run_validation("lab-gpu01", "lab", "quick", str(run_dir),
                                                   formats="json"))
    )
    worker.start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if events.exists() and '"check_finished"' in events.read_text():
            break
        time.sleep(0.2)
    else:
        pytest.fail("no check finished within 300 s")
    nodes.stop(provisioned_lab.spec("lab-gpu01"))  # the node goes away mid-run
    worker.join(timeout=300)
    assert codes == [1]
    kept = [json.loads(line) for line in events.read_text().splitlines()]
    assert any(e["event"] == "check_finished" for e in kept)
    assert not any(e["event"] == "run_finished" and e.get("outcome") == "PASS" for e in kept)
    rack = json.loads((run_dir / "report" / "rack.json").read_text())
    assert rack["outcome"] != "PASS"
    node_doc = json.loads((run_dir / "report" / "node-lab-gpu01.json").read_text())
    assert node_doc["outcome"] == "INCOMPLETE"
