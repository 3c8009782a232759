"""`invoke validate`'s real controller path over in-process SSH nodes (tests/unit/fake_node.py).

Three nodes in one run: one runs the real suite from the shipped bundle against
simulated hardware, one answers every command with megabytes of garbage, one is
unreachable. Whatever the two do, the first is judged and every node is reported,
and the run exits 1.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import sys
from pathlib import Path

import paramiko
import pytest
from fake_node import FakeNode, finish
from hwsim_node import make_node

from rackready import validate
from rackready.inventory import provisioned


def _garbage(command: str, channel: paramiko.Channel) -> bool:
    """A broken node: every command answers noise on both streams and a random status."""
    channel.sendall(b"\x1b[2J\x00{not json\n[]\n")
    channel.sendall_stderr(b"E" * (3 << 20))
    finish(channel, 7)
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def rack(tmp_path, monkeypatch):
    sim = make_node(tmp_path / "sim", "xe9680-h200", "gpu01", "roce")
    env = {k: v for k, v in sim.env().items() if k != "PYTHONPATH"}  # the bundle's own code
    good = FakeNode(tmp_path / "good", env=env)
    bad = FakeNode(tmp_path / "bad", exec_hook=_garbage)
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    monkeypatch.setattr(validate, "NODE_BASE", str(tmp_path / "good" / "base"))
    # what the roles set on a provisioned node; the venv is this test's interpreter
    roles = {**provisioned({}, Path("roles")), "validation_tools_venv": str(venv.parent)}
    lab = {"profile": "xe9680-h200-lab", "validation_without": ("bmc",)}  # no BMC here
    nodes = {
        "gpu01": dataclasses.replace(good.node, name="gpu01", **lab,
                                     sysroot=str(sim.sysroot), fabric="roce",
                                     provisioned=roles),
        "gpu02": dataclasses.replace(bad.node, name="gpu02", **lab),
        "gpu03": dataclasses.replace(good.node, name="gpu03", **lab,
                                     port=_free_port()),
    }
    monkeypatch.setattr(validate, "_load", lambda inv: list(nodes.values()))
    monkeypatch.setattr(validate, "_find", lambda name, inv: nodes[name])
    yield tmp_path
    good.close()
    bad.close()


def test_a_broken_and_an_unreachable_node_leave_the_rest_reported(rack, capsys):
    out = rack / "run"
    code = validate.run_validation(node=None, inventory="test", level="quick", out=str(out),
                                   formats="json,junit,html",
                                   only="gpu.inventory,kernel.cmdline,health.delta")
    assert code == 1
    rack_doc = json.loads((out / "report" / "rack.json").read_text())
    by_node = {n["node"]: n for n in rack_doc["nodes"]}
    assert set(by_node) == {"gpu01", "gpu02", "gpu03"}
    # the healthy node was judged by the controller: a narrowed run is PARTIAL
    assert by_node["gpu01"]["outcome"] == "PARTIAL", by_node["gpu01"]
    for name, words in (("gpu02", ""), ("gpu03", "unreachable")):
        assert by_node[name]["outcome"] == "INCOMPLETE"
        assert words in by_node[name]["outcome_reason"]
        assert "\n" not in by_node[name]["outcome_reason"]
        assert "\x1b" not in json.dumps(by_node[name])
    assert rack_doc["outcome"] == "INCOMPLETE"
    junit = (out / "report" / "junit.xml").read_text()
    assert all(f'testsuite name="{n}"' in junit for n in by_node)
    html = (out / "report" / "rack.html").read_text()
    assert all(n in html for n in by_node)
    printed = capsys.readouterr().out
    assert "\x1b[2J" not in printed and "Traceback" not in printed
    # the node's result is never rewritten; the controller's judgement sits beside it
    j = json.loads((out / "gpu01" / "judgement.json").read_text())
    assert j["by"] == "controller"
    assert j["scope"]["only"] == ["gpu.inventory", "kernel.cmdline", "health.delta"]
    # every event the real suite sent was accepted (health_start's counters included)
    assert json.loads((out / "gpu01" / "session.json").read_text())["problem"] == ""
    session = json.loads((out / "gpu02" / "session.json").read_text())
    assert session["problem"].startswith("preparing the node failed")
    assert "\n" not in session["problem"] and len(session["problem"]) < 300


def test_two_runs_never_share_a_run_directory(rack):
    out = rack / "run"
    validate.run_validation(node="gpu03", inventory="test", out=str(out), formats="json")
    from rackready.errors import UserError

    with pytest.raises(UserError, match="not empty"):
        validate.run_validation(node="gpu03", inventory="test", out=str(out), formats="json")


def test_resume_sets_aside_only_the_nodes_it_reaches(rack):
    out = rack / "run"
    validate.run_validation(node=None, inventory="test", out=str(out), formats="json",
                            only="kernel.cmdline")
    kept = ("result.json", "events.jsonl", "node.log", "session.json")  # judgement is redone
    before = {p.name: p.read_bytes() for p in (out / "gpu01").iterdir() if p.name in kept}
    assert set(before) == set(kept)
    unreachable = (out / "gpu03" / "session.json").read_bytes()
    validate.run_validation(node="gpu03", inventory="test", formats="json", resume=str(out))
    # gpu01 was not resumed: untouched; gpu03 was not reached: nothing set aside
    after = {p.name: p.read_bytes() for p in (out / "gpu01").iterdir() if p.name in kept}
    assert after == before
    assert not list((out / "gpu03").glob("*.interrupted-*"))
    assert (out / "gpu03" / "session.json").read_bytes() != unreachable  # a new attempt
    assert json.loads((out / "run.json").read_text())["resumed_at"]
    assert Path(out / "report" / "rack.json").is_file()
