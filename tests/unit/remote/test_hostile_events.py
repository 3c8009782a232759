"""The real controller path (rackready.steps.validate.run_validation) over in-process SSH
nodes (fake_node.py) whose live event stream is hostile: padded with tiny values to
cost the controller memory, or saying one thing live and another in result.json. Events
are capped like result.json, and the stream's last word on every check (its status and
its measurements) must be what result.json says."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
import tracemalloc

import pytest
from fake_node import FakeNode
from fake_rack import play_every_node, provisioned_roles

from rackready.remote import result_shape
from rackready.steps import validate

# `python -m validation run ...` from the shipped bundle: streams per HOSTILE, then writes
# a result.json whose one check is ok and holds its one measurement (the token is there)
SUITE = r'''
import json, os, socket, sys
argv = sys.argv[1:]
out = argv[argv.index("--out") + 1]
os.makedirs(out, exist_ok=True)
mode, node = os.environ["HOSTILE"], os.environ["NODE_NAME"]
def ev(**e):
    sys.stdout.write(json.dumps(e) + "\n"); sys.stdout.flush()
C = "kernel.cmdline"
m = {"name": "kernel.cmdline_token", "value": True, "unit": "", "labels": {"token": "iommu=pt"}}
ok = {"check": C, "status": "ok", "duration_s": 0.1, "measurements": [m], "message": ""}
ev(event="run_started", run_id="r", node=node, level="quick")
ev(event="check_started", check=C)
if mode == "padded":  # lines of "{}" just under the line cap, as many as PAD_LINES
    pad = ",".join(["{}"] * ((1 << 20) // 3 - 40))
    for _ in range(int(os.environ["PAD_LINES"])):
        sys.stdout.write('{"event": "progress", "fraction": 0.5, "pad": [' + pad + ']}\n')
    sys.stdout.flush()
elif mode == "small_pads":  # many events under the cap per event, together over the total
    for _ in range(40):
        ev(event="progress", fraction=0.5, pad=[{}] * 9000)
elif mode == "deep":
    deep = [1]
    for _ in range(40):
        deep = [deep]
    ev(event="progress", fraction=0.5, pad=deep)
elif mode == "long_text":
    ev(event="progress", fraction=0.5, label="x" * 20000)
ev(event="measurement", check=C,
   measurement={**m, "value": mode != "measurement"})
if mode == "error_then_ok":
    ev(event="check_finished", check=C, result={**ok, "status": "error", "message": "dead"})
if mode == "nameless_error":  # the result names no check: the event's name is its name
    ev(event="check_finished", check=C,
       result={k: v for k, v in {**ok, "status": "error"}.items() if k != "check"})
else:
    ev(event="check_finished", check=C, result=ok)
with open(os.path.join(out, "result.json"), "w") as f:
    json.dump({"schema_version": "1.0", "node": node, "profile": "xe9680-h200-lab",
               "level": "quick", "checks": [ok], "outcome": "PARTIAL", "only": [C],
               "hostname": socket.gethostname(), "nonce": os.environ["RACKREADY_RUN_NONCE"],
               "bundle_sha256": os.environ["RACKREADY_BUNDLE_SHA256"]}, f)
ev(event="run_finished", outcome="PASS")
'''


@pytest.fixture
def rack(tmp_path, monkeypatch):
    """Nodes by mode: rack(("gpu01", "honest"), ("gpu02", "padded"), env={...})."""
    roles = provisioned_roles(tmp_path)
    lab = {"profile": "xe9680-h200-lab", "fabric": "roce", "validation_without": ("bmc",),
           "provisioned": roles}
    fakes: list[FakeNode] = []
    nodes = {}
    play_every_node(monkeypatch, tmp_path, nodes, SUITE)
    monkeypatch.setattr(sys, "stdout", io.StringIO())

    def run(*modes: tuple[str, str], env: dict[str, str] | None = None) -> dict:
        for name, mode in modes:
            fake = FakeNode(tmp_path / name,
                            env={"HOSTILE": mode, "NODE_NAME": name, **(env or {})})
            fakes.append(fake)
            nodes[name] = dataclasses.replace(fake.node, name=name, **lab)
        out = tmp_path / "run"
        validate.run_validation(node=None, inventory="test", level="quick", out=str(out),
                                formats="json", only="kernel.cmdline")
        report = json.loads((out / "report" / "rack.json").read_text())
        return {n["node"]: {**n, "judgement": json.loads(
            (out / n["node"] / "judgement.json").read_text())} for n in report["nodes"]}

    yield run
    for fake in fakes:
        fake.close()


def _said(node: dict) -> str:
    j = node["judgement"]
    return " | ".join([node["outcome_reason"], *j["problems"],
                       *(f["problem"] for f in j.get("integrity") or [])])


# --- item 5: events capped like result.json ------------------------------------------

PAD_LINES = 8  # 8 MiB of "{}": 2.8 million values; 64 MiB added 1.5 GB to the peak
PEAK_BOUND = 32 << 20  # measured: 221 MiB before events were capped, 5.3 MiB since


def test_a_stream_padded_with_empty_objects_costs_no_memory_and_is_named(rack):
    tracemalloc.start()
    try:
        nodes = rack(("gpu01", "honest"), ("gpu02", "padded"),
                     env={"PAD_LINES": str(PAD_LINES)})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BOUND, f"controller peak {peak >> 20} MiB"
    assert nodes["gpu01"]["outcome"] == "PARTIAL", _said(nodes["gpu01"])  # narrowed: --only
    assert nodes["gpu02"]["outcome"] == "INCOMPLETE"
    assert f"over the cap of {result_shape.CAPS.event_values} values" in _said(nodes["gpu02"])


def test_events_over_the_streams_total_of_values_end_the_session_naming_the_cap(
        rack, monkeypatch):
    monkeypatch.setattr(result_shape, "CAPS", result_shape.ResultCaps(json_values=200_000))
    nodes = rack(("gpu02", "small_pads"))
    assert nodes["gpu02"]["outcome"] == "INCOMPLETE"
    assert "over the cap of 200000 JSON values" in _said(nodes["gpu02"])


@pytest.mark.parametrize("mode,cap", [
    ("deep", f"nested deeper than the cap of {result_shape.CAPS.event_depth}"),
    ("long_text", f"over the cap of {result_shape.CAPS.message_chars} characters"),
])
def test_deep_or_long_events_are_refused_naming_the_cap(rack, mode, cap):
    nodes = rack(("gpu02", mode))
    assert nodes["gpu02"]["outcome"] == "INCOMPLETE"
    assert cap in _said(nodes["gpu02"])


# --- item 8: the stream's last word against result.json ------------------------------

@pytest.mark.parametrize("mode,outcome,said", [
    ("error_then_ok", "FAIL", "kernel.cmdline finished error, then ok in the live stream"),
    ("nameless_error", "FAIL", "kernel.cmdline: error in the live stream"),
    ("measurement", "INCOMPLETE", "kernel.cmdline: measurements streamed live differ "
                                  "from result.json"),
])
def test_a_stream_that_contradicts_result_json_is_a_finding(rack, mode, outcome, said):
    nodes = rack(("gpu01", "honest"), ("gpu02", mode))
    assert nodes["gpu01"]["outcome"] == "PARTIAL", _said(nodes["gpu01"])  # narrowed: --only
    assert nodes["gpu02"]["outcome"] == outcome, _said(nodes["gpu02"])
    assert said in _said(nodes["gpu02"])


def test_a_result_rebuilt_from_the_stream_keeps_a_failure_the_node_took_back():
    """No result.json: the check is what the stream said last, unless it said failing
    first; a result event that names no check is the event's check, never dropped."""
    from rackready.run.rebuild import result_from_events

    ok = {"check": "a", "status": "ok", "duration_s": 0.1, "measurements": [], "message": ""}
    nameless = {k: v for k, v in ok.items() if k != "check"}
    problems: list[str] = []
    rebuilt = result_from_events([
        {"event": "check_started", "check": "a"},
        {"event": "check_finished", "check": "a", "result": {**ok, "status": "error"}},
        {"event": "check_finished", "check": "a", "result": ok},
        {"event": "check_started", "check": "b"},
        {"event": "check_finished", "check": "b", "result": {**nameless, "status": "timeout"}},
    ], "gpu02", problems)
    assert [(c["check"], c["status"]) for c in rebuilt["checks"]] == [("a", "error"),
                                                                      ("b", "timeout")]
    assert problems == ["the live stream finished check a error, then ok; error kept"]


def test_an_events_file_the_node_wrote_is_read_back_under_the_event_cap(tmp_path):
    """`invoke report` on a node's own --out folder reads the events.jsonl the node wrote:
    a line of countless tiny values is refused before it is parsed, as on the stream."""
    from rackready.run.rundir import Plan, PlannedNode, RunDir

    plan = Plan(run_id="r", inventory="lab", level="quick", only=None,
                nodes=[PlannedNode("gpu01", "xe9680-h200")])
    run = RunDir.create(None, str(tmp_path / "run"), plan)
    events = run.prepare_node("gpu01").events
    padded = {"event": "progress", "check": "x", "pad": [{}] * (result_shape.CAPS.event_values + 1)}
    events.write_text(json.dumps({"event": "run_started"}) + "\n" + json.dumps(padded) + "\n")
    read, bad = run.read_events("gpu01")
    assert [e["event"] for e in read] == ["run_started"] and bad == 1
