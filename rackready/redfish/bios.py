"""BIOS settings through Redfish: read, compare with a profile, apply only the differences.

Found by following links: /redfish/v1 -> Systems members -> Bios ->
@Redfish.Settings.SettingsObject (the pending-settings resource). Vendor facts
used, and only these: Dell iDRAC9 makes a JID_ job (Managers/<id>/Jobs) for an
OnReset BIOS change, JobState Scheduled/Running/Completed/Failed; HPE iLO 6 keeps
pending values in Bios/settings and applies them at the next reboot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from rackready.redfish.client import Client, RedfishError, link, members

# Job / task states that are still going to do something.
TERMINAL_JOB = {"completed", "failed", "completedwitherrors", "cancelled", "canceled",
                "killed", "exception", "interrupted", "aborted"}
FAILED_JOB = {"failed", "completedwitherrors", "killed", "exception", "aborted"}


@dataclass
class Job:
    uri: str
    id: str
    name: str
    state: str
    kind: str = ""  # Dell JobType (BIOSConfiguration, ...) or "task"
    message: str = ""

    @property
    def pending(self) -> bool:
        return self.state.lower() not in TERMINAL_JOB

    def words(self) -> str:
        return f"{self.id} ({self.name or self.kind}, {self.state})"


@dataclass
class BiosState:
    system: str
    bios_uri: str
    settings_uri: str
    current: dict[str, Any]
    pending: dict[str, Any]  # what the settings object holds that differs from current
    apply_times: list[str]


@dataclass
class Plan:
    to_set: dict[str, Any] = field(default_factory=dict)  # desired values not yet set/pending
    pending_ok: dict[str, Any] = field(default_factory=dict)  # already waiting for a reboot
    current_ok: list[str] = field(default_factory=list)
    diff: list[dict[str, Any]] = field(default_factory=list)


def first_system(client: Client) -> str:
    root = client.root if hasattr(client, "root") else client.get("/redfish/v1/")
    systems = members(client, link(root, "Systems"))
    if not systems:
        raise RedfishError(f"{client.name}: no ComputerSystem in /redfish/v1 Systems")
    return systems[0]


def read_state(client: Client, system: str | None = None) -> BiosState:
    system = system or first_system(client)
    sysres = client.get(system)
    bios_uri = link(sysres, "Bios")
    if not bios_uri:
        raise RedfishError(f"{client.name}: {system} links no Bios resource")
    bios = client.get(bios_uri)
    settings = bios.get("@Redfish.Settings") or {}
    settings_uri = link(settings, "SettingsObject") or ""
    if not settings_uri:
        raise RedfishError(f"{client.name}: {bios_uri} has no @Redfish.Settings.SettingsObject "
                           "(the BIOS takes no pending settings)")
    current = dict(bios.get("Attributes") or {})
    pend_body = client.get(settings_uri)
    pending = {k: v for k, v in (pend_body.get("Attributes") or {}).items()
               if current.get(k) != v}
    times = [str(t) for t in settings.get("SupportedApplyTimes") or []]
    return BiosState(system, bios_uri, settings_uri, current, pending, times)


def _same(a: Any, b: Any) -> bool:
    # BMCs answer numbers as numbers or strings ("0x6000000000" vs 412316860416 is not
    # equal: profiles write the BMC's own spelling); only int-vs-str of one number is.
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, str) or isinstance(b, (int, float)) \
            and isinstance(a, str):
        return str(a).strip().lower() == str(b).strip().lower()
    return a == b


def plan(state: BiosState, desired: dict[str, Any], profile: str = "") -> Plan:
    """What to set: unknown attributes are refused in one line naming them."""
    unknown = sorted(k for k in desired if k not in state.current)
    if unknown:
        where = f" (profile {profile})" if profile else ""
        raise RedfishError(f"the BIOS has no attribute {', '.join(repr(u) for u in unknown)}"
                           f"{where}: check the attribute name for this platform/BIOS version")
    p = Plan()
    for key, want in desired.items():
        have = state.current.get(key)
        if _same(have, want):
            p.current_ok.append(key)
        elif key in state.pending and _same(state.pending[key], want):
            p.pending_ok[key] = want
        else:
            p.to_set[key] = want
            p.diff.append({"attribute": key, "current": have, "desired": want})
    return p


def _job(client: Client, uri: str) -> Job:
    body = client.get(uri)
    state = str(body.get("JobState") or body.get("TaskState") or "Unknown")
    msg = str(body.get("Message") or "")
    if not msg and body.get("Messages"):
        msg = "; ".join(str(m.get("Message", "")) for m in body["Messages"]
                        if isinstance(m, dict))
    return Job(uri=uri, id=str(body.get("Id") or uri.rsplit("/", 1)[-1]),
               name=str(body.get("Name") or ""), state=state,
               kind=str(body.get("JobType") or "task"), message=msg)


def job_collections(client: Client) -> list[str]:
    """Where a BMC lists its jobs: TaskService Tasks, and Dell's per-manager Jobs."""
    root = client.root if hasattr(client, "root") else client.get("/redfish/v1/")
    out = []
    tasks_svc = link(root, "Tasks")
    if tasks_svc:
        tasks = link(client.get(tasks_svc), "Tasks")
        if tasks:
            out.append(tasks)
    for mgr in members(client, link(root, "Managers")):
        body = client.get(mgr)
        dell = (((body.get("Links") or {}).get("Oem") or {}).get("Dell") or {})
        jobs = link(dell, "Jobs") or link(((body.get("Oem") or {}).get("Dell") or {}), "Jobs")
        if not jobs and "iDRAC" in mgr:
            jobs = mgr.rstrip("/") + "/Jobs"  # Dell's documented job queue of iDRAC9
        if jobs:
            out.append(jobs)
    return out


