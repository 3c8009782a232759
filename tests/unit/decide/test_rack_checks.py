"""The rack-level step: pair rounds, rail gating, the controller's judgement of a
fabric, and the verdicts it hands both ends of a weak link."""

from __future__ import annotations

import itertools
import json
from types import SimpleNamespace

import pytest

from rackready.decide import outcome
from rackready.decide import rack as rc
from rackready.decide.outcome import decide_node as _decide
from rackready.report import document
from rackready.run import rundir
from rackready.steps import rack as rack_step
from validation.profile import load_profile
from validation.workloads import rack_nccl as wl


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 32])
def test_rounds_cover_every_pair_once_in_o_n_rounds(n):
    rounds = wl.rounds(n)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == list(itertools.combinations(range(n), 2))
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    for r in rounds:  # disjoint: a node is in at most one pair per round
        nodes = [x for p in r for x in p]
        assert len(nodes) == len(set(nodes))


IBSTAT = """CA 'mlx5_0'
\tCA type: MT4129
\tFirmware version: 28.39.1002
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 400
\t\tLink layer: InfiniBand
CA 'mlx5_1'
\tCA type: MT4129
\tFirmware version: 28.39.1002
\tPort 1:
\t\tState: Down
\t\tPhysical state: Polling
\t\tRate: 10
\t\tLink layer: InfiniBand
"""


def _sysfs(tmp_path, cas: dict[str, str]):
    for name, bdf in cas.items():
        dev = tmp_path / "sys/bus/pci/devices" / bdf
        dev.mkdir(parents=True)
        ca = tmp_path / "sys/class/infiniband" / name
        ca.mkdir(parents=True)
        (ca / "device").symlink_to(dev)
    return tmp_path


def test_rail_table_maps_pci_addresses_to_hcas_and_port_state(tmp_path):
    root = _sysfs(tmp_path, {"mlx5_0": "0000:1a:00.0", "mlx5_1": "0000:3c:00.0"})
    table = wl.rail_table(["0000:1a:00.0", "0000:3C:00.0", "0000:99:00.0"], root, IBSTAT)
    assert [(r["nic"], r["state"], r["rate"]) for r in table] == [
        ("mlx5_0", "Active", 400.0), ("mlx5_1", "Down", 10.0), (None, None, None)]
    up, down, none = table
    assert wl.refusal("a", up, "b", up) == ""
    assert wl.refusal("a", up, "b", down) == "b mlx5_1 port Down"
    assert "a has no HCA at 0000:99:00.0" in wl.refusal("a", none, "b", up)


def test_simulated_slowdown_follows_the_port_rate():
    full, half, dead = ({"rate": r} for r in (400.0, 200.0, 10.0))
    assert wl.slowdown(full, full, 400) == 1
    assert wl.slowdown(full, half, 400) == 2
    assert wl.slowdown(dead, full, 400) == wl.MAX_SLOWDOWN
    assert wl.slowdown({"rate": None}, full, 400) == 1


# --- the controller's judgement ---------------------------------------------------------

LAB = rc.Floors.of(load_profile("xe9680-h200-lab"))
REAL = rc.Floors.of(load_profile("xe9680-h200"))


def _pair(a, b, rail, value, refused=""):
    labels = {"node_a": a, "node_b": b, "rail": str(rail), "nic_a": f"mlx5_{rail}",
              "nic_b": f"mlx5_{rail}", "size_bytes": "4194304", "round": "0"}
    if refused:
        labels["refused"] = refused
    return {"name": "rack.pair_busbw", "value": value, "unit": "GB/s", "labels": labels}


def _ar(value, ok=True):
    lab = {"ranks": "3", "nodes": "n1,n2,n3", "size_bytes": "4194304"}
    return [{"name": "rack.allreduce_busbw", "value": value, "unit": "GB/s", "labels": lab},
            {"name": "rack.allreduce_correct", "value": ok, "unit": "", "labels": lab}]


def _both(records, lead="n1"):
    """As the controller tags them: a link's record from each of its ends, the
    all_reduce's from the first member (rank 0); records already tagged stay."""
    out = []
    for r in records:
        if rc.SENDER in r:
            out.append(r)
        elif r["name"] == rc.PAIR_METRIC:
            out += [{**r, rc.SENDER: r["labels"][end]} for end in ("node_a", "node_b")]
        else:
            out.append({**r, rc.SENDER: lead})
    return out


