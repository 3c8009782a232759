"""The out-of-band step of `invoke validate`: read each node's BMC through Redfish.

Runs on the controller (the BMC is out of band), one node at a time per worker, next
to the node's SSH session. It measures (firmware versions, PSU redundancy and health,
fans, temperatures and voltages against the BMC's own thresholds, new critical log
entries since provisioning, power-on hours) and records the node's identity and a
"before handoff" log excerpt; it decides nothing. The measurements form the check
`bmc`, judged by the same judge as every node check (rackready.decide.node) against the
profile's thresholds; a profile that `requires: [bmc]` fails a node whose BMC could
not be read (no address, unreachable, wrong password), with the reason in one line.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from pathlib import Path
from typing import Any

import yaml

from rackready.decide.node import BMC_CHECK
from rackready.errors import UserError
from rackready.redfish.bios import read_state
from rackready.redfish.client import Client, RedfishError
from rackready.redfish.inventory import EXCERPT, gather
from rackready.run.rundir import now_iso
from rackready.sanitize import one_line
from rackready.site.bmc import NO_ADDRESS, BmcAccess
from rackready.site.inventory import Node
from rackready.site.paths import PROJECT_ROOT
from rackready.steps.envelope import measurements as envelope_measurements
from validation.model import CheckResult, Measurement

CHECK = BMC_CHECK
# Where the bios role records each node's provisioning time (the BMC's clock).
BASELINE_DIR = PROJECT_ROOT / "artifacts" / "bmc"
# The bios role's profiles: validation judges the BIOS against the same data.
BIOS_PROFILES = PROJECT_ROOT / "roles" / "bios" / "profiles"
_WORST = {"Critical": 3, "Warning": 2, "unknown": 1, "OK": 0}
# The whole out-of-band read (login, identity, firmware, sensors, every log page) within one
# deadline: a real iDRAC answers a GET in 0.1-1 s and the read is a few hundred of them.
COLLECT_S = 600.0
# ... and one byte budget: a 2000-entry log is about 2 MB, a whole read tens of MB.
COLLECT_BYTES = 512 * 1024 * 1024
_NOT_PRESENT = {"Absent", "Disabled", "StandbyOffline", "UnavailableOffline"}


def _time(text: str) -> dt.datetime | None:
    try:
        t = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def provisioned_at(node: str, folder: Path = BASELINE_DIR) -> tuple[str | None, str]:
    """(BMC time of the last provisioning, where it came from)."""
    path = folder / f"{node}.json"
    try:
        value = json.loads(path.read_text()).get("bmc_time")
    except (OSError, ValueError, AttributeError):
        return None, "no provisioning time recorded (bios role): every entry counts"
    if not value or _time(str(value)) is None:
        return None, f"{path.name} holds no usable time: every entry counts"
    return str(value), f"provisioning recorded by the bios role ({path.name})"


def _num(v: Any) -> float | None:
    """A finite number, or None (the client hands NaN and 1e999 on as the BMC's text)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return None
    x = float(v) if abs(v) < 1e300 else math.inf
    return x if math.isfinite(x) else None


def measurements(data: dict[str, Any], since: str | None) -> list[Measurement]:
    """Redfish data -> measurements (no opinions: thresholds come from the profile)."""
    out: list[Measurement] = []
    for fw in data.get("firmware") or []:
        out.append(Measurement("bmc.firmware.version", fw["version"], "",
                               {"component": fw["class"], "item": fw["name"]}))
    groups = data.get("redundancy") or []
    worst = max(groups, key=lambda h: _WORST.get(h, 1)) if groups else "not reported"
    out.append(Measurement("bmc.psu.redundancy", worst, ""))
    for p in data.get("psus") or []:
        # the name carries the slot (iDRAC "PS6 Status", iLO "... Supply 4"); the serial is
        # what an RMA needs
        psu = p["name"] + (f" serial {p['serial']}" if p.get("serial") else "")
        out.append(Measurement("bmc.psu.health", p["health"], "", {"psu": psu}))
    for f in data.get("fans") or []:
        if f.get("state") in _NOT_PRESENT - {"Absent"}:
            continue
        out.append(Measurement("bmc.fan.health", f["health"], "", {"fan": f["name"]}))
    for t in data.get("temperatures") or []:
        if t.get("state") in _NOT_PRESENT:
            continue
        labels = {"sensor": t["name"]}
        out.append(Measurement("bmc.sensor.health", t["health"], "", labels))
        reading, upper = _num(t.get("reading")), _num(t.get("upper"))
        if reading is not None and upper is not None:
            out.append(Measurement("bmc.temperature.margin", round(upper - reading, 2), "C",
                                   labels))
    limited = 0  # a probe fact: none where the BMC lists no voltage with a limit (iLO)
    for v in data.get("voltages") or []:
        if v.get("state") in _NOT_PRESENT:
            continue
        labels = {"sensor": v["name"]}
        out.append(Measurement("bmc.sensor.health", v["health"], "", labels))
        reading, lo, hi = _num(v.get("reading")), _num(v.get("lower")), _num(v.get("upper"))
        limited += lo is not None or hi is not None
        if reading is not None and (lo is not None or hi is not None):
            ok = (lo is None or reading >= lo) and (hi is None or reading <= hi)
            out.append(Measurement("bmc.voltage.in_range", ok, "", labels))
    out.append(Measurement("bmc.voltage.sensors", limited, ""))
    for log, entries in _new_critical(data, since).items():
        labels = {"log": log}
        if entries:
            e = entries[0]
            labels["entry"] = one_line(f"{e['id']} at {e['created']}: {e['message']}"
                                       + (f" ({e['sensor']})" if e.get("sensor") else ""), 200)
        out.append(Measurement("bmc.log.critical_new", len(entries), "", labels))
    for attr, (want, have) in sorted((data.get("bios_profile") or {}).items()):
        out.append(Measurement("bmc.bios.matches_profile", _same(have, want), "",
                               {"bios": f"{attr} is {have}, profile {want}"}))
    hours = (data.get("system") or {}).get("power_on_hours")
    if hours is not None:
        out.append(Measurement("bmc.power_on_hours", hours, "h"))
    return out


def _same(have: Any, want: Any) -> bool:
    return have is not None and str(have).strip().lower() == str(want).strip().lower()


def bios_profile(node: Node) -> tuple[dict[str, Any], str]:
    """The BIOS settings the bios role applies to this node (its profile's `set` and
    `implied`, with the site's bios_attributes_override): the role's own data, not a copy."""
    name = (node.platform or "").split("-")[0]
    path = BIOS_PROFILES / f"{name}.yml"
    if not name or not path.is_file():
        return {}, f"no BIOS profile for platform {node.platform!r}"
    data = yaml.safe_load(path.read_text()) or {}
    want = {k: v["value"] for part in ("set", "implied")
            for k, v in (data.get(part) or {}).items()}
    override = (node.provisioned or {}).get("bios_attributes_override")
    if isinstance(override, dict):
        want.update(override)
    return want, f"roles/bios/profiles/{name}.yml"


def _new_critical(data: dict[str, Any], since: str | None) -> dict[str, list[dict[str, Any]]]:
    """Per log service: its critical entries newer than `since` (all of them without it)."""
    start = _time(since) if since else None
    # every log service read counts, an empty one too (0 new entries is a measurement)
    out: dict[str, list[dict[str, Any]]] = {
        str(uri).rstrip("/").rsplit("/", 1)[-1]: [] for uri in data.get("log_services") or []}
    for e in data.get("logs") or []:
        bucket = out.setdefault(e["log"], [])
        if e.get("severity") != "Critical":
            continue
        created = _time(e.get("created", ""))
        if start is not None and created is not None and created <= start:
            continue
        bucket.append(e)
    return out


def excerpt(data: dict[str, Any], since: str | None, n: int = EXCERPT) -> list[dict[str, str]]:
    """The "before handoff" log excerpt: the newest entries since provisioning."""
    start = _time(since) if since else None
    rows = [e for e in data.get("logs") or []
            if start is None or (_time(e.get("created", "")) or start) > start]
    rows.sort(key=lambda e: _time(e.get("created", "")) or dt.datetime.min.replace(
        tzinfo=dt.timezone.utc))
    return [{k: str(e.get(k, "")) for k in ("log", "id", "created", "severity", "message",
                                             "sensor")} for e in rows[-n:]]


def identity(data: dict[str, Any]) -> dict[str, Any]:
    s = data.get("system") or {}
    mgr = (data.get("managers") or [{}])[0]
    main: dict[str, Any] = next((c for c in data.get("chassis") or [] if c.get("serial")), {})
    return {
        "manufacturer": s.get("manufacturer", ""), "model": s.get("model", ""),
        "serial": s.get("serial", ""), "service_tag": s.get("sku", ""),
        "chassis_model": main.get("model", ""), "chassis_serial": main.get("serial", ""),
        "bios_version": s.get("bios_version", ""),
        "bmc": f"{mgr.get('model', '')} {mgr.get('firmware', '')}".strip(),
        "power_on_hours": s.get("power_on_hours"),
        "firmware": [{"component": f["class"], "name": f["name"], "version": f["version"]}
                     for f in data.get("firmware") or []],
        "psus": [{"name": p["name"], "model": p["model"], "serial": p["serial"],
                  "firmware": p["firmware"]} for p in data.get("psus") or []],
        # compared with the serials the node reports (rackready.decide.integrity)
        "gpus": list(data.get("gpus") or []),
    }


def bios_attributes(client: Client) -> dict[str, Any]:
    """The BIOS settings in force (pending ones are not: they wait for a reboot)."""
    return read_state(client).current


def collect(node: Node, *, timeout: float = 30.0, baseline_dir: Path = BASELINE_DIR,
            envelope: dict[str, Any] | None = None,
            deadline_s: float = COLLECT_S) -> dict[str, Any]:
    """One node's out-of-band record (bmc.json). Never raises for the node's trouble, nor
    for the BMC's: a read past deadline_s is an error naming it, and the record is always
    one JSON can hold.
    envelope: what rackready.steps.envelope sampled while the node's suite ran (validate
    always passes it: no readings is then 0 samples, which the profile fails); its
    measurements join the check."""
    started, t0 = now_iso(), time.monotonic()
    rec: dict[str, Any] = {"node": node.name, "started": started, "address": None,
                           "since": None, "since_source": "", "identity": {},
                           "log_excerpt": [], "problem": ""}
    status, found, secret = "ok", [], ""
    try:
        access: BmcAccess | None = node.bmc() if node.bmc else None
        if access is None:
            status, rec["problem"] = "skipped", NO_ADDRESS
        else:
            secret = access.password.reveal()
            rec["address"] = access.address
            since, source = provisioned_at(node.name, baseline_dir)
            rec["since"], rec["since_source"] = since, source
            want, rec["bios_profile"] = bios_profile(node)
            client = Client(access.address, access.user, secret, ca_file=access.ca_file,
                            insecure_skip_verify=access.insecure_skip_verify, timeout=timeout,
                            node=node.name)
            with client.bounded(deadline_s, "reading the BMC", COLLECT_BYTES), client:
                data = gather(client)
                if want:
                    current = bios_attributes(client)
                    data["bios_profile"] = {k: (v, current.get(k)) for k, v in want.items()}
            found = measurements(data, since)
            if envelope is not None:
                found += envelope_measurements(envelope)
            rec["identity"] = identity(data)
            rec["log_excerpt"] = excerpt(data, since)
    except (UserError, RedfishError) as exc:
        status, rec["problem"] = "error", one_line(str(exc))
    except Exception as exc:  # noqa: BLE001  one BMC's surprise must not stop the rack
        status = "error"
        rec["problem"] = one_line(f"controller error reading the BMC: {type(exc).__name__}: "
                                  f"{exc}")
    if secret:  # last guard: the password never reaches a file
        rec["problem"] = rec["problem"].replace(secret, "********")
    if envelope is not None:
        rec["envelope"] = envelope
    rec["finished"] = now_iso()
    rec["check"] = CheckResult(check=CHECK, status=status,  # type: ignore[arg-type]
                               duration_s=time.monotonic() - t0, measurements=tuple(found),
                               message=rec["problem"], needs=(CHECK,)).to_dict()
    return _writable(rec)


def _writable(rec: dict[str, Any]) -> dict[str, Any]:
    """The record with every number JSON can hold (a last guard: readings are checked where
    they are read); a number it cannot is dropped, and the check says so."""
    dropped: list[str] = []

    def clean(v: Any, where: str) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            dropped.append(where)
            return None
        if isinstance(v, dict):
            return {k: clean(x, f"{where}.{k}") for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x, f"{where}[{i}]") for i, x in enumerate(v)]
        return v

    out = clean(rec, "bmc")
    if dropped:
        why = one_line(f"{len(dropped)} numbers from the BMC that JSON cannot hold were "
                       f"dropped (the first: {dropped[0]})")
        out["problem"] = "; ".join(x for x in (out["problem"], why) if x)
        out["check"].update(status="error", message=out["problem"])
    return out
