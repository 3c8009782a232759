"""The lab BMC under load: chassis Power and Thermal follow the node's load fraction u,
the two under-load faults trip at u >= 0.5, and the load sampler (load.py) measures real
processes. The service runs as lab.up runs it (BmcService over HTTPS on 127.0.0.1, in a
thread), u set through its `load` callable or the state's load.override.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_lab_redfish import PASSWORD, USER, Bmc  # the lab BMC's own test harness

from rackready_lab.hwsim.state import build_state
from rackready_lab.redfish import envelope, server, store
from rackready_lab.redfish import load as lo
from rackready_lab.redfish import resources as rf
from rackready_lab.redfish.faults import apply_fault, heal
from rackready_lab.redfish.tree import build

PLATFORMS = {"dell": "xe9680-h200", "hpe": "dl380a-gen12-h200nvl"}
CHASSIS = {"dell": "/redfish/v1/Chassis/System.Embedded.1",
           "hpe": "/redfish/v1/Chassis/1"}
EVENT_LOG = {"dell": "/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Sel/Entries",
             "hpe": "/redfish/v1/Systems/1/LogServices/IML/Entries"}


class LoadedBmc(Bmc):
    """A lab BMC whose load fraction the test sets (self.u)."""

    def __init__(self, tmp: Path, vendor: str, **kw: Any) -> None:
        self.vendor = vendor
        self.u = 0.0
        kw.setdefault("load", lambda: self.u)
        super().__init__(tmp, PLATFORMS[vendor], **kw)
        self.chassis = CHASSIS[vendor]

    def power(self) -> dict[str, Any]:
        return self.get(f"{self.chassis}/Power")

    def thermal(self) -> dict[str, Any]:
        return self.get(f"{self.chassis}/Thermal")

    def events(self) -> list[dict[str, Any]]:
        return self.get(EVENT_LOG[self.vendor])["Members"]


@pytest.fixture(params=["dell", "hpe"])
def bmc(request, tmp_path):
    b = LoadedBmc(tmp_path, request.param)
    yield b
    b.stop()


def _outputs(power: dict[str, Any]) -> list[int]:
    return [p.get("PowerOutputWatts", p.get("LastPowerOutputWatts")) for p in
            power["PowerSupplies"]]


def _temp(thermal: dict[str, Any], context: str) -> dict[str, Any]:
    return next(t for t in thermal["Temperatures"] if t["PhysicalContext"] == context)


# --- readings follow the load ---------------------------------------------------------

def test_power_and_thermal_follow_the_load(bmc: LoadedBmc) -> None:
    p0, t0 = bmc.power(), bmc.thermal()
    bmc.u = 1.0
    p1, t1 = bmc.power(), bmc.thermal()
    gpus = bmc.hw["gpus"]
    gpu_rise = sum(g["power_limit_w"] - g["power_draw_w"] for g in gpus)
    draw0, draw1 = sum(_outputs(p0)), sum(_outputs(p1))
    # the GPUs make most of the rise; CPUs, fans and the rest add a share
    assert gpu_rise <= draw1 - draw0 <= 1.5 * gpu_rise, (draw0, draw1, gpu_rise)
    assert draw1 > 3 * draw0
    with store.locked(bmc.state_path) as state:
        assert draw1 == envelope.draw_w(state, 1.0) and draw0 == envelope.draw_w(state, 0.0)
    # every PSU healthy and carrying its share; full load within the PSUs less one
    psus = p1["PowerSupplies"]
    assert all(p["Status"]["Health"] == "OK" for p in psus)
    assert max(_outputs(p1)) - min(_outputs(p1)) <= 1
    caps = [p["PowerCapacityWatts"] for p in psus]
    assert draw1 <= sum(caps) - max(caps)
    consumed = p1["PowerControl"][0]["PowerConsumedWatts"]
    assert consumed == pytest.approx(draw1 / 0.94, abs=len(psus))  # the input: output / eff.
    assert consumed <= sum(caps) - max(caps)  # the AC input fits the PSUs less one, too
    if bmc.vendor == "dell":  # iDRAC: input and output per PSU, RPM fans
        assert sum(p["PowerInputWatts"] for p in psus) == consumed
        assert all("LastPowerOutputWatts" not in p for p in psus)
        assert {f["ReadingUnits"] for f in t1["Fans"]} == {"RPM"}
    else:  # iLO: the output only, fans in percent
        assert all("PowerInputWatts" not in p and "PowerOutputWatts" not in p for p in psus)
        assert {f["ReadingUnits"] for f in t1["Fans"]} == {"Percent"}
        assert all(f["Reading"] <= 100 for f in t1["Fans"])
    # thermal: inlet barely, exhaust strongly, fans up, GPUs toward 75-80 C
    assert 0 <= _temp(t1, "Intake")["ReadingCelsius"] - _temp(t0, "Intake")["ReadingCelsius"] <= 2
    assert _temp(t1, "Exhaust")["ReadingCelsius"] - _temp(t0, "Exhaust")["ReadingCelsius"] >= 15
    assert all(f1["Reading"] > 1.5 * f0["Reading"] for f0, f1 in zip(t0["Fans"], t1["Fans"],
                                                                     strict=True))
    gpu_temps = [t["ReadingCelsius"] for t in t1["Temperatures"] if t["PhysicalContext"] == "GPU"]
    assert len(gpu_temps) == len(gpus) and all(74 <= x <= 80 for x in gpu_temps)
    # a healthy loaded node stays below the BMC's own critical thresholds
    for t in t1["Temperatures"]:
        assert t["ReadingCelsius"] < t["UpperThresholdNonCritical"] < t["UpperThresholdCritical"]
        assert t["Status"]["Health"] == "OK"
    assert all(f["Reading"] > f["LowerThresholdNonCritical"] for f in t0["Fans"])


def test_ilo_thermal_subsystem_follows_the_load_and_the_faults(tmp_path: Path) -> None:
    b = LoadedBmc(tmp_path, "hpe")
    try:
        chassis = b.get(b.chassis)
        assert "ThermalSubsystem" in chassis
        sub = b.get(chassis["ThermalSubsystem"]["@odata.id"])

        def fans() -> list[dict[str, Any]]:
            return [b.get(m["@odata.id"]) for m in b.get(sub["Fans"]["@odata.id"])["Members"]]

        def metrics() -> dict[str, Any]:
            return b.get(sub["ThermalMetrics"]["@odata.id"])

        idle, idle_t = fans(), metrics()
        assert [f["Name"] for f in idle] == [f["Name"] for f in b.thermal()["Fans"]]
        name = b.fault("fan-fails-under-load", "Fan 2")["component"]["name"]
        b.u = 1.0
        full, full_t = fans(), metrics()
        legacy = {f["Name"]: f for f in b.thermal()["Fans"]}
        for f0, f1 in zip(idle, full, strict=True):
            assert f1["@odata.type"].startswith("#Fan.") and f1["Status"] == legacy[
                f1["Name"]]["Status"]
            if f1["Name"] == name:
                assert f1["SpeedPercent"]["Reading"] == 0 and f1["Status"]["Health"] == "Critical"
            else:
                assert f1["SpeedPercent"]["Reading"] == legacy[f1["Name"]]["Reading"] > \
                    f0["SpeedPercent"]["Reading"]
        exhaust = [[t["Reading"] for t in m["TemperatureReadingsCelsius"]
                    if t["PhysicalContext"] == "Exhaust"][0] for m in (idle_t, full_t)]
        assert exhaust[1] - exhaust[0] >= 15
        assert full_t["TemperatureSummaryCelsius"]["Ambient"]["Reading"] <= \
            idle_t["TemperatureSummaryCelsius"]["Ambient"]["Reading"] + 2
    finally:
        b.stop()


def test_rendering_is_deterministic_for_a_given_load(bmc: LoadedBmc) -> None:
    bmc.u = 0.37
    assert bmc.power() == bmc.power() and bmc.thermal() == bmc.thermal()
    half = sum(_outputs(bmc.power()))
    bmc.u = 0.0
    idle = sum(_outputs(bmc.power()))
    bmc.u = 1.0
    full = sum(_outputs(bmc.power()))
    assert idle < half < full
    assert half == round(idle + (full - idle) * 0.37)


def test_state_override_wins_and_plain_constructor_reads_idle(tmp_path: Path) -> None:
    b = LoadedBmc(tmp_path / "a", "dell")
    plain = LoadedBmc(tmp_path / "b", "dell", load=None)  # as the existing callers build it
    try:
        idle = sum(_outputs(b.power()))
        assert sum(_outputs(plain.power())) == idle  # no node, no callable: u = 0
        with store.locked(b.state_path) as state:
            state["load"]["override"] = 1.0
        full = sum(_outputs(b.power()))
        assert full > 3 * idle  # the callable still says 0: the override wins
        with store.locked(b.state_path) as state:
            state["load"]["override"] = None
        assert sum(_outputs(b.power())) == idle
    finally:
        b.stop()
        plain.stop()


def test_pure_render_takes_the_load() -> None:
    state = build(build_state("xe9680-h200", "lab-gpu01"))
    path = "/redfish/v1/Chassis/System.Embedded.1/Power"
    idle = rf.render(state, path)["PowerControl"][0]["PowerConsumedWatts"]
    assert rf.render(state, path, load=0.0)["PowerControl"][0]["PowerConsumedWatts"] == idle
    full = rf.render(state, path, load=1.0)["PowerControl"][0]["PowerConsumedWatts"]
    assert 2000 < idle < 3000 and 9000 < full < 10500  # XE9680, 8 x H200 at 700 W
    state["load"]["override"] = 1.0
    assert rf.render(state, path)["PowerControl"][0]["PowerConsumedWatts"] == full


# --- faults under load ---------------------------------------------------------------

def test_fan_fails_under_load(bmc: LoadedBmc) -> None:
    rec = bmc.fault("fan-fails-under-load")
    name = rec["component"]["name"]
    assert rec["component"]["type"] == "fan"

    def fan() -> dict[str, Any]:
        return next(f for f in bmc.thermal()["Fans"] if f["Name"] == name)

    assert fan()["Status"]["Health"] == "OK" and fan()["Reading"] > fan()["LowerThresholdCritical"]
    assert bmc.events() == []
    bmc.u = 1.0
    hot = fan()
    assert hot["Status"]["Health"] == "Critical"
    assert hot["Reading"] == 0 < hot["LowerThresholdCritical"]
    assert sum(f["Status"]["Health"] != "OK" for f in bmc.thermal()["Fans"]) == 1
    events = bmc.events()
    assert len(events) == 1 and events[0]["Severity"] == "Critical"
    assert name in events[0]["Message"]
    assert events[0]["MessageId"] == {"dell": "FAN0001", "hpe": "FanFailure"}[bmc.vendor]
    bmc.u = 0.2  # the load drops: it spins again; the entry stays
    assert fan()["Status"]["Health"] == "OK"
    bmc.u = 0.9
    assert fan()["Status"]["Health"] == "Critical"
    assert len(bmc.events()) == 1  # one entry, the first time only
    bmc.heal()
    assert fan()["Status"]["Health"] == "OK" and bmc.events() == []


def test_psu_fails_under_load(bmc: LoadedBmc) -> None:
    rec = bmc.fault("psu-fails-under-load")
    comp = rec["component"]
    n = len(bmc.power()["PowerSupplies"])
    assert comp["type"] == "psu" and comp["slot"] == n and comp["serial"]
    p0 = bmc.power()
    assert all(p["Status"]["Health"] == "OK" for p in p0["PowerSupplies"])
    assert p0["Redundancy"][0]["Status"]["Health"] == "OK" and bmc.events() == []
    bmc.u = 1.0
    p1 = bmc.power()
    psu = p1["PowerSupplies"][comp["slot"] - 1]
    assert psu["SerialNumber"] == comp["serial"] and psu["Name"] == comp["name"]
    assert psu["Status"]["Health"] == "Critical" and _outputs(p1)[comp["slot"] - 1] == 0
    others = [p for p in p1["PowerSupplies"] if p is not psu]
    assert all(p["Status"]["Health"] == "OK" for p in others)
    with store.locked(bmc.state_path) as state:
        assert sum(_outputs(p1)) == envelope.draw_w(state, 1.0)  # the others carry it all
    want = {"dell": "Critical", "hpe": "Warning"}[bmc.vendor]
    assert p1["Redundancy"][0]["Status"]["Health"] == want
    events = bmc.events()
    assert len(events) == 1 and events[0]["Severity"] == "Critical"
    assert events[0]["MessageId"] == {"dell": "PSU0001", "hpe": "PowerSupplyFailure"}[
        bmc.vendor]
    assert f"upply {comp['slot']}" in events[0]["Message"]
    bmc.power()
    assert len(bmc.events()) == 1
    bmc.heal()
    p2 = bmc.power()
    assert all(p["Status"]["Health"] == "OK" for p in p2["PowerSupplies"])
    assert p2["Redundancy"][0]["Status"]["Health"] == "OK" and bmc.events() == []
    assert min(_outputs(p2)) > 0


def test_under_load_fault_logs_even_unread(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(server, "LOAD_PERIOD_S", 0.05)
    b = LoadedBmc(tmp_path, "hpe")
    try:
        b.fault("psu-fails-under-load", "2")
        b.u = 1.0  # nobody reads Power: the BMC's own watch logs it
        deadline = time.monotonic() + 5
        entries: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not entries:
            time.sleep(0.05)
            entries = json.loads(b.state_path.read_text())["logs"]["IML"]
        assert len(entries) == 1 and "Power Supply 2" in entries[0]["Message"]
    finally:
        b.stop()


def test_under_load_faults_are_healed_in_pure_state() -> None:
    base = build(build_state("dl380a-gen12-h200nvl", "lab-gpu01"))
    with pytest.raises(ValueError, match="Fan 99"):
        apply_fault(base, "fan-fails-under-load", "Fan 99")
    with pytest.raises(ValueError, match="power supply '9'"):
        apply_fault(base, "psu-fails-under-load", "9")
    faulted = apply_fault(apply_fault(base, "fan-fails-under-load", "Fan 3"),
                          "psu-fails-under-load", "1")
    assert envelope.observe(faulted, 0.49) == []
    assert len(envelope.observe(faulted, 0.5)) == 2 and envelope.observe(faulted, 1.0) == []
    healed = heal(faulted)
    assert healed["logs"] == base["logs"] and healed["faults"] == []
    assert healed["resources"] == base["resources"]


# --- the load sampler ------------------------------------------------------------------

def test_parse_stat_and_rate_to_load() -> None:
    line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 1 2 3 4 250 50 7 3 20 0 1 0 99 0 0"
    assert lo.parse_stat(line) == (17, 250 + 50 + 7 + 3)
    assert lo.rate_to_load(0.0) == 0.0 == lo.rate_to_load(lo.IDLE_CPU)
    assert lo.rate_to_load(lo.FULL_CPU) == 1.0 == lo.rate_to_load(2.0)
    assert lo.rate_to_load((lo.IDLE_CPU + lo.FULL_CPU) / 2) == pytest.approx(0.5)


def _fake_proc(root: Path, procs: dict[int, tuple[int, str, int]]) -> Path:
    """A /proc with pid -> (ppid, pid namespace, ticks)."""
    for pid, (ppid, ns, ticks) in procs.items():
        d = root / str(pid)
        (d / "ns").mkdir(parents=True)
        (d / "ns" / "pid").symlink_to(ns)
        (d / "stat").write_text(f"{pid} (p {pid}) S {ppid} 1 1 0 -1 0 0 0 0 0 {ticks} 0 0 0 "
                                "20 0 1 0 1 0 0\n")
    return root


def test_container_namespace_is_found_below_nspawn(tmp_path: Path) -> None:
    host, node = "pid:[4026531836]", "pid:[4026532999]"
    proc = _fake_proc(tmp_path / "proc", {
        1: (0, host, 5), 300: (1, host, 7),          # the host's init, nspawn
        301: (300, host, 1),                         # nspawn's outer child, still the host's
        302: (301, node, 40), 310: (302, node, 60),  # the container's init and a service
        400: (1, host, 999),                         # someone else
    })
    assert lo.container_ns(300, proc) == node
    assert lo.container_ns(400, proc) is None
    assert sorted(lo.ns_pids(node, proc)) == [302, 310]
    pidfile = tmp_path / "nspawn.pid"
    pids = lo.node_pids(pidfile, proc)
    assert pids() == []  # node down
    pidfile.write_text("300")
    assert sorted(pids()) == [302, 310]
    assert lo.cpu_seconds(pids(), proc) == pytest.approx(100 / lo.CLK_TCK)


def _spawn(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)


def test_namespace_scan_on_this_process_namespace() -> None:
    child = _spawn("import time; time.sleep(30)")
    try:
        ns = lo.pid_ns(os.getpid())
        assert ns and ns.startswith("pid:[")
        assert lo.pid_ns(child.pid) == ns
        pids = lo.ns_pids(ns)
        assert os.getpid() in pids and child.pid in pids
        assert lo.cpu_seconds([os.getpid()]) > 0
        assert lo.cpu_seconds([2**22 + 7]) == 0  # no such process
    finally:
        child.kill()
        child.wait()


def test_a_busy_process_raises_the_measured_load() -> None:
    busy = _spawn("while True: pass")
    idle = _spawn("import time; time.sleep(30)")
    try:
        hot = lo.LoadSampler(lambda: [busy.pid])
        cold = lo.LoadSampler(lambda: [idle.pid])
        time.sleep(0.2)  # past interpreter start
        hot.sample(), cold.sample()
        time.sleep(0.8)
        hot.sample(), cold.sample()
        assert hot.rate > 0.2 and hot.u > 0.3, hot.rate  # a whole CPU, shared with CI
        assert cold.rate < 0.05 and cold.u == 0.0
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()


def test_a_worker_that_came_and_went_still_counts() -> None:
    # the shell waits for a short busy worker: its time lands in the shell's cutime
    sh = subprocess.Popen(["sh", "-c", f"{sys.executable} -c 'import time\n"
                           "t = time.time()\nwhile time.time() - t < 0.5: pass'; sleep 30"])
    try:
        sampler = lo.LoadSampler(lambda: [sh.pid])
        sampler.sample()
        time.sleep(1.2)
        sampler.sample()
        assert sampler.rate > 0.1, sampler.rate
    finally:
        sh.kill()
        sh.wait()


def test_the_sampler_thread_runs_and_stops() -> None:
    busy = _spawn("while True: pass")
    try:
        sampler = lo.LoadSampler(lambda: [busy.pid], period=0.1).start()
        deadline = time.monotonic() + 5
        while sampler.u == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        sampler.stop()
        assert sampler.u > 0
    finally:
        busy.kill()
        busy.wait()


# --- what the controller's out-of-band reading makes of it -----------------------------

@pytest.mark.parametrize("kind,metric,label", [
    (None, None, None),
    ("fan-fails-under-load", "bmc.fan.health", "fan"),
    ("psu-fails-under-load", "bmc.psu.health", "psu"),
])
def test_validate_at_full_load(bmc: LoadedBmc, kind: str | None, metric: str | None,
                               label: str | None) -> None:
    """At u = 1 a healthy node passes the lab profile's BMC checks (temperature margins
    included); a node with an under-load fault fails naming the part."""
    from rackready.site.bmc import BmcAccess, Secret
    from rackready.site.inventory import Node
    from rackready.steps import envelope, oob
    from validation.judge import judge
    from validation.model import CheckResult
    from validation.profile import load_profile

    platform = PLATFORMS[bmc.vendor]
    access = BmcAccess(f"127.0.0.1:{bmc.service.port}", USER, Secret(PASSWORD),
                       str(bmc.cafile))
    node = Node(name="lab-gpu01", address="10.213.7.11", profile=f"{platform}-lab",
                platform=platform, fabric="ib", user="rradmin", port=22, key_file=None,
                known_hosts=None, sysroot="/", lab=True, bmc=lambda: access)
    comp = bmc.fault(kind)["component"] if kind else None
    bmc.u = 1.0
    rec = oob.collect(node, baseline_dir=bmc.state_path.parent / "baseline", timeout=5)
    verdicts = judge([CheckResult.from_dict(rec["check"])], load_profile(f"{platform}-lab"))
    # the BIOS is not provisioned here (test_bmc_integration does that), and the envelope is
    # measured only while a suite runs (rackready.steps.envelope): their verdicts aside
    failing = [v for v in verdicts if v.outcome == "fail"
               and v.metric != "bmc.bios.matches_profile" and v.metric not in envelope.METRICS]
    margins = [v for v in verdicts if v.metric == "bmc.temperature.margin"]
    assert margins and all(v.outcome == "pass" for v in margins)
    if comp is None:
        assert rec["check"]["status"] == "ok" and failing == [], failing
        return
    hits = [v for v in failing if v.metric == metric]
    assert len(hits) == 1 and comp["name"] in hits[0].labels[label], failing
    assert any(v.metric == "bmc.log.critical_new" for v in failing)


def test_node_sampler_measures_a_real_pid_namespace(tmp_path: Path) -> None:
    """As lab.up's BMC measures a node: a pid file naming the parent of a process in its
    own PID namespace (unshare stands for systemd-nspawn; an unprivileged user namespace
    lets it run without root), a busy loop inside -> u rises."""
    import shutil

    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) here to make a PID namespace without root")
    # --kill-child: the busy loop is the namespace's init, which a plain kill of unshare
    # would leave running
    outer = subprocess.Popen(["unshare", "-Urp", "--kill-child", sys.executable, "-c",
                              "while True: pass"],
                             stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    inner: list[int] = []
    try:
        deadline = time.monotonic() + 5
        ns = None
        while ns is None and time.monotonic() < deadline and outer.poll() is None:
            time.sleep(0.05)
            ns = lo.container_ns(outer.pid)
        if ns is None:
            err = outer.stderr.read().decode() if outer.poll() is not None else "no child"
            pytest.skip(f"unprivileged PID namespaces not available here: {err.strip()}")
        assert ns != lo.pid_ns(os.getpid())
        pidfile = tmp_path / "nspawn.pid"
        pidfile.write_text(str(outer.pid))
        pids = lo.node_pids(pidfile)
        inner = pids()
        assert inner and outer.pid not in inner  # only the namespace's own processes
        sampler = lo.LoadSampler(pids)
        sampler.sample()
        time.sleep(0.8)
        assert sampler.sample() > 0.3 and sampler.rate > 0.2, sampler.rate
    finally:
        for pid in inner:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        outer.kill()
        outer.wait()
