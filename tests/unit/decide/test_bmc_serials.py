"""The GPU serials the BMC lists against those the node reports (rackready.decide.integrity
.bmc_serial_findings): a mismatch is a FAIL finding naming both; what could not be
compared is said in the judgement's notes, never passed in silence. The first tests are
the comparison alone; the last judges a real node-side run (hwsim) with a BMC record."""

from __future__ import annotations

import copy
import json
import shutil

from fault_expectations import HARDWARE_CHECKS

from rackready.decide.integrity import bmc_serial_findings
from rackready.decide.judge import judge_run
from rackready.run.rundir import Plan, PlannedNode, RunDir

NODE = ["1654123456781", "1654123456782", "1654123456783"]


def _result(serials: list[str]) -> dict:
    return {"checks": [{"check": "gpu.inventory", "status": "ok", "measurements": [
        {"name": "gpu.serial", "value": s, "unit": "", "labels": {"gpu": str(i)}}
        for i, s in enumerate(serials)]}]}


def _bmc(serials: list[str]) -> dict:
    return {"identity": {"model": "PowerEdge XE9680", "gpus": [
        {"slot": f"GPU {i + 1}", "model": "H200", "serial": s, "uuid": ""}
        for i, s in enumerate(serials)]}}


def test_the_same_serials_in_other_spelling_and_order_are_no_finding():
    bmc = _bmc([f" {s.lower()}X " for s in reversed(NODE)])
    assert bmc_serial_findings(bmc, _result([f"{s}x" for s in NODE])) == ([], "")


def test_a_serial_the_bmc_lists_and_the_node_does_not_is_a_fail_naming_both():
    swapped = ["1654999999999", *NODE[1:]]
    found, note = bmc_serial_findings(_bmc(swapped), _result(NODE))
    assert note == ""
    (f,) = found
    assert (f["kind"], f["outcome"]) == ("identity", "FAIL")
    assert "1654999999999 (at GPU 1)" in f["problem"] and f"{NODE[0]} (GPU 0)" in f["problem"]
    assert "between the node and its BMC" in f["problem"]
    # the node reports a GPU more than a BMC that lists a serial for every GPU it sees
    found, _ = bmc_serial_findings(_bmc(NODE[:2] + ["1654999999999"]),
                                   _result(NODE))
    assert found and "1654999999999" in found[0]["problem"] and NODE[2] in found[0]["problem"]


def test_a_bmc_without_gpu_serials_is_said_never_passed_in_silence():
    for bmc in (_bmc(["", " "]), _bmc([]), {"identity": {"model": "R760"}}):
        found, note = bmc_serial_findings(bmc, _result(NODE))
        assert found == [] and note.startswith("BMC reports no GPU serials"), note
        assert "3 GPU serial(s) are not cross-checked" in note
    found, note = bmc_serial_findings(_bmc(NODE), _result([]))
    assert found == [] and "the node reported none" in note
    # a BMC that sees fewer GPUs than the node: compared on those, the rest said
    found, note = bmc_serial_findings(_bmc(NODE[:1]), _result(NODE))
    assert found == [] and "serials for 1 of the node's 3 GPUs" in note
    found, note = bmc_serial_findings(_bmc(["1654999999999"]), _result(NODE))
    assert found and "1654999999999" in found[0]["problem"]
    # not read (the bmc check says why), or no result: nothing to compare
    assert bmc_serial_findings(None, _result(NODE)) == ([], "")
    assert bmc_serial_findings({"identity": {}, "problem": "unreachable"},
                               _result(NODE)) == ([], "")
    assert bmc_serial_findings(_bmc(NODE), None) == ([], "")


def test_the_judgement_carries_the_finding_and_the_note(tmp_path, healthy_hardware_run):
    run_ = healthy_hardware_run
    result = run_.result()
    serials = [str(m["value"]) for c in result["checks"] for m in c["measurements"]
               if m["name"] == "gpu.serial"]
    assert len(serials) == 8

    def judged(folder: str, bmc: dict | None) -> dict:
        plan = Plan(run_id="r1", inventory="lab", level="quick", only=list(HARDWARE_CHECKS),
                    nodes=[PlannedNode("gpu01", "xe9680-h200-lab",
                                       {**run_.site, "node": "gpu01"}, without=("bmc",))])
        run = RunDir.create(None, str(tmp_path / folder), plan)
        paths = run.prepare_node("gpu01")
        paths.result.write_text(json.dumps({**copy.deepcopy(result), "node": "gpu01"}))
        shutil.copytree(run_.out / "artifacts", paths.artifacts, dirs_exist_ok=True)
        if bmc is not None:
            run.write_bmc("gpu01", bmc)
        return judge_run(run)["gpu01"]

    honest = judged("a", _bmc(serials))
    assert honest["outcome"] == "PARTIAL", honest["outcome_reason"]  # narrowed: never PASS
    assert not [p for p in honest["problems"] if "BMC" in p]
    swapped = judged("b", _bmc(["1654999999999", *serials[1:]]))
    assert swapped["outcome"] == "FAIL"
    assert "differ between the node and its BMC" in swapped["outcome_reason"]
    assert "1654999999999" in swapped["outcome_reason"] and serials[0] in swapped["outcome_reason"]
    assert [f["outcome"] for f in swapped["integrity"]] == ["FAIL"]
    silent = judged("c", _bmc([""] * 8))
    assert silent["outcome"] == "PARTIAL"
    assert any(p.startswith("BMC reports no GPU serials") for p in silent["problems"])
    assert (tmp_path / "c" / "gpu01" / "judgement.json").is_file()