def _judge(records, members=("n1", "n2", "n3"), floors=LAB, rails=2, left_out=()):
    planned = list(members) + [n["node"] for n in left_out]
    return rc.judge_group("fab", planned, list(members), list(left_out),
                          _both(records, members[0]),
                          {n: floors for n in planned}, [], {n: rails for n in planned})


def _healthy(members=("n1", "n2", "n3"), rails=2, value=0.5):
    return [_pair(a, b, r, value) for a, b in itertools.combinations(members, 2)
            for r in range(rails)]


def test_healthy_fabric_passes():
    g = _judge(_healthy() + _ar(0.4))
    assert (g["outcome"], g["outcome_reason"], g["problems"]) == ("PASS", "", [])
    assert all(p["outcome"] == "pass" for p in g["pairs"]) and len(g["pairs"]) == 6
    assert rc.node_verdicts({"groups": [g]}) == {}


def test_refused_rail_names_the_link_and_the_down_port_in_both_nodes_verdicts():
    recs = [r for r in _healthy() if not (r["labels"]["rail"] == "0" and
                                          "n2" in (r["labels"]["node_a"], r["labels"]["node_b"]))]
    recs += [_pair("n1", "n2", 0, 0.0, "n2 mlx5_0 port Down"),
             _pair("n2", "n3", 0, 0.0, "n2 mlx5_0 port Down")]
    g = _judge(recs + _ar(0.4))
    assert g["outcome"] == "FAIL" and "n2 mlx5_0 port Down" in g["outcome_reason"]
    assert {(s["node"], s["rail"], s["nic"]) for s in g["suspects"]} == {("n2", 0, "mlx5_0")}
    verdicts = rc.node_verdicts({"groups": [g]})
    assert set(verdicts) == {"n1", "n2", "n3"}
    assert all(v["scope"] == "rack" and v["outcome"] == "fail" for vs in verdicts.values()
               for v in vs)
    assert len(verdicts["n2"]) == 2 and len(verdicts["n1"]) == 1
    v = verdicts["n1"][0]
    assert "n1 mlx5_0 <-> n2 mlx5_0 (rail 0)" in v["component"]
    assert "the suspect end is n2 mlx5_0" in v["remediation"]
    assert "this node's mlx5_0 is the suspect end" in verdicts["n2"][0]["remediation"]


def test_slow_rail_above_the_floor_fails_against_the_fabric_median():
    key = ("n1", "n3", "1")
    recs = [r for r in _healthy()
            if (r["labels"]["node_a"], r["labels"]["node_b"], r["labels"]["rail"]) != key]
    recs.append(_pair("n1", "n3", 1, 0.1))  # above the 0.005 floor, 0.2 x the median
    g = _judge(recs + _ar(0.4))
    bad = [p for p in g["pairs"] if p["outcome"] == "fail"]
    assert g["outcome"] == "FAIL" and len(bad) == 1
    assert [f["metric"] for f in bad[0]["failures"]] == ["rack.pair_busbw_vs_median"]
    assert bad[0]["vs_median"] == pytest.approx(0.2)


def test_real_floor_is_the_profile_per_rail_expectation():
    g = _judge(_healthy(value=45.0)[:-1] + [_pair("n2", "n3", 1, 20.0)] + _ar(300.0),
               floors=REAL)
    bad = [p for p in g["pairs"] if p["outcome"] == "fail"]
    assert g["outcome"] == "FAIL"
    assert [(p["node_a"], p["node_b"], p["rail"]) for p in bad] == [("n2", "n3", 1)]
    assert bad[0]["threshold"]["value"] == 40.0 and bad[0]["threshold"]["unit"] == "GB/s"
    assert "NDR 400" in bad[0]["threshold"]["provenance"]


