"""hwsim faults: each changes the outputs that name the part; heal restores them.

The faulted states are generated in code from the state built on the real capture.
"""

from __future__ import annotations

import json

import pytest

from rackready_lab.hwsim.faults import FAULT_KINDS, FaultError, apply_fault, heal
from rackready_lab.hwsim.state import build_state


@pytest.fixture(scope="module")
def base() -> dict:
    return build_state("xe9680-h200", "gpu01")


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_fault_is_pure_recorded_and_healed(base: dict, kind: str) -> None:
    before = repr(base)
    faulted = apply_fault(base, kind)
    assert repr(base) == before  # input untouched
    assert faulted != base
    rec = faulted["faults"][-1]
    assert rec["kind"] == kind and rec["component"]["type"] in ("gpu", "nic", "nvme", "service",
                                                             "nvswitch", "dimm")
    assert heal(faulted) == base


def test_fault_names_the_targeted_gpu(base: dict) -> None:
    f = apply_fault(base, "pcie-downtrained", "3")
    comp = f["faults"][0]["component"]
    assert comp["serial"] == base["gpus"][3]["serial"]
    assert f["gpus"][3]["pcie"]["width_cur"] == 8 and f["gpus"][3]["pcie"]["gen_cur"] == 4
    assert f["gpus"][2]["pcie"] == base["gpus"][2]["pcie"]
    by_serial = apply_fault(base, "gpu-missing", base["gpus"][5]["serial"])
    assert by_serial["gpus"][5]["present"] is False


def test_fabric_manager_down_needs_nvswitch() -> None:
    with pytest.raises(FaultError, match="needs NVSwitch"):
        apply_fault(build_state("dl380a-gen12-h200nvl", "n"), "fabric-manager-down")


def test_unknown_kind_and_target_are_one_line_errors(base: dict) -> None:
    with pytest.raises(FaultError) as exc:
        apply_fault(base, "cosmic-ray")
    assert "gpu-missing" in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(FaultError, match="no GPU"):
        apply_fault(base, "xid-79", "42")


def test_heal_keeps_runtime_settings(base: dict) -> None:
    f = apply_fault(base, "ib-port-down", "mlx5_2")
    f["modules"] = [*f["modules"], "extra_mod"]
    f["nic_config"]["mlx5_0"]["mlxconfig"]["pending"]["LINK_TYPE_P1"] = "IB(1)"
    h = heal(f)
    assert h["nics"][2]["state"] == "Active"
    assert "extra_mod" in h["modules"]
    assert h["nic_config"]["mlx5_0"]["mlxconfig"]["pending"] == {"LINK_TYPE_P1": "IB(1)"}


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_sysroot_renders_again_over_itself_for_every_fault(tmp_path, kind):
    # lab.fault and lab.heal re-render a node's sysroot in place, many times over
    from rackready_lab.hwsim.sysroot import write_node_state

    state = build_state("xe9680-h200", "gpu01", "roce", provisioned=True)
    write_node_state(state, tmp_path)
    faulty = apply_fault(state, kind)
    write_node_state(faulty, tmp_path)
    write_node_state(heal(faulty), tmp_path)
    assert (tmp_path / "var/lib/hwsim/root/sys/class/infiniband/mlx5_0/device").is_symlink()


def test_controller_update_waits_for_a_node_tool_holding_the_lock(tmp_path, monkeypatch):
    # A node's daemons rewrite state.json while the controller injects a fault;
    # both sides take the same lock, so neither update is lost.
    import threading

    from rackready_lab.hwsim.cli.common import locked_state
    from rackready_lab.hwsim.sysroot import STATE_REL, locked_node_state, write_node_state

    write_node_state(build_state("xe9680-h200", "n1"), tmp_path)
    monkeypatch.setenv("HWSIM_STATE", str(tmp_path / STATE_REL))
    held, release = threading.Event(), threading.Event()

    def node_tool() -> None:
        with locked_state() as state:
            held.set()
            release.wait(5)
            state["services"]["nvidia-fabricmanager"]["running"] = False

    tool = threading.Thread(target=node_tool)
    tool.start()
    held.wait(5)
    threading.Timer(0.3, release.set).start()
    with locked_node_state(tmp_path) as state:  # blocks until the tool has written
        assert state["services"]["nvidia-fabricmanager"]["running"] is False
        state["faults"].append({"kind": "marker"})
    tool.join()
    saved = json.loads((tmp_path / STATE_REL).read_text())
    assert saved["faults"][-1]["kind"] == "marker"
    assert saved["services"]["nvidia-fabricmanager"]["running"] is False


