"""One GPU serial or UUID in another spelling is the same identifier (rackready.decide
.identifiers.id_key, used by every comparison in rackready.decide.integrity), and the
failing part is named by the serial the node measured (rackready.decide.outcome
.component_words), with the inventory's where that differs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fault_expectations import HARDWARE_CHECKS

from rackready.decide.identifiers import id_key
from rackready.decide.integrity import identity_findings, rack_identity_findings
from rackready.decide.judge import judge_run
from rackready.decide.outcome import component_words
from rackready.run.rundir import Plan, PlannedNode, RunDir

SERIAL = "1654123456781"
UUID = "GPU-5f2c1a9e-3b7d-4c1e-9a0b-1c2d3e4f5a6b"
# a zero-width space, full-width digits, a leading zero, padding, a BOM (case: the UUIDs)
SPELLINGS = [SERIAL, "1654\u200b123456781", "１６５４１２３４５６７８１", f"0{SERIAL}",
             f" {SERIAL}\t", f"\ufeff{SERIAL}"]


def test_every_spelling_of_a_serial_or_uuid_is_one_key():
    assert {id_key(s) for s in SPELLINGS} == {SERIAL}
    uuids = [UUID, UUID.lower(), UUID.upper(), UUID.replace("-", "\u2060-", 2),
             "gpu-" + UUID[4:].replace("-", ""), "ＧＰＵ－" + UUID[4:]]
    assert len({id_key(u) for u in uuids}) == 1, {id_key(u) for u in uuids}
    # an alphanumeric serial keeps its leading zero; different serials stay different
    assert id_key("0ABC12") != id_key("ABC12")
    assert id_key(SERIAL) != id_key("1654123456782")


def _ids(serial: str, uuid: str) -> dict[str, dict[str, str]]:
    return {"0": {"serial": serial, "uuid": uuid}, "1": {"serial": f"{len(uuid)}00"}}


def test_a_serial_or_uuid_on_two_nodes_in_any_spelling_is_found_on_both():
    for spelled in SPELLINGS[1:]:
        found = rack_identity_findings({"gpu01": _ids(SERIAL, UUID),
                                        "gpu02": _ids(spelled, "GPU-other")})
        assert sorted(found) == ["gpu01", "gpu02"], spelled
        (mine,) = found["gpu01"]
        assert mine["kind"] == "identity" and "also reported by gpu02" in mine["problem"]
        assert ascii(spelled) in mine["problem"] or spelled.strip() in mine["problem"]
    found = rack_identity_findings({"gpu01": _ids("1654999999999", UUID.lower()),
                                    "gpu02": _ids("1654888888888", "\u200b" + UUID)})
    assert [f["problem"].split(" is ")[0] for f in found["gpu01"]] == [f"GPU uuid {UUID.lower()}"]


def test_one_node_reporting_a_serial_twice_or_not_the_inventorys_in_another_spelling():
    result: dict[str, Any] = {"checks": [{"check": "gpu.inventory", "status": "ok",
                                          "measurements": [
        {"name": "gpu.serial", "value": v, "unit": "", "labels": {"gpu": str(i)}}
        for i, v in enumerate([SERIAL, "１６５４１２３４５６７８１"])]}]}
    found = identity_findings({}, result)
    assert [f["problem"] for f in found] == [
        f"GPU serial {SERIAL} (also spelled {ascii('１６５４１２３４５６７８１')}) reported for "
        "GPUs 0, 1 of this node"]
    result["checks"][0]["measurements"].pop()
    assert identity_findings({"gpu_serials": [f"0{SERIAL}".lower()]}, result) == []


def test_the_failing_gpu_is_named_by_the_serial_measured_and_the_inventorys_if_it_differs():
    inventory = {"gpus": {"3": {"serial": "1654999999999", "bus_id": "0000:3b:00.0"}}}
    named = component_words({"gpu": "3", "serial": SERIAL}, inventory)
    assert named == (f"GPU 3 (serial {SERIAL}, not 1654999999999 as the inventory lists, "
                     "PCI 0000:3b:00.0)")
    # the verdict's labels name no serial: the gpu.serial measurement for that GPU does
    measured = {"3": {"serial": SERIAL}}
    assert SERIAL in component_words({"gpu": "3", "serial": "unknown"}, inventory, measured)
    assert "not 1654999999999 as the inventory lists" in component_words({"gpu": "3"},
                                                                         inventory, measured)
    # the same serial in another spelling is no split view
    same = {"gpus": {"3": {"serial": f"0{SERIAL}"}}}
    assert component_words({"gpu": "3", "serial": SERIAL}, same) == f"GPU 3 (serial {SERIAL})"
    # nothing measured a serial: the inventory's is named as the inventory's, never as measured
    assert component_words({"gpu": "3"}, inventory, {}) == (
        "GPU 3 (serial 1654999999999 as the inventory lists, not measured, PCI 0000:3b:00.0)")


@pytest.mark.parametrize("labelled", [True, False], ids=["serial-label", "no-serial-label"])
def test_a_real_run_whose_inventory_names_another_board_is_judged_naming_both(
        tmp_path: Path, healthy_hardware_run: Any, labelled: bool) -> None:
    """A real node-side run (hwsim), judged by the controller (judge_run), whose
    result.json inventory lists another serial for GPU 3 than the node measured, and
    whose GPU 3 runs hot: the failing part is the measured board, the inventory's named
    beside it, never the inventory's alone; also where the failing measurement carries no
    serial label (the node's gpu.serial measurement names the board)."""
    run_ = healthy_hardware_run
    result = run_.result()
    temps = [m for c in result["checks"] for m in c["measurements"]
             if m["name"] == "gpu.temperature" and m["labels"].get("gpu") == "3"]
    measured = temps[0]["labels"]["serial"]
    for m in temps:
        m["value"] = 150
        if not labelled:
            del m["labels"]["serial"]
    result["inventory"]["gpus"]["3"]["serial"] = "1654999999999"
    plan = Plan(run_id="r1", inventory="lab", level="quick", only=list(HARDWARE_CHECKS),
                nodes=[PlannedNode("gpu01", "xe9680-h200-lab", {**run_.site, "node": "gpu01"},
                                   without=("bmc",))])
    run = RunDir.create(None, str(tmp_path / "run"), plan)
    paths = run.prepare_node("gpu01")
    paths.result.write_text(json.dumps({**result, "node": "gpu01"}))
    shutil.copytree(run_.out / "artifacts", paths.artifacts, dirs_exist_ok=True)
    j = judge_run(run)["gpu01"]
    hot = [v for v in j["verdicts"] if v["metric"] == "gpu.temperature"
           and v["outcome"] == "fail"]
    assert hot, j["outcome_reason"]
    assert hot[0]["component"].startswith(
        f"GPU 3 (serial {measured}, not 1654999999999 as the inventory lists"), hot[0]
    assert j["outcome"] == "FAIL" and measured in j["outcome_reason"]