def test_a_provisional_floor_missed_short_of_its_gross_line_reads_below_expected():
    # 39 GB/s: under the provisional 40 GB/s floor, over its gross line (0.7 x 40)
    recs = _healthy(value=45.0)[:-1] + [_pair("n2", "n3", 1, 39.0)] + _ar(300.0)
    g = _judge(recs, floors=REAL)
    assert REAL.pair["tier"] == "provisional" and REAL.pair["gross"] == 28
    low = [p for p in g["pairs"] if p["outcome"] != "pass"]
    assert g["outcome"] == "PASS"
    assert [(p["node_a"], p["node_b"], p["outcome"]) for p in low] == \
        [("n2", "n3", "below_expected")]
    assert low[0]["failures"] == [] and \
        [f["metric"] for f in low[0]["below_expected"]] == ["rack.pair_busbw"]
    verdicts = rc.node_verdicts({"groups": [g]})
    assert {n: [v["outcome"] for v in vs] for n, vs in verdicts.items()} == \
        {"n2": ["below_expected"], "n3": ["below_expected"]}
    assert document.report_groups({"groups": [g]})[0]["pairs"][-1]["messages"][0].startswith(
        "below expected")
    # a site that accepts only against the provisional floors fails it
    strict = rc.Floors(**{**REAL.__dict__, "strict": True})
    g = _judge(recs, floors=strict)
    assert g["outcome"] == "FAIL" and "39.0 GB/s" in g["outcome_reason"]
    # an all_reduce short of its floor but over its gross line: below expected too
    g = _judge(_healthy(value=45.0) + _ar(250.0), floors=REAL)
    assert (g["outcome"], g["allreduce"]["outcome"]) == ("PASS", "below_expected")
    g = _judge(_healthy(value=45.0) + _ar(150.0), floors=REAL)
    assert (g["outcome"], g["allreduce"]["outcome"]) == ("FAIL", "fail")


def test_a_missing_node_or_measurement_never_passes():
    left = [{"node": "n3", "reason": "unreachable: timed out"}]
    g = _judge(_healthy(("n1", "n2")) + _ar(0.4), members=("n1", "n2"), left_out=left)
    assert g["outcome"] == "INCOMPLETE" and "n3" in g["outcome_reason"]
    g = _judge(_healthy()[:-1] + _ar(0.4))
    assert g["outcome"] == "INCOMPLETE" and "no measurement for n2 <-> n3 rail 1" in g["problems"]
    g = _judge(_healthy())
    assert g["outcome"] == "INCOMPLETE" and "all_reduce" in g["outcome_reason"]
    g = _judge([], members=("n1",), left_out=[{"node": "n2", "reason": "x"}])
    assert g["outcome"] == "INCOMPLETE"


def test_one_node_fabric_is_not_applicable_and_does_not_count():
    g = _judge([], members=("n1",))
    assert g["outcome"] == "NOT_APPLICABLE"
    assert outcome.rack_outcome_of({"groups": [g]}) == []


def test_wrong_all_reduce_fails_the_rack():
    g = _judge(_healthy() + _ar(0.4, ok=False))
    assert g["outcome"] == "FAIL" and "correct False" in g["outcome_reason"]


def test_records_from_the_node_are_untrusted():
    problems: list[str] = []
    text = "\n".join([json.dumps(_pair("a", "b", 0, 1.0)), "not json",
                      json.dumps({"name": "rack.pair_busbw", "value": 1, "labels": {}}),
                      '{"name": "rack.allreduce_busbw", "value": NaN, "labels": {}}', ""])
    recs = rack_step.parse_records(text, problems, "a")
    assert len(recs) == 1 and problems == ["a: 3 unusable rack measurement line(s) skipped"]
    # label values that cannot key a table or fill a message, a rail that is no number
    odd_node = _pair("a", "b", 0, 1.0)
    odd_node["labels"]["node_b"] = {"name": "b"}
    odd_rail = _pair("a", "b", 0, 1.0)
    odd_rail["labels"]["rail"] = "first"
    problems = []
    recs = rack_step.parse_records("\n".join(json.dumps(r) for r in (odd_node, odd_rail)),
                            problems, "a")
    assert recs == [] and problems == ["a: 2 unusable rack measurement line(s) skipped"]