def _tree(root) -> dict[str, str]:
    """Every file's text and every link's target under a sysroot's proc and sys."""
    import os

    out = {}
    for top in ("proc", "sys"):
        for path in sorted((root / top).rglob("*")):
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_dir():
                out[rel] = "/"
            else:
                out[rel] = path.read_bytes().hex()
    return out


@pytest.mark.parametrize("kind", ["aer-storm", "link-flap"])
def test_a_ticking_fault_renders_in_place_as_a_fresh_render_would(tmp_path, monkeypatch, kind):
    # each stand-in tool call raises the fault's counters and renders the sysroot in place
    # (only the files whose text changed rewritten): the tree is the one a fresh render of
    # the same state writes
    from rackready_lab.hwsim.cli.common import advance_faults
    from rackready_lab.hwsim.cli.sysroot_render import render_sysroot
    from rackready_lab.hwsim.sysroot import ROOT_REL, STATE_REL, write_node_state

    state = apply_fault(build_state("xe9680-h200", "gpu01", "roce", provisioned=True), kind)
    write_node_state(state, tmp_path / "node")
    monkeypatch.setenv("HWSIM_STATE", str(tmp_path / "node" / STATE_REL))
    before = _tree(tmp_path / "node" / ROOT_REL)
    for _ in range(3):
        advance_faults()
    ticked = json.loads((tmp_path / "node" / STATE_REL).read_text())
    render_sysroot(ticked, tmp_path / "fresh")
    after = _tree(tmp_path / "node" / ROOT_REL)
    assert after == _tree(tmp_path / "fresh")
    assert after != before  # the counters did rise


def test_fabric_manager_log_healthy_then_a_fault_logged_at_the_next_tool_call(tmp_path,
                                                                          monkeypatch):
    # the NVSwitch node's rendered Fabric Manager log reads as one (the suite's own parser):
    # a session and its configured line, no error; a fault's errors are not in it until the
    # node's next stand-in call logs them (then at that call's time); heal takes them away
    from datetime import datetime

    from rackready_lab.hwsim.cli.common import advance_faults
    from rackready_lab.hwsim.sysroot import ROOT_REL, STATE_REL, write_node_state
    from validation.probes.fabricmanager_log import parse_fm_log

    healthy = build_state("xe9680-h200", "gpu01", "roce", provisioned=True)
    log = tmp_path / "node" / ROOT_REL / "var/log/fabricmanager.log"
    write_node_state(apply_fault(healthy, "fabric-manager-nonfatal", "3:7"), tmp_path / "node")
    es = parse_fm_log(log.read_text(), datetime.now())
    assert [e.kind for e in es if e.kind != "other"] == ["start", "configured"]
    monkeypatch.setenv("HWSIM_STATE", str(tmp_path / "node" / STATE_REL))
    before = datetime.now().replace(microsecond=0)
    advance_faults()
    errors = [e for e in parse_fm_log(log.read_text(), datetime.now()) if e.is_error]
    assert [(e.kind, e.bus, e.physical_id, e.port) for e in errors] == [
        ("nvswitch_nonfatal", healthy["nvswitches"][3]["bdf"], 11, 7)] * 3
    assert all(e.when >= before for e in errors)
    write_node_state(heal(json.loads((tmp_path / "node" / STATE_REL).read_text())),
                     tmp_path / "node")
    assert not [e for e in parse_fm_log(log.read_text(), datetime.now()) if e.is_error]
    # no NVSwitch: no Fabric Manager, no log
    write_node_state(build_state("dl380a-gen12-h200nvl", "n", provisioned=True), tmp_path / "d")
    assert not (tmp_path / "d" / ROOT_REL / "var/log/fabricmanager.log").exists()
    with pytest.raises(FaultError, match="needs NVSwitch"):
        apply_fault(build_state("dl380a-gen12-h200nvl", "n"), "fabric-manager-fatal")
