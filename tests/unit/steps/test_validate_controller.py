"""`invoke validate`'s real controller path over in-process SSH nodes (tests/unit/fake_node.py).

Three nodes in one run: one runs the real suite from the shipped bundle against
simulated hardware, one answers every command with megabytes of garbage, one is
unreachable. Whatever the two do, the first is judged and every node is reported,
and the run exits 1.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import socket
import sys
from pathlib import Path

import paramiko
import pytest
from fake_node import FakeNode, finish
from hwsim_node import make_node

from rackready.site.inventory import provisioned
from rackready.steps import validate


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


NODES: dict[str, FakeNode] = {}  # the fixture's nodes, for tests that make one lie


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
    # the compute NICs as the inventory names them (rdma_network_mlx_devices): without them
    # none is compute, and their link-flap counters go unmeasured (a failure)
    ib = sim.sysroot / "sys/class/infiniband"
    nics = tuple(sorted(Path(os.readlink(d / "device")).name for d in ib.iterdir()))
    nodes = {
        # the inventory states gpu01's hostname (rackready_hostname): the suite runs here
        "gpu01": dataclasses.replace(good.node, name="gpu01", **lab,
                                     sysroot=str(sim.sysroot), fabric="roce",
                                     rdma_devices=nics,
                                     provisioned=roles, hostname=socket.gethostname()),
        "gpu02": dataclasses.replace(bad.node, name="gpu02", **lab),
        "gpu03": dataclasses.replace(good.node, name="gpu03", **lab,
                                     port=_free_port()),
    }
    monkeypatch.setattr(validate, "_load", lambda inv: list(nodes.values()))
    monkeypatch.setattr(validate, "_find", lambda name, inv: nodes[name])
    NODES["good"] = good
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


# --- a node that lies after its suite ran: it edits its files or streams more ---------

def _edit_result(change):
    def edit(out: Path, channel: paramiko.Channel) -> None:
        res = json.loads((out / "result.json").read_text())
        change(res, out)
        (out / "result.json").write_text(json.dumps(res))
    return edit


def _symlink(out: Path, channel: paramiko.Channel) -> None:
    (out / "artifacts" / "passwd").symlink_to("/etc/passwd")


def _cite_missing(res: dict, out: Path) -> None:
    res["artifacts"].update({f"artifacts/raw/{i}.txt": "0" * 64 for i in range(49)})


def _cite_wrong_hash(res: dict, out: Path) -> None:
    (out / "artifacts" / "smi.txt").write_text("what the node fetched")
    res["artifacts"]["artifacts/smi.txt"] = hashlib.sha256(b"what it claimed").hexdigest()


def _drop_the_map(res: dict, out: Path) -> None:
    """No artifacts map at all, and a measurement pointing at a file never written."""
    res.pop("artifacts", None)
    m = next(m for c in res["checks"] for m in c["measurements"])
    m["artifact"] = "artifacts/raw/never-written.txt"


def _stream_error(out: Path, channel: paramiko.Channel) -> None:
    res = json.loads((out / "result.json").read_text())
    check = next(c for c in res["checks"] if c["check"] == "kernel.cmdline")
    event = {"event": "check_finished", "check": "kernel.cmdline",
             "result": {**check, "status": "error", "message": "Xid 79 on GPU 3"}}
    channel.sendall((json.dumps(event) + "\n").encode())


@pytest.mark.parametrize("lie, outcome, words", [
    (_symlink, "INCOMPLETE", "refused"),
    (_edit_result(_cite_missing), "INCOMPLETE", "49 of "),
    (_edit_result(_cite_wrong_hash), "INCOMPLETE", "differ from the sha256"),
    (_edit_result(_drop_the_map), "INCOMPLETE", "cited artifact(s) missing"),
    (_edit_result(lambda r, o: r.pop("nonce")), "INCOMPLETE", "this run's nonce"),
    (_edit_result(lambda r, o: r.update(nonce="0" * 32)), "INCOMPLETE", "another run's"),
    (_edit_result(lambda r, o: r.pop("bundle_sha256")), "INCOMPLETE", "no bundle_sha256"),
    (_edit_result(lambda r, o: r.update(hostname="gpu77")), "INCOMPLETE", "from host 'gpu77'"),
    (_stream_error, "FAIL", "kernel.cmdline: error in the live stream"),
], ids=["refused-artifact", "cited-missing", "cited-mismatch", "map-dropped", "no-nonce",
        "replayed-nonce", "no-bundle", "wrong-hostname", "stream-error-result-ok"])
def test_a_lying_node_is_never_believed(rack, lie, outcome, words):
    def after(command: str, channel: paramiko.Channel) -> None:
        if " validation run " in command:  # the suite, not a preparation command
            (out,) = (rack / "good" / "base" / "runs").glob("*/out")
            lie(out, channel)

    NODES["good"].after_exec = after
    out = rack / "run"
    code = validate.run_validation(node="gpu01", inventory="test", level="quick",
                                   out=str(out), formats="json",
                                   only="gpu.inventory,kernel.cmdline")
    j = json.loads((out / "gpu01" / "judgement.json").read_text())
    assert code == 1
    assert j["outcome"] == outcome and words in j["outcome_reason"], j["outcome_reason"]
    assert any(f["outcome"] == outcome and words in f["problem"] for f in j["integrity"])
    node = json.loads((out / "report" / "node-gpu01.json").read_text())
    assert node["outcome"] == outcome


def test_the_exit_code_is_the_whole_runs_a_resumed_node_passing_is_not_enough():
    """`--resume RUN --node gpu02` once exited 0 while its rack.json said INCOMPLETE."""
    from rackready.decide.outcome import exit_code

    passed = {"outcome": "PASS"}
    assert exit_code({"gpu01": passed, "gpu02": passed}, {}) == 0
    assert exit_code({"gpu01": {"outcome": "INCOMPLETE"}, "gpu02": passed}, {}) == 1
    failed_rack = {"groups": [{"outcome": "FAIL"}]}
    assert exit_code({"gpu01": passed, "gpu02": passed}, failed_rack) == 1
    assert exit_code({}, {}) == 1  # nothing judged is never a pass



def test_a_node_resumed_by_the_controller_is_judged_on_its_checks(rack):
    # gpu01's run stops after its first check (its node-side events cut there, no
    # result.json, as a power loss leaves them); `--resume` continues it on the node, whose
    # result.json then lists the resume times (resumed_at, a list per the node's schema):
    # read as well formed, the node is judged on its checks, not INCOMPLETE for it
    out = rack / "run"
    only = "kernel.cmdline,kernel.nouveau"
    validate.run_validation(node="gpu01", inventory="test", out=str(out), formats="json",
                            only=only)
    [node_out] = [p.parent for p in (rack / "good" / "base").rglob("events.jsonl")]
    lines = (node_out / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    cut = next(i for i, e in enumerate(events)
               if e["event"] == "check_finished" and e["check"] == "kernel.cmdline") + 1
    (node_out / "events.jsonl").write_text("\n".join(lines[:cut]) + "\n")
    (node_out / "result.json").unlink()
    validate.run_validation(node="gpu01", inventory="test", formats="json", resume=str(out))
    result = json.loads((out / "gpu01" / "result.json").read_text())
    assert len(result["resumed_at"]) == 1
    judged = json.loads((out / "gpu01" / "judgement.json").read_text())
    assert judged["outcome"] == "PARTIAL", judged.get("outcome_reason")