def test_a_link_is_judged_only_from_its_two_agreeing_ends():
    # n3 forges: a record claiming n1 <-> n2 rail 0 is down, and one about a non-member
    forged = [{**_pair("n1", "n2", 0, 0.0, "n2 mlx5_0 port Down"), rc.SENDER: "n3"},
              {**_pair("n1", "n9", 0, 0.0, "n9 mlx5_0 port Down"), rc.SENDER: "n1"}]
    g = _judge(_healthy() + forged + _ar(0.4))
    assert rc.node_verdicts({"groups": [g]}) == {}  # the honest n1 and n2 do not fail
    assert all(p["outcome"] == "pass" for p in g["pairs"]) and len(g["pairs"]) == 6
    # the forgery is counted; a fabric that was sent forged records does not pass
    assert g["outcome"] == "INCOMPLETE" and "2 link record(s) dropped" in g["outcome_reason"]
    # one end claims its peer's port is down, the peer carried the link: nobody fails,
    # the disagreement names both nodes, the fabric cannot pass
    recs = [r for r in _both(_healthy()) if not (
        rc._link(r) == ("n1", "n2", "0") and r[rc.SENDER] == "n1")]
    recs.append({**_pair("n1", "n2", 0, 0.0, "n2 mlx5_0 port Down"), rc.SENDER: "n1"})
    g = _judge(recs + _ar(0.4))
    assert g["outcome"] == "INCOMPLETE" and rc.node_verdicts({"groups": [g]}) == {}
    assert any("n1 <-> n2 rail 0: the ends disagree" in p and "tolerance 10%" in p
               for p in g["problems"])
    # a link only one end reports is not judged; the median spans judged links only
    lone = [r for r in _both(_healthy(value=0.5)) if not (
        rc._link(r) == ("n2", "n3", "1") and r[rc.SENDER] == "n3")]
    lone = [{**r, "value": 50.0} if rc._link(r) == ("n2", "n3", "1") else r for r in lone]
    g = _judge(lone + _ar(0.4))
    assert g["outcome"] == "INCOMPLETE" and g["median_rail_gbps"] == 0.5
    assert any("only n2 reported it" in p for p in g["problems"])
    # within the tolerance the ends agree and the lower value is judged
    near = [{**r, "value": 0.46} if rc._link(r) == ("n1", "n3", "0") and r[rc.SENDER] == "n3"
            else r for r in _both(_healthy())]
    g = _judge(near + _ar(0.4))
    assert g["outcome"] == "PASS"
    assert [p["value"] for p in g["pairs"] if (p["node_a"], p["rail"]) == ("n1", 0)
            and "n3" in (p["node_b"],)] == [0.46]


def test_the_all_reduce_counts_only_from_the_first_member():
    forged = [{**r, rc.SENDER: "n2"} for r in _ar(0.4, ok=False)]
    g = rc.judge_group("fab", ["n1", "n2"], ["n1", "n2"], [], _both(_healthy(("n1", "n2")))
                       + forged, {"n1": LAB, "n2": LAB}, [], {"n1": 2, "n2": 2})
    assert g["outcome"] == "INCOMPLETE" and "all_reduce" in g["outcome_reason"]


def test_groups_by_fabric_and_leaves_out_with_a_reason():
    plan = SimpleNamespace(nodes=[
        SimpleNamespace(name="a", site={"fabric": "ib"}),
        SimpleNamespace(name="b", site={"fabric": "ib"}),
        SimpleNamespace(name="c", site={"fabric": "ib"}),
        SimpleNamespace(name="d", site={"fabric": "roce", "rack": {"fabric": "lab-network"}})])
    judgements = {"a": {"outcome": "PASS"}, "b": {"outcome": "FAIL"},
                  "c": {"outcome": "INCOMPLETE", "outcome_reason": "no result"}}
    sessions = {"d": {"problem": "unreachable: connection refused"}}
    g = rc.groups(plan, judgements, sessions)
    assert g["ib"]["members"] == ["a", "b"]  # a node that failed a check still carries traffic
    assert g["ib"]["left_out"] == [{"node": "c", "reason": "node suite incomplete: no result"}]
    assert g["lab-network"]["left_out"][0]["reason"].startswith("unreachable")


def test_rack_verdicts_fail_the_node_judgement():
    j = {"verdicts": [{"outcome": "pass"}], "fleet_verdicts": [], "complete": True,
         "profile_sha256": "x", "problems": [], "node_claimed_outcome": None, "level": "quick",
         "scope": {"missing_checks": [], "partial": False}}
    _decide(j)
    assert j["outcome"] == "PASS"
    j["rack_verdicts"] = [{"outcome": "fail", "metric": "rack.pair_busbw",
                           "component": "link a mlx5_0 <-> b mlx5_0 (rail 0)"}]
    _decide(j)
    assert j["outcome"] == "FAIL" and "link a mlx5_0" in j["outcome_reason"]


# --- the workload itself: two "nodes" as two CPU processes (gloo) -------------------------


