"""The operator's loop on the lab: `invoke validate` over SSH into provisioned nodes.

One healthy node and one with an injected fault, validated in parallel; the
reports come out in every format and say SIMULATED; host keys are verified.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rackready.errors import UserError
from rackready.remote import bundle, ssh
from rackready.site import inventory
from rackready.steps.validate import run_validation
from rackready_lab import lab

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def validated(provisioned_lab, tmp_path_factory):
    """Validate the whole lab inventory once, with a GPU fault on lab-gpu02."""
    hit = lab.fault("lab-gpu02", "ecc-uncorrectable")
    run_dir = tmp_path_factory.mktemp("runs") / "lab-run"
    try:
        code = run_validation(node=None, inventory="lab", level="quick", out=str(run_dir))
    finally:
        lab.heal("lab-gpu02")
    return code, run_dir, hit


def _result(run_dir: Path, node: str) -> dict:
    """The controller's judgement of the node (its own result.json is advisory)."""
    return json.loads((run_dir / node / "judgement.json").read_text())


def test_validate_exits_1_when_a_node_fails(validated):
    code, _, _ = validated
    assert code == 1


def test_healthy_node_passes_every_verdict(validated):
    _, run_dir, _ = validated
    result = _result(run_dir, "lab-gpu01")
    failed = [f"{v['check']}: {v['message']}" for v in result["verdicts"]
              if v["outcome"] == "fail"]
    assert failed == []
    assert result["outcome"] == "PASS" and result["scope"]["missing_checks"] == []
    assert result["node_claimed_outcome"] == "PASS"
    assert json.loads((run_dir / "lab-gpu01" / "result.json").read_text())["simulated"] is True


def test_faulty_node_fails_naming_the_gpu(validated):
    _, run_dir, hit = validated
    result = _result(run_dir, "lab-gpu02")
    assert result["outcome"] == "FAIL"
    failed = [v for v in result["verdicts"] if v["outcome"] == "fail"]
    assert failed
    serial = hit.split("serial ")[1].split(":")[0]
    assert any(serial in (v["message"] + v["remediation"]) for v in failed), failed


def test_events_streamed_and_bundle_hash_recorded(validated):
    _, run_dir, _ = validated
    _, digest = bundle.build()
    for node in ("lab-gpu01", "lab-gpu02"):
        lines = (run_dir / node / "events.jsonl").read_text().splitlines()
        kinds = [json.loads(line)["event"] for line in lines]
        assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
        assert "check_finished" in kinds
        # the node records the bundle it ran; the controller checks it against the plan
        node_result = json.loads((run_dir / node / "result.json").read_text())
        assert node_result["bundle_sha256"] == digest
        assert json.loads((run_dir / "run.json").read_text())["bundle_sha256"] == digest


def test_reports_in_every_format_say_simulated(validated):
    _, run_dir, _ = validated
    report = run_dir / "report"
    for name in ("rack.json", "rack.html", "rack.pdf", "junit.xml",
                 "node-lab-gpu01.html", "node-lab-gpu02.pdf"):
        assert (report / name).exists(), name
    assert "SIMULATED" in (report / "rack.html").read_text()
    junit = (report / "junit.xml").read_text()
    assert "<failure" in junit


def test_unknown_host_key_is_refused(provisioned_lab, tmp_path):
    node = inventory.find("lab-gpu01", "lab")
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(UserError, match="not in known_hosts"):
        ssh.connect(_with_known_hosts(node, empty))


def test_changed_host_key_is_refused(provisioned_lab, tmp_path):
    node = inventory.find("lab-gpu01", "lab")
    other = provisioned_lab.spec("lab-gpu02").root / "etc/ssh/ssh_host_ed25519_key.pub"
    algo, blob = other.read_text().split()[:2]
    forged = tmp_path / "known_hosts"
    forged.write_text(f"{node.address} {algo} {blob}\n")
    with pytest.raises(UserError, match="CHANGED"):
        ssh.connect(_with_known_hosts(node, forged))


def _with_known_hosts(node: inventory.Node, path: Path) -> inventory.Node:
    from dataclasses import replace

    return replace(node, known_hosts=str(path))


def test_a_narrowed_run_is_partial_in_every_format(provisioned_lab, tmp_path):
    run_dir = tmp_path / "partial"
    code = run_validation(node="lab-gpu01", inventory="lab", level="quick", out=str(run_dir),
                          formats="json,html,junit", only="kernel.cmdline,gpu.inventory")
    assert code == 1  # never an acceptance, however well it went
    rack = json.loads((run_dir / "report" / "rack.json").read_text())
    assert rack["outcome"] == "PARTIAL" and rack["partial"] is True
    node = json.loads((run_dir / "report" / "node-lab-gpu01.json").read_text())
    assert node["outcome"] == "PARTIAL" and node["scope"]["only"] == ["kernel.cmdline",
                                                                       "gpu.inventory"]
    assert "PARTIAL" in (run_dir / "report" / "node-lab-gpu01.html").read_text()
    assert 'type="partial"' in (run_dir / "report" / "junit.xml").read_text()


def test_field_tools_results_reach_the_node_report(provisioned_lab, tmp_path):
    """nccl-tests, `dcgmi diag` and perftest's GPUDirect bandwidth, run by the suite on a
    provisioned lab node (hwsim stand-ins, real parsers), judged and reported."""
    run_dir = tmp_path / "field"
    run_validation(node="lab-gpu01", inventory="lab", level="standard", out=str(run_dir),
                   formats="json", only="nccl_tests,dcgm.diag,rdma.gpudirect_bw")
    judged = json.loads((run_dir / "lab-gpu01" / "judgement.json").read_text())
    assert judged["outcome"] == "PARTIAL", judged["outcome_reason"]  # narrowed, all passed
    passed = {v["metric"] for v in judged["verdicts"] if v["outcome"] == "pass"}
    assert {"dcgm.diag_result", "rdma.gpudirect_bw_gbps", "nccl_tests.version"} <= passed
    report = json.loads((run_dir / "report" / "node-lab-gpu01.json").read_text())
    measured = {m["name"] for m in report["measurements"]}
    assert {"dcgm.diag_result", "rdma.gpudirect_bw_gbps"} <= measured
    assert any(m["check"] == "nccl_tests" for m in report["measurements"])
