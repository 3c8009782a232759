"""Two nodes of one rack reporting one GPU serial in different spellings (rackready.decide
.identifiers.id_key): the real lab nodes, lab-gpu02's GPU 0 given lab-gpu01's GPU 2 serial
in full-width digits with a zero-width space in its hwsim state, so the node's own
nvidia-smi prints it so; one validate run narrowed to gpu.inventory on both (4.1 s
measured on the lab). Both nodes carry the finding, each naming the other's spelling."""

from __future__ import annotations

import json

import pytest

from rackready.decide.identifiers import shown
from rackready.steps.validate import run_validation
from rackready_lab import lab
from rackready_lab.hwsim.sysroot import locked_node_state, read_node_state

pytestmark = pytest.mark.lab

FULL_WIDTH = str.maketrans("0123456789", "０１２３４５６７８９")


def test_one_serial_on_two_nodes_in_two_spellings_is_found_on_both(provisioned_lab,
                                                                   tmp_path):
    first, second = "lab-gpu01", "lab-gpu02"
    serial = read_node_state(provisioned_lab.spec(first).root)["gpus"][2]["serial"]
    spelled = serial[:4] + "\u200b" + serial[4:].translate(FULL_WIDTH)
    with locked_node_state(provisioned_lab.spec(second).root) as state:
        state["gpus"][0]["serial"] = spelled
    try:
        run_validation(None, "lab", "quick", str(tmp_path), formats="json",
                       only="gpu.inventory", nodes=[first, second])
    finally:
        lab.heal(second)
    judged = {n: json.loads((tmp_path / n / "judgement.json").read_text())
              for n in (first, second)}
    measured = [m["value"] for c in json.loads((tmp_path / second / "result.json")
                                               .read_text())["checks"]
                for m in c["measurements"] if m["name"] == "gpu.serial"]
    assert spelled in measured  # the node itself reported the other spelling
    for node, other, mine, theirs in ((first, second, serial, spelled),
                                      (second, first, spelled, serial)):
        j = judged[node]
        found = [f["problem"] for f in j["integrity"] if "also reported by" in f["problem"]]
        assert found == [f"GPU serial {shown(mine)} is also reported by {other} "
                         f"(as {shown(theirs)})"], found
        assert j["outcome"] == "INCOMPLETE", j["outcome_reason"]
    healed = read_node_state(provisioned_lab.spec(second).root)["gpus"][0]["serial"]
    assert healed != spelled and healed.isascii()