def test_workload_on_two_cpu_processes_refuses_the_down_rail(tmp_path):
    """Each process gets its own sysfs and `ibstat`; node b's second rail is Down."""
    import os
    import socket
    import stat
    import subprocess
    import sys

    bdfs = ["0000:1a:00.0", "0000:3c:00.0"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank, name in enumerate(("na", "nb")):
        root = _sysfs(tmp_path / name, {"mlx5_0": bdfs[0], "mlx5_1": bdfs[1]})
        text = IBSTAT if name == "nb" else IBSTAT.replace("Down", "Active").replace(
            "Rate: 10", "Rate: 400")
        tool = tmp_path / name / "bin" / "ibstat"
        tool.parent.mkdir()
        tool.write_text(f"#!/bin/sh\ncat <<'X'\n{text}X\n")
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": "0",
               "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "PATH": f"{tool.parent}:{os.environ['PATH']}", "GLOO_SOCKET_IFNAME": "lo"}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "validation.workloads.rack_nccl", "--device", "cpu",
             "--name", name, "--rails", ",".join(bdfs), "--sysroot", str(root),
             "--simulated-rails", "--pair-size", "64K", "--allreduce-size", "64K",
             "--warmup", "1", "--iters", "2", "--repeats", "1", "--out", str(tmp_path / "out")],
            env=env, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
    problems: list[str] = []
    recs = rack_step.parse_records((tmp_path / "out" / "rack_nccl.rank0.jsonl").read_text(),
                            problems, "na")
    # the other end reports every link too, with the same (slower end's) rate
    theirs = rack_step.parse_records((tmp_path / "out" / "rack_nccl.rank1.jsonl").read_text(),
                              problems, "nb")
    assert problems == []
    assert ([(r["labels"]["rail"], r["value"]) for r in theirs]
            == [(r["labels"]["rail"], r["value"]) for r in recs if r["name"] == rc.PAIR_METRIC])
    pairs = {r["labels"]["rail"]: r for r in recs if r["name"] == "rack.pair_busbw"}
    assert pairs["0"]["value"] > 0 and "refused" not in pairs["0"]["labels"]
    assert pairs["1"]["value"] == 0.0 and pairs["1"]["labels"]["refused"] == "nb mlx5_1 port Down"
    assert [r["value"] for r in recs if r["name"] == "rack.allreduce_correct"] == [True]
    tagged = ([{**r, rc.SENDER: "na"} for r in recs]
              + [{**r, rc.SENDER: "nb"} for r in theirs])
    g = rc.judge_group("f", ["na", "nb"], ["na", "nb"], [], tagged, {"na": LAB, "nb": LAB}, [],
                       {"na": 2, "nb": 2})
    assert g["outcome"] == "FAIL" and g["suspects"][0]["node"] == "nb"


# --- the reports: rack_checks in the rack report, the link in both node reports ----------


def test_rack_report_carries_the_step_and_node_reports_the_link(tmp_path):
    from test_report_synthetic import result, write_run

    from rackready.report.build import build_documents
    from rackready.report.render.html import render_node_html, render_rack_html
    from rackready.report.schema import schema_errors

    run = write_run(tmp_path / "run", [result("gpu01"), result("gpu02")])
    recs = [_pair("gpu01", "gpu02", 0, 0.0, "gpu02 mlx5_0 port Down"),
            _pair("gpu01", "gpu02", 1, 0.8)] + _ar(0.4)
    g = rc.judge_group("lab-network", ["gpu01", "gpu02"], ["gpu01", "gpu02"], [],
                       _both(recs, "gpu01"),
                       {"gpu01": LAB, "gpu02": LAB}, [], {"gpu01": 2, "gpu02": 2})
    (run / rundir.RACK_DIRNAME).mkdir()
    (run / rundir.RACK_DIRNAME / rundir.RACK_FILE).write_text(json.dumps({"groups": [g]}))
    for name, verdicts in rc.node_verdicts({"groups": [g]}).items():
        path = run / name / "judgement.json"  # as judge_run writes it after the step
        j = json.loads(path.read_text())
        j["rack_verdicts"] = verdicts
        _decide(j)
        path.write_text(json.dumps(j))
    rack, docs = build_documents(run)
    for doc in (rack, *docs):
        assert schema_errors(doc) == []
    assert rack["outcome"] == "FAIL" and rack["rack_checks"][0]["outcome"] == "FAIL"
    assert rack["rack_checks"][0]["suspects"][0]["node"] == "gpu02"
    for d in docs:
        (v,) = [v for v in d["verdicts"] if v["scope"] == "rack"]
        assert d["outcome"] == "FAIL" and "rail 0" in v["component"]
        assert "gpu02 mlx5_0" in render_node_html(d)
    html = render_rack_html(rack, docs)
    assert "Rack-level checks" in html and "gpu02 mlx5_0 port Down" in html
    # a rack step that could not run keeps the rack from passing even when the nodes pass
    run2 = write_run(tmp_path / "run2", [result("gpu01"), result("gpu02")])
    (run2 / rundir.RACK_DIRNAME).mkdir()
    left = rc.judge_group("f", ["gpu01", "gpu02"], ["gpu01"], [
        {"node": "gpu02", "reason": "unreachable: timed out"}], [], {}, [], {})
    (run2 / rundir.RACK_DIRNAME / rundir.RACK_FILE).write_text(json.dumps({"groups": [left]}))
    rack2, docs2 = build_documents(run2)
    assert [d["outcome"] for d in docs2] == ["PASS", "PASS"]
    assert rack2["outcome"] == "INCOMPLETE" and "rack step" in rack2["outcome_reason"]


