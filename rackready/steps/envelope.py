"""The power and thermal envelope: the node's BMC sampled while its suite runs.

A loaded 8-GPU node draws several kW; whether its power supplies still carry that with
one of them lost, and whether its fans and inlet air hold under it, shows only under load,
and only out of band. So while the node's SSH session runs (the burn-in in it), a thread
on the controller reads the chassis through Redfish every PERIOD_S (rackready.redfish.
envelope: draw, each PSU's capacity, output and health, inlet and exhaust temperatures,
each fan's speed and health).

The samples become measurements of the check `bmc` (rackready.steps.oob adds them), judged
by the profile like every other number; nothing here decides. A BMC that could not be
read while the suite ran yields `bmc.envelope.samples` = 0, which the profile fails.

The BMC is untrusted: each sample is one read under one deadline (SAMPLE_S), each request
within timeout_s however slowly it answers; a sample is reduced as it arrives
(rackready.redfish.envelope.Reduction), so the record and the memory stay the same size
over an hour or a 12 h burn-in; a reading refused (not a number, outside its physical
range) is counted and named in `bmc.envelope.refused_readings`, which the profile fails.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rackready.errors import UserError
from rackready.redfish.client import Client, RedfishError
from rackready.redfish.envelope import Reduction, discover, one_lost_capacity, read, summarize
from rackready.sanitize import one_line
from rackready.site.bmc import NO_ADDRESS, BmcAccess
from rackready.site.inventory import Node
from validation.model import Measurement

PERIOD_S = 2.0
# One sample (every chassis's power and thermal resources: 3-30 requests) within this, and
# the login with finding the resources within DISCOVER_S; a BMC slower than that is a
# failed read, named, and the sampling goes on.
SAMPLE_S = 30.0
DISCOVER_S = 60.0
# Bytes one sample may read: a chassis's Power and Thermal are tens of KiB.
SAMPLE_BYTES = 32 * 1024 * 1024


@dataclass
class Sampler:
    """Reads the node's BMC every period_s in a thread, between start() and stop()."""
    node: Node
    period_s: float = PERIOD_S
    timeout_s: float = 10.0
    sample_s: float = SAMPLE_S
    reduction: Reduction = field(default_factory=Reduction)
    problem: str = ""
    failed_reads: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    _t0: float = 0.0
    _closed: bool = False

    def start(self) -> Sampler:
        self._t0 = time.monotonic()
        try:
            access: BmcAccess | None = self.node.bmc() if self.node.bmc else None
        except UserError as exc:
            self.problem = one_line(str(exc))
            return self
        if access is None:
            self.problem = NO_ADDRESS
            return self
        self._thread = threading.Thread(target=self._loop, args=(access,), daemon=True,
                                        name=f"envelope-{self.node.name}")
        self._thread.start()
        return self

    def _loop(self, access: BmcAccess) -> None:
        secret = access.password.reveal()
        try:
            client = Client(access.address, access.user, secret, ca_file=access.ca_file,
                            insecure_skip_verify=access.insecure_skip_verify,
                            timeout=self.timeout_s, node=self.node.name)
            with client.bounded(DISCOVER_S, "logging in and finding the chassis readings"):
                client.login()
                chassis = discover(client)
            try:
                while True:
                    self._sample(client, chassis, secret)
                    if self._stop.wait(self.period_s):
                        self._sample(client, chassis, secret)  # the last reading, at the end
                        return
            finally:
                with client.bounded(self.timeout_s, "logging out"):
                    client.logout()
        except (RedfishError, UserError, OSError) as exc:
            self._said(_scrub(str(exc), secret))
        except Exception as exc:  # noqa: BLE001  a BMC's surprise ends the sampling, in words
            self._said(_scrub(f"controller error reading the BMC: {type(exc).__name__}: "
                              f"{exc}", secret))

    def _said(self, problem: str, failed: int = 0) -> None:
        with self._lock:
            if not self._closed:  # a read that outlived stop() changes no record
                self.problem = problem
                self.failed_reads += failed

    def _sample(self, client: Client, chassis: list[Any], secret: str) -> None:
        try:
            with client.bounded(self.sample_s, "one reading of the chassis", SAMPLE_BYTES):
                sample = read(client, chassis, time.monotonic() - self._t0)
        except RedfishError as exc:  # one failed read must not end the sampling
            self._said(_scrub(str(exc), secret), failed=1)
            return
        with self._lock:
            if not self._closed:
                self.reduction.add(sample)  # reduced now: no sample is kept whole

    @property
    def samples(self) -> int:
        return self.reduction.count

    def stop(self) -> dict[str, Any]:
        """The record bmc.json keeps ("envelope"): what was read until now, whether or not
        a read still under way ends in time."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.sample_s + self.timeout_s + self.period_s)
        with self._lock:
            self._closed = True
            r = self.reduction
            return {"period_s": self.period_s, "count": r.count,
                    "failed_reads": self.failed_reads, "problem": self.problem,
                    "samples": r.points(), "fan_units": r.fan_units, "summary": r.summary()}


def _scrub(text: str, secret: str) -> str:
    """One line, the password never in it (a last guard: messages are built without it)."""
    line = one_line(text)
    return line.replace(secret, "********") if secret else line


# what the sampler measures while a node's suite runs: a BMC read alone has none of these
METRICS = ("bmc.envelope.samples", "bmc.envelope.refused_readings", "bmc.power.peak_w",
           "bmc.power.one_lost_load_ratio", "bmc.inlet.peak_c", "bmc.exhaust.peak_c",
           "bmc.psu.health_under_load", "bmc.fan.health_under_load")


def measurements(envelope: dict[str, Any] | None) -> list[Measurement]:
    """The envelope's numbers for the check `bmc`; opinions come from the profile."""
    if not envelope:
        return [Measurement("bmc.envelope.samples", 0, "")]
    summ = envelope.get("summary") or summarize(envelope.get("samples") or [])
    out = [Measurement("bmc.envelope.samples", summ["samples"], "")]
    if not summ["samples"]:
        return out
    refused = summ.get("refused") or []
    first = (f"{refused[0]['reading']}: {refused[0]['said']}"
             + (f" (and {len(refused) - 1} more)" if len(refused) > 1 else "")) if refused else ""
    out.append(Measurement("bmc.envelope.refused_readings", summ.get("refused_count", 0), "",
                           {"sensor": first} if first else {}))
    peak = summ["peak_power_w"]
    out.append(Measurement("bmc.power.peak_w", peak, "W"))
    capacity, how = one_lost_capacity(summ["psus"])
    ratio = round(peak / capacity, 4) if peak is not None and capacity else None
    out.append(Measurement("bmc.power.one_lost_load_ratio", ratio, "", {"psus": how}))
    out.append(Measurement("bmc.inlet.peak_c", summ["peak_inlet_c"], "C"))
    if summ["peak_exhaust_c"] is not None:
        out.append(Measurement("bmc.exhaust.peak_c", summ["peak_exhaust_c"], "C"))
    for name, p in sorted(summ["psus"].items()):
        psu = name + (f" serial {p['serial']}" if p.get("serial") else "")
        out.append(Measurement("bmc.psu.health_under_load", p["health"], "", {"psu": psu}))
    for name, f in sorted(summ["fans"].items()):  # its lowest speed is in the plot's data
        out.append(Measurement("bmc.fan.health_under_load", f["health"], "", {"fan": name}))
    return out
