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
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rackready.errors import UserError
from rackready.redfish.client import Client, RedfishError
from rackready.redfish.envelope import discover, one_lost_capacity, read, summarize, thin
from rackready.sanitize import one_line
from rackready.site.bmc import NO_ADDRESS, BmcAccess
from rackready.site.inventory import Node
from validation.model import Measurement

PERIOD_S = 2.0


@dataclass
class Sampler:
    """Reads the node's BMC every period_s in a thread, between start() and stop()."""
    node: Node
    period_s: float = PERIOD_S
    timeout_s: float = 10.0
    samples: list[dict[str, Any]] = field(default_factory=list)
    problem: str = ""
    failed_reads: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _t0: float = 0.0

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
            with Client(access.address, access.user, secret, ca_file=access.ca_file,
                        insecure_skip_verify=access.insecure_skip_verify,
                        timeout=self.timeout_s, node=self.node.name) as client:
                chassis = discover(client)
                while True:
                    self._sample(client, chassis, secret)
                    if self._stop.wait(self.period_s):
                        self._sample(client, chassis, secret)  # the last reading, at the end
                        return
        except (RedfishError, UserError, OSError) as exc:
            self.problem = _scrub(str(exc), secret)
        except Exception as exc:  # noqa: BLE001  a BMC's surprise ends the sampling, in words
            self.problem = _scrub(f"controller error reading the BMC: {type(exc).__name__}: "
                                  f"{exc}", secret)

    def _sample(self, client: Client, chassis: list[Any], secret: str) -> None:
        try:
            self.samples.append(read(client, chassis, time.monotonic() - self._t0))
        except RedfishError as exc:  # one failed read must not end the sampling
            self.failed_reads += 1
            self.problem = _scrub(str(exc), secret)

    def stop(self) -> dict[str, Any]:
        """The record bmc.json keeps ("envelope")."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s * 3 + self.period_s)
        return {"period_s": self.period_s, "count": len(self.samples),
                "failed_reads": self.failed_reads, "problem": self.problem,
                "samples": thin(self.samples), "summary": summarize(self.samples)}


def _scrub(text: str, secret: str) -> str:
    """One line, the password never in it (a last guard: messages are built without it)."""
    line = one_line(text)
    return line.replace(secret, "********") if secret else line


def measurements(envelope: dict[str, Any] | None) -> list[Measurement]:
    """The envelope's numbers for the check `bmc`; opinions come from the profile."""
    if not envelope:
        return [Measurement("bmc.envelope.samples", 0, "")]
    summ = envelope.get("summary") or summarize(envelope.get("samples") or [])
    out = [Measurement("bmc.envelope.samples", summ["samples"], "")]
    if not summ["samples"]:
        return out
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