# --- the step's remote commands: bounded like the node session ----------------------


def _hostile_workload(kind: str):
    """A node whose rack workload floods or trickles; every other command runs."""
    import time

    from fake_node import finish

    def hook(command: str, channel) -> bool:
        if "torch.distributed.run" not in command:
            return False
        try:
            if kind == "stdout":
                for _ in range(64):  # 4 MiB
                    channel.sendall(b"o" * (1 << 16))
            elif kind == "stderr":
                for _ in range(48):  # 3 MiB
                    channel.sendall_stderr(b"e" * (1 << 16))
            else:  # one byte every 0.4 s: never idle, never done
                for _ in range(100):
                    channel.sendall(b".")
                    time.sleep(0.4)
        except (OSError, EOFError):  # the controller closed the channel: stopped
            return True
        finish(channel, 0)
        return True
    return hook


@pytest.mark.parametrize("kind, problem", [
    ("stdout", "rack workload: sent more than 64 KiB on stdout"),
    ("stderr", "rack workload: sent more than 64 KiB on stderr"),
    ("trickle", "rack workload: no end within 2 s"),
])
def test_rack_step_commands_are_capped_and_deadlined(tmp_path, monkeypatch, kind, problem):
    """The rack step's remote commands go through node_session.run_command: byte caps on
    stdout and stderr (drained together), an overall deadline; the cap hit is named."""
    import dataclasses
    import time

    from fake_node import FakeNode

    from rackready.remote import session as node_session
    from rackready.run.rundir import Plan, PlannedNode, RunDir

    fakes = [FakeNode(tmp_path / n, exec_hook=_hostile_workload(kind)) for n in ("na", "nb")]
    nodes = {n: dataclasses.replace(f.node, name=n, rdma_devices=("0000:1a:00.0",))
             for n, f in zip(("na", "nb"), fakes, strict=True)}
    monkeypatch.setattr(node_session, "ship_bundle", lambda *a, **k: "/nonexistent")
    monkeypatch.setattr(rack_step, "TIMEOUT_S", {"cuda": 1, "cpu": 1})
    monkeypatch.setattr(rack_step, "RACK_LIMITS", rack_step.RackLimits(
        max_stdout=64 << 10, max_stderr=64 << 10, grace_s=1, idle_s=1.5, command_s=5))
    plan = Plan(run_id="r1", inventory="t", level="quick", only=None,
                nodes=[PlannedNode(n, "xe9680-h200-lab") for n in nodes])
    run = RunDir.create(tmp_path, str(tmp_path / "run"), plan)
    profile = load_profile("xe9680-h200-lab")
    group = {"planned": ["na", "nb"], "members": ["na", "nb"], "left_out": []}
    start = time.monotonic()
    try:
        g = rack_step.run_group(run, "f", group, nodes, {"na": profile, "nb": profile},
                         (b"", "0" * 64), lambda n: "/venv", lambda n: {})
    finally:
        for f in fakes:
            f.close()
    assert time.monotonic() - start < 10
    assert g["outcome"] == "INCOMPLETE"
    assert any(p.startswith(f"na: {problem}") for p in g["problems"]), g["problems"]
    log = (tmp_path / "run" / rundir.RACK_DIRNAME / "f" / "na.log").stat().st_size
    assert log < 200_000


# --- a colluding majority: its figures alone never fail the honest minority -----------


def _colluding(honest: float, claimed: float, rails=2):
    """n4 honest; n1-n3 agree on `claimed` among themselves and, as both ends must, on
    the honest figure for their links with n4."""
    members = ("n1", "n2", "n3", "n4")
    return [_pair(a, b, r, honest if "n4" in (a, b) else claimed)
            for a, b in itertools.combinations(members, 2) for r in range(rails)], members