def list_jobs(client: Client) -> list[Job]:
    jobs = []
    for coll in job_collections(client):
        try:
            uris = members(client, coll)
        except RedfishError as exc:
            if exc.status == 404:
                continue
            raise
        jobs += [_job(client, u) for u in uris]
    return jobs


def pending_jobs(client: Client) -> list[Job]:
    return [j for j in list_jobs(client) if j.pending]


Sleep = Callable[[float], None]


def wait_jobs_idle(client: Client, timeout: float, poll: float = 5.0,
                   sleep: Sleep = time.sleep, clock: Callable[[], float] = time.monotonic,
                   ) -> list[Job]:
    """Wait until no job is pending; on timeout one line naming the job still pending."""
    deadline = clock() + timeout
    waited: list[Job] = []
    while True:
        busy = pending_jobs(client)
        if not busy:
            return waited
        waited = busy
        if clock() >= deadline:
            names = ", ".join(j.words() for j in busy[:3])
            raise RedfishError(f"{client.name}: BMC job {names} still pending after "
                               f"{timeout:g} s; it must finish (or be deleted) before the BIOS "
                               "can be changed")
        sleep(poll)


def wait_job(client: Client, uri: str, until: set[str], timeout: float, poll: float = 5.0,
             sleep: Sleep = time.sleep, clock: Callable[[], float] = time.monotonic) -> Job:
    """Poll one job until its state is in `until` (lower case); Failed -> one line."""
    deadline = clock() + timeout
    while True:
        job = _job(client, uri)
        st = job.state.lower()
        if st in FAILED_JOB:
            raise RedfishError(f"{client.name}: BMC job {job.words()} failed"
                               + (f": {job.message}" if job.message else ""))
        if st in until:
            return job
        if clock() >= deadline:
            raise RedfishError(f"{client.name}: BMC job {job.words()} did not reach "
                               f"{'/'.join(sorted(until))} within {timeout:g} s")
        sleep(poll)


def apply(client: Client, state: BiosState, to_set: dict[str, Any]) -> str | None:
    """PATCH the pending-settings object; the job's URI when the BMC made one."""
    body: dict[str, Any] = {"Attributes": to_set}
    if "OnReset" in state.apply_times:
        body["@Redfish.SettingsApplyTime"] = {"ApplyTime": "OnReset"}
    _, headers, resp = client.patch(state.settings_uri, body)
    loc = headers.get("location") or ""
    if not loc and isinstance(resp, dict):
        loc = str(resp.get("@odata.id") or "")
        if "/Jobs/" not in loc and "/Tasks/" not in loc:
            loc = ""
    return urlsplit(loc).path if loc else None


def newest_bios_job(client: Client) -> Job | None:
    jobs = [j for j in list_jobs(client) if j.pending and "bios" in (j.kind + j.name).lower()]
    return jobs[-1] if jobs else None


def reset(client: Client, system: str) -> str:
    """ComputerSystem.Reset with the gentlest restart the BMC allows."""
    sysres = client.get(system)
    action = (sysres.get("Actions") or {}).get("#ComputerSystem.Reset") or {}
    target = action.get("target")
    if not target:
        raise RedfishError(f"{client.name}: {system} offers no #ComputerSystem.Reset action")
    allowed = action.get("ResetType@Redfish.AllowableValues") or []
    off = str(sysres.get("PowerState") or "").lower() == "off"
    prefs = ["On", "ForceOn"] if off else ["GracefulRestart", "ForceRestart", "PowerCycle"]
    choice = next((p for p in prefs if not allowed or p in allowed), None)
    if choice is None:
        raise RedfishError(f"{client.name}: no usable ResetType in {allowed}")
    client.post(target, {"ResetType": choice})
    return choice
