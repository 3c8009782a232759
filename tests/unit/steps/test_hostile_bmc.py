"""The BMC is untrusted like the node: the real sampler (rackready/steps/envelope.py), the
out-of-band step (rackready/steps/oob.py) and the whole controller path
(rackready.steps.validate.run_validation) against a hostile HTTPS Redfish service
(tests/unit/fake_redfish.py) that answers NaN and 1e999, negative watts, ten thousand
fans, pages that link back to themselves, one byte every so often, or slowly.
A BMC that lies or stalls fails its own check with the reason; every node is reported."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from fake_node import FakeNode
from fake_rack import play_every_node, provisioned_roles

from rackready.redfish import envelope as rf_env
from rackready.site.bmc import BmcAccess, Secret
from rackready.steps import envelope, oob, validate
from tests.unit.fake_redfish import FakeBMC, make_ca
from tests.unit.remote.test_hostile_node_data import SUITE
from tests.unit.steps.test_envelope import _verdicts
from tests.unit.steps.test_oob import PASSWORD, node

R = "/redfish/v1"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def dell(certs):
    bmc = FakeBMC(certs, "dell", password=PASSWORD)
    yield bmc
    bmc.close()


def _power(bmc: FakeBMC, draw: Any = 9800, capacity: float = 2800) -> str:
    """The iDRAC's Power with a chassis draw and each PSU's capacity and output."""
    power = bmc.res[f"{bmc.chassis}/Power"]
    power["PowerControl"] = [{"PowerConsumedWatts": draw}]
    for p in power["PowerSupplies"]:
        p.update(PowerCapacityWatts=capacity, PowerOutputWatts=1500)
    return f"{bmc.chassis}/Power"


def _sampled(bmc: FakeBMC, certs, seconds: float = 0.3, **kw: Any) -> dict[str, Any]:
    sampler = envelope.Sampler(node("gpu01", bmc.address, str(certs[0])), period_s=0.05,
                               **kw).start()
    time.sleep(seconds)
    return sampler.stop()


def _in_time(fn, limit_s: float) -> tuple[Any, float]:
    """fn() in a thread: (its result, seconds), or a failure when it has not ended in
    limit_s (the BMC held it: the old client had no deadline)."""
    box: dict[str, Any] = {}
    t0 = time.monotonic()
    worker = threading.Thread(target=lambda: box.update(out=fn()), daemon=True)
    worker.start()
    worker.join(limit_s)
    assert "out" in box, f"still reading the BMC after {limit_s} s"
    return box["out"], time.monotonic() - t0


# --- 1. NaN and 1e999 ----------------------------------------------------------------

@pytest.mark.parametrize("said", [b"NaN", b"1e999", b"-Infinity"])
def test_a_reading_json_cannot_hold_is_refused_by_name_and_the_record_is_written(
        dell, certs, said):
    path = _power(dell)
    body = json.dumps(dell.res[path]).replace('"PowerConsumedWatts": 9800',
                                              '"PowerConsumedWatts": ' + said.decode())
    dell.raw[path] = body.encode()
    rec = _sampled(dell, certs)
    after = oob.collect(node("gpu01", dell.address, str(certs[0])), timeout=5,
                        baseline_dir=Path("/nonexistent"), envelope=rec)
    json.dumps(after, allow_nan=False)  # what rundir.write_bmc does: it raised before
    assert rec["count"] >= 2 and rec["summary"]["peak_power_w"] is None
    bad = {v.metric: v for v in _verdicts(rec)["fail"]}
    assert bad["bmc.envelope.refused_readings"].labels["sensor"] == (
        f"chassis draw (PowerConsumedWatts): {said.decode()} is not a number")
    assert bad["bmc.power.one_lost_load_ratio"].value is None  # no draw: not a pass


def test_a_bmc_answering_nan_leaves_every_node_its_report(certs, tmp_path, monkeypatch):
    """The whole controller: gpu01's BMC answers NaN for its draw, gpu02's is honest; the
    run ends with both nodes judged and reported (it threw before: 'Out of range float')."""
    roles = provisioned_roles(tmp_path)
    bmcs = {"gpu01": FakeBMC(certs, "dell", password=PASSWORD),
            "gpu02": FakeBMC(certs, "dell", password=PASSWORD)}
    for name, bmc in bmcs.items():
        path = _power(bmc)
        if name == "gpu01":
            bmc.raw[path] = json.dumps(bmc.res[path]).replace(
                '"PowerConsumedWatts": 9800', '"PowerConsumedWatts": NaN').encode()
    fakes, nodes = [], {}
    for name, bmc in bmcs.items():
        fake = FakeNode(tmp_path / name, env={"HOSTILE": "honest", "NODE_NAME": name})
        fakes.append(fake)
        access = BmcAccess(bmc.address, "root", Secret(PASSWORD), str(certs[0]))
        nodes[name] = dataclasses.replace(fake.node, name=name, profile="xe9680-h200-lab",
                                          fabric="ib", provisioned=roles,
                                          bmc=lambda a=access: a)
    play_every_node(monkeypatch, tmp_path, nodes, SUITE)
    monkeypatch.setattr(oob, "BASELINE_DIR", tmp_path / "no-baseline")
    out = tmp_path / "run"
    try:
        validate.run_validation(node=None, inventory="test", level="quick", out=str(out),
                                formats="json,junit", only="kernel.cmdline")
    finally:
        for fake in fakes:
            fake.close()
        for bmc in bmcs.values():
            bmc.close()
    rack = json.loads((out / "report" / "rack.json").read_text())
    assert {n["node"] for n in rack["nodes"]} == {"gpu01", "gpu02"}
    for name in bmcs:
        assert (out / "report" / f"node-{name}.json").is_file()
    j1 = json.loads((out / "gpu01" / "judgement.json").read_text())
    refused = [v for v in j1["verdicts"] if v["metric"] == "bmc.envelope.refused_readings"]
    assert refused and refused[0]["outcome"] == "fail"
    assert "PowerConsumedWatts" in refused[0]["message"] and "NaN" in refused[0]["message"]
    assert j1["outcome"] != "PASS"  # (the stand-in suite's result is no run's: INCOMPLETE)
    j2 = json.loads((out / "gpu02" / "judgement.json").read_text())
    assert not [v for v in j2["verdicts"] if v["metric"].startswith(("bmc.envelope",
                                                                     "bmc.power."))
                and v["outcome"] == "fail"]


# --- 2. pages without end, a trickle, a slow BMC -----------------------------------------

def test_a_collection_whose_next_page_is_itself_ends_in_one_line(dell, certs, tmp_path):
    dell.res[f"{R}/Chassis"]["Members@odata.nextLink"] = f"{R}/Chassis"
    rec, took = _in_time(lambda: oob.collect(node("gpu01", dell.address, str(certs[0])),
                                             timeout=5, baseline_dir=tmp_path), 20)
    assert rec["check"]["status"] == "error" and "nextLink loop" in rec["problem"]
    assert sum(1 for _, p, _ in dell.requests if p == f"{R}/Chassis") == 1


def test_a_collection_of_ever_new_empty_pages_is_bounded(dell, certs, tmp_path):
    for i in range(400):  # each page names a new next page, none lists a member
        dell.res[f"{R}/Chassis/p{i}"] = {"Members": [],
                                         "Members@odata.nextLink": f"{R}/Chassis/p{i + 1}"}
    dell.res[f"{R}/Chassis"]["Members@odata.nextLink"] = f"{R}/Chassis/p0"
    rec, _ = _in_time(lambda: oob.collect(node("gpu01", dell.address, str(certs[0])),
                                          timeout=5, baseline_dir=tmp_path), 60)
    assert "more than 256 pages" in rec["problem"]


def test_a_bmc_that_trickles_a_byte_at_a_time_fails_within_the_request_timeout(
        dell, certs, tmp_path):
    dell.trickle[f"{R}/Systems"] = 0.2  # a byte every 0.2 s: no socket timeout trips
    rec, took = _in_time(lambda: oob.collect(node("gpu01", dell.address, str(certs[0])),
                                             timeout=1, baseline_dir=tmp_path), 15)
    assert rec["check"]["status"] == "error" and took < 5
    assert rec["problem"].endswith(f"GET {R}/Systems: no complete answer within 1 s")


def test_a_slow_bmc_ends_at_the_whole_reads_deadline(dell, certs, tmp_path):
    dell.delay_s = 0.05  # each answer in time; the read of them all is not
    rec, took = _in_time(lambda: oob.collect(node("gpu01", dell.address, str(certs[0])),
                                             timeout=5, baseline_dir=tmp_path,
                                             deadline_s=0.5), 15)
    assert rec["check"]["status"] == "error" and took < 3
    assert "reading the BMC: not done within 0.5 s" in rec["problem"]


def test_the_sampler_of_a_trickling_bmc_stops_in_time_and_says_why(dell, certs):
    dell.trickle[f"{R}/Chassis"] = 0.2
    rec, took = _in_time(lambda: _sampled(dell, certs, 0.1, timeout_s=1, sample_s=2), 20)
    assert took < 8 and rec["count"] == 0
    assert f"GET {R}/Chassis: no complete answer within 1 s" in rec["problem"], rec
    assert "bmc.envelope.samples" in {v.metric for v in _verdicts(rec)["fail"]}


# --- 3. ten thousand fans; memory flat in the length of the run --------------------------

def test_ten_thousand_fans_are_refused_past_the_bound_and_the_record_stays_small(dell, certs):
    thermal = dell.res[f"{dell.chassis}/Thermal"]
    thermal["Fans"] = [{"MemberId": f"Fan.{i}", "Name": f"Fan{i}", "Reading": 9000,
                        "ReadingUnits": "RPM", "Status": {"Health": "OK", "State": "Enabled"}}
                       for i in range(10_000)]
    _power(dell)
    rec = _sampled(dell, certs, 0.5)
    assert rec["count"] >= 2 and len(json.dumps(rec)) < 200_000  # one such sample is 1.2 MB
    assert len(rec["summary"]["fans"]) == rf_env.MAX_LISTED == 256
    bad = {v.metric: v for v in _verdicts(rec)["fail"]}
    assert bad["bmc.envelope.refused_readings"].labels["sensor"] == (
        "Fans: 10000 listed, more than any chassis holds (256)")


def _retained(n: int, monkeypatch) -> tuple[int, int]:
    """(bytes the sampler holds, bytes of its record) after n samples of a 16-fan chassis."""
    sample = {"t": 0.0, "power_w": 6000.0, "inlet_c": 24.0, "exhaust_c": 50.0, "refused": [],
              "psus": [{"name": f"PS{i}", "serial": f"CN{i}", "health": "OK",
                        "state": "Enabled", "capacity_w": 2800.0, "output_w": 1000.0,
                        "input_w": 1060.0} for i in range(6)],
              "fans": [{"name": f"Fan{i}", "reading": 9000.0, "units": "RPM", "health": "OK",
                        "state": "Enabled"} for i in range(16)]}
    clock = iter(range(10**9))
    monkeypatch.setattr(envelope, "read", lambda c, ch, t: {
        **sample, "t": float(next(clock)), "power_w": 6000.0 + next(clock) % 97,
        "psus": [dict(p) for p in sample["psus"]], "fans": [dict(f) for f in sample["fans"]]})
    sampler = envelope.Sampler(node("gpu01", None, None))
    client = type("Client", (), {"bounded": lambda *a: contextlib.nullcontext()})()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(n):
            sampler._sample(client, [], "")
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    return held, len(json.dumps(sampler.stop()))


def test_memory_and_the_record_are_flat_in_the_length_of_the_run(monkeypatch):
    held_1k, size_1k = _retained(1_000, monkeypatch)
    held_10k, size_10k = _retained(10_000, monkeypatch)
    assert held_10k < held_1k * 1.5 + 20_000, (held_1k, held_10k)  # it grew 10x before
    assert size_10k <= size_1k * 1.05, (size_1k, size_10k)


# --- 12. negative watts ----------------------------------------------------------------

def test_a_negative_draw_is_refused_and_never_a_pass(dell, certs):
    # 2 x 3000 W: with one lost 3000 W; -5000 W read as a load ratio of -1.67 and passed
    power = _power(dell, draw=-5000, capacity=3000)
    dell.res[power]["PowerSupplies"] = dell.res[power]["PowerSupplies"][:2]
    rec = _sampled(dell, certs)
    got = _verdicts(rec)
    assert not [v for v in got.get("pass", []) if v.metric == "bmc.power.one_lost_load_ratio"]
    bad = {v.metric: v for v in got["fail"]}
    assert bad["bmc.power.one_lost_load_ratio"].value is None
    assert bad["bmc.envelope.refused_readings"].labels["sensor"] == (
        "chassis draw (PowerConsumedWatts): -5000 W is outside 0..30000 W")


@pytest.mark.parametrize("field,value,named", [
    ("PowerCapacityWatts", -2800, "PS1 Status capacity (PowerCapacityWatts): -2800 W"),
    ("PowerOutputWatts", 1e7, "PS1 Status output: 1e+07 W"),
])
def test_a_psu_reading_outside_its_range_is_refused_by_name(dell, certs, field, value, named):
    power = _power(dell)
    dell.res[power]["PowerSupplies"][0][field] = value
    rec = _sampled(dell, certs)
    bad = {v.metric: v for v in _verdicts(rec)["fail"]}
    assert bad["bmc.envelope.refused_readings"].labels["sensor"].startswith(named)


def test_an_inlet_of_900_c_is_refused_and_the_inlet_cannot_pass(dell, certs):
    _power(dell)
    temps = dell.res[f"{dell.chassis}/Thermal"]["Temperatures"]
    temps[0].update(ReadingCelsius=900, PhysicalContext="Intake")
    rec = _sampled(dell, certs)
    bad = {v.metric: v for v in _verdicts(rec)["fail"]}
    assert bad["bmc.inlet.peak_c"].value is None
    assert bad["bmc.envelope.refused_readings"].labels["sensor"] == (
        "intake air (System Board Inlet Temp): 900 C is outside -40..150 C")


# --- the lab's own BMC (rackready_lab/redfish) with its fault bmc-nan-reading -----------

@pytest.mark.parametrize("vendor", ["dell", "hpe"])
def test_the_lab_bmc_answering_nan_is_refused_by_name(tmp_path, vendor):
    from tests.unit.lab.test_bmc_integration import LabBmc

    lab_bmc = LabBmc(tmp_path / vendor, vendor)
    try:
        lab_bmc.fault("bmc-nan-reading")
        target = lab_bmc.node_entry()
        rec = envelope.Sampler(target, period_s=0.05).start()
        time.sleep(0.3)
        sampled = rec.stop()
        after = oob.collect(target, baseline_dir=lab_bmc.baseline, timeout=5,
                            envelope=sampled)
    finally:
        lab_bmc.stop()
    json.dumps(after, allow_nan=False)  # bmc.json is written
    bad = {v.metric: v for v in _verdicts(sampled)["fail"]}
    assert bad["bmc.envelope.refused_readings"].labels["sensor"] == (
        "chassis draw (PowerConsumedWatts): NaN is not a number")


def test_a_log_whose_next_page_is_itself_ends_the_read_at_once(dell, certs, tmp_path):
    """The log pages are walked by the inventory reader itself: the client refuses a page
    that names itself as the next one, whoever walks it."""
    dell.res[dell.sel_entries]["Members@odata.nextLink"] = dell.sel_entries
    rec, took = _in_time(lambda: oob.collect(node("gpu01", dell.address, str(certs[0])),
                                             timeout=5, baseline_dir=tmp_path), 20)
    assert rec["check"]["status"] == "error" and took < 5
    assert rec["problem"].endswith(f"collection {dell.sel_entries}: its next page is itself "
                                   "(a nextLink loop)")


def test_pages_that_link_in_a_circle_end_the_walk(dell, certs, tmp_path):
    dell.res[f"{R}/Chassis"]["Members@odata.nextLink"] = f"{R}/Chassis/more"
    dell.res[f"{R}/Chassis/more"] = {"Members": [],
                                     "Members@odata.nextLink": f"{R}/Chassis"}
    rec, _ = _in_time(lambda: oob.collect(node("gpu01", dell.address, str(certs[0])),
                                          timeout=5, baseline_dir=tmp_path), 20)
    assert rec["problem"].endswith(f"collection {R}/Chassis: its next page {R}/Chassis was "
                                   "read already (a nextLink loop)")


def test_a_bmc_answering_more_than_the_reads_byte_budget_ends_it(dell, certs, tmp_path,
                                                                 monkeypatch):
    monkeypatch.setattr(oob, "COLLECT_BYTES", 2_000)  # the real one: 512 MiB
    rec = oob.collect(node("gpu01", dell.address, str(certs[0])), timeout=5,
                      baseline_dir=tmp_path)
    assert rec["check"]["status"] == "error"
    assert rec["problem"].endswith("reading the BMC: more than its budget of bytes")


def test_a_number_json_cannot_hold_never_reaches_bmc_json(tmp_path):
    """The last guard: whatever brings a non-finite number into the record (an envelope
    kept by an older controller), the record is written and the check says so."""
    env = {"count": 0, "samples": [], "summary": {"samples": 0}, "period_s": float("nan")}
    rec = oob.collect(node("gpu01", None, None), baseline_dir=tmp_path, envelope=env)
    json.dumps(rec, allow_nan=False)
    assert rec["check"]["status"] == "error"
    assert "numbers from the BMC that JSON cannot hold were dropped (the first: " \
           "bmc.envelope.period_s)" in rec["problem"]


def test_a_first_answer_slower_than_the_whole_reads_deadline_is_cut_by_it(
        dell, certs, tmp_path, monkeypatch):
    """The deadline cuts the first request itself and the socket's timeout, set to what is
    left of it, fires before the watchdog (a loaded controller: the race the unit tier
    once lost): the read says the deadline, never that the BMC went unanswered for its
    5 s timeout. The watchdog is held off here so the socket's timeout always wins."""
    from rackready.redfish import client as rf_client

    class LateWatchdog(rf_client._Watchdog):
        def _fire(self) -> None:  # never cuts: the socket's own timeout ends the read
            return None

    monkeypatch.setattr(rf_client, "_Watchdog", LateWatchdog)
    dell.delay_s = 1.0
    rec, took = _in_time(lambda: oob.collect(node("gpu01", dell.address, str(certs[0])),
                                             timeout=5, baseline_dir=tmp_path,
                                             deadline_s=0.5), 15)
    assert rec["check"]["status"] == "error" and took < 3
    assert "reading the BMC: not done within 0.5 s" in rec["problem"], rec["problem"]