def test_three_colluders_above_the_line_rate_neither_move_the_median_nor_fail_the_honest():
    recs, members = _colluding(45.0, 1000.0)
    g = _judge(recs + _ar(300.0), members=members, floors=REAL)
    verdicts = rc.node_verdicts({"groups": [g]})
    assert "n4" not in verdicts  # the honest node: no verdict at all
    assert g["median_rail_gbps"] == 45.0  # from plausible links only (was 522.5)
    assert g["outcome"] == "FAIL"
    for n in ("n1", "n2", "n3"):  # what colludes is a finding against the colluders
        assert len(verdicts[n]) == 4 and all(v["outcome"] == "fail" for v in verdicts[n])
        assert all("above the line rate (400 Gb/s / 8 = 50 GB/s each way)" in v["message"]
                   and "not to be trusted" in v["remediation"] for v in verdicts[n])
    assert all(s["node"] != "n4" for s in g["suspects"])


def test_two_ends_agreeing_on_an_impossible_figure_do_not_pass():
    g = _judge([_pair("n1", "n2", r, 1e300) for r in range(2)] + _ar(40.0),
               members=("n1", "n2"), floors=REAL)
    assert g["outcome"] == "FAIL"
    assert all(p["outcome"] == "fail" and p["vs_median"] is None for p in g["pairs"])
    assert g["median_rail_gbps"] is None
    verdicts = rc.node_verdicts({"groups": [g]})
    assert {n: len(vs) for n, vs in verdicts.items()} == {"n1": 2, "n2": 2}
    assert verdicts["n1"][0]["threshold"]["op"] == "<=" and \
        verdicts["n1"][0]["threshold"]["value"] == 50.0
    # at the line rate exactly, a figure is plausible (and the profile's floor judges it)
    g = _judge([_pair("n1", "n2", r, 50.0) for r in range(2)] + _ar(300.0),
               members=("n1", "n2"), floors=REAL)
    assert g["outcome"] == "PASS"


def test_a_plausible_colluding_majority_fails_only_itself():
    # on the lab's floors (0.005 GB/s, 0.3 x the median) three nodes claim 40 GB/s,
    # under the 50 GB/s line rate: the median moves, the honest node's 0.5 GB/s links
    # are 0.025 x it, yet its own links are all alike: nothing of its own bears the
    # median out, so it is named, never failed (not even on a strict site); the
    # colluders' own fast links hold them to the median
    recs, members = _colluding(0.5, 40.0)
    for floors in (LAB, rc.Floors(**{**LAB.__dict__, "strict": True})):
        g = _judge(recs + _ar(0.4), members=members, floors=floors)
        verdicts = rc.node_verdicts({"groups": [g]})
        assert {v["outcome"] for v in verdicts["n4"]} == {"below_expected"}
        assert len(verdicts["n4"]) == 6 and all(
            "not failed for n4" in v["message"] for v in verdicts["n4"])
        for n in ("n1", "n2", "n3"):
            assert [v["outcome"] for v in verdicts[n]] == ["fail", "fail"]
            assert all(f"counts against {n}" in v["message"] for v in verdicts[n])
        assert g["suspects"] == []  # n4 is in every failing pair, none counts against it
        j = {"verdicts": [{"outcome": "pass"}], "fleet_verdicts": [], "complete": True,
             "profile_sha256": "x", "problems": [], "node_claimed_outcome": None,
             "level": "quick", "scope": {"missing_checks": [], "partial": False},
             "rack_verdicts": verdicts["n4"]}
        _decide(j)
        assert j["outcome"] == "PASS"


def test_a_rail_slow_on_one_node_still_fails_its_links_and_names_that_node():
    # n2's rail 0 is slow, its rail 1 is not: n2's own links bear the median out
    recs = [r for r in _healthy(value=0.5)
            if not (r["labels"]["rail"] == "0" and "n2" in (r["labels"]["node_a"],
                                                            r["labels"]["node_b"]))]
    recs += [_pair("n1", "n2", 0, 0.1), _pair("n2", "n3", 0, 0.1)]
    g = _judge(recs + _ar(0.4))
    assert g["outcome"] == "FAIL"
    assert [(s["node"], s["rail"]) for s in g["suspects"]] == [("n2", 0)]
    verdicts = rc.node_verdicts({"groups": [g]})
    assert {n: [v["outcome"] for v in vs] for n, vs in verdicts.items()} == \
        {"n1": ["fail"], "n2": ["fail", "fail"], "n3": ["fail"]}


def _reporting(lines: list[dict]):
    """A node whose rack workload 'ran' and whose measurement file holds `lines`."""
    from fake_node import finish

    def hook(command: str, channel) -> bool:
        if "torch.distributed.run" in command:
            finish(channel, 0)
            return True
        if "rack_nccl.rank" in command:
            channel.sendall("".join(json.dumps(r) + "\n" for r in lines).encode())
            finish(channel, 0)
            return True
        return False
    return hook


def test_colluding_majority_through_the_controller_fails_itself_not_the_honest_node(
        tmp_path, monkeypatch):
    """The real running half (rack_step.run_group over in-process SSH nodes) with three
    nodes whose measurement files agree on 1,000 GB/s among themselves (20 x the 400 Gb/s
    NIC's 50 GB/s each way), and one honest node at 45 GB/s: the controller's judgement
    fails the three, and hands g4 no verdict."""
    import dataclasses

    from fake_node import FakeNode

    from rackready.remote import session as node_session
    from rackready.run.rundir import Plan, PlannedNode, RunDir

    names = ("g1", "g2", "g3", "g4")
    recs, _ = _colluding(45.0, 1000.0, rails=1)
    recs = [_pair(*(n.replace("n", "g") for n in (r["labels"]["node_a"],
                                                  r["labels"]["node_b"])), 0, r["value"])
            for r in recs]
    own = {n: [r for r in recs if n in (r["labels"]["node_a"], r["labels"]["node_b"])]
           for n in names}
    own["g1"] += _ar(300.0)
    fakes = [FakeNode(tmp_path / n, exec_hook=_reporting(own[n])) for n in names]
    nodes = {n: dataclasses.replace(f.node, name=n, rdma_devices=("0000:1a:00.0",))
             for n, f in zip(names, fakes, strict=True)}
    monkeypatch.setattr(node_session, "ship_bundle", lambda *a, **k: "/nonexistent")
    plan = Plan(run_id="r1", inventory="t", level="quick", only=None,
                nodes=[PlannedNode(n, "xe9680-h200") for n in names])
    run = RunDir.create(tmp_path, str(tmp_path / "run"), plan)
    profile = load_profile("xe9680-h200")
    group = {"planned": list(names), "members": list(names), "left_out": []}
    try:
        g = rack_step.run_group(run, "f", group, nodes, dict.fromkeys(names, profile),
                                (b"", "0" * 64), lambda n: "/venv", lambda n: {})
    finally:
        for f in fakes:
            f.close()
    assert g["problems"] == [] and g["median_rail_gbps"] == 45.0
    verdicts = rc.node_verdicts({"groups": [g]})
    assert g["outcome"] == "FAIL" and "g4" not in verdicts
    assert {n: len(vs) for n, vs in verdicts.items()} == {"g1": 2, "g2": 2, "g3": 2}
    assert all("above the line rate" in v["message"] for vs in verdicts.values() for v in vs)


def test_an_impossible_figure_reaches_every_report_against_both_ends(tmp_path):
    from test_report_synthetic import result, write_run

    from rackready.report.build import build_documents
    from rackready.report.render.html import render_node_html, render_rack_html
    from rackready.report.schema import schema_errors

    run = write_run(tmp_path / "run", [result("gpu01"), result("gpu02")])
    recs = [_pair("gpu01", "gpu02", r, 1e300) for r in range(2)] + _ar(300.0)
    g = rc.judge_group("f", ["gpu01", "gpu02"], ["gpu01", "gpu02"], [], _both(recs, "gpu01"),
                       {"gpu01": REAL, "gpu02": REAL}, [], {"gpu01": 2, "gpu02": 2})
    (run / rundir.RACK_DIRNAME).mkdir()
    (run / rundir.RACK_DIRNAME / rundir.RACK_FILE).write_text(json.dumps({"groups": [g]}))
    for name, verdicts in rc.node_verdicts({"groups": [g]}).items():
        path = run / name / "judgement.json"
        j = json.loads(path.read_text())
        j["rack_verdicts"] = verdicts
        _decide(j)
        path.write_text(json.dumps(j))
    rack, docs = build_documents(run)
    for doc in (rack, *docs):
        assert schema_errors(doc) == []
    assert rack["outcome"] == "FAIL" and [d["outcome"] for d in docs] == ["FAIL", "FAIL"]
    assert "above the line rate" in render_rack_html(rack, docs)
    assert all("not to be trusted" in render_node_html(d) for d in docs)
