"""Redfish semantics on a BMC state (pure: no HTTP, no files).

GET renders a resource (static ones from state["resources"], live ones such as
Bios, jobs, tasks and log entries from the state); PATCH, POST and DELETE change
the state or raise RedfishError, which the server turns into a DMTF error body.
A host reset (a ComputerSystem.Reset POST or a lab reboot) is what applies
pending BIOS settings: iDRAC through its configuration job (Scheduled ->
Running -> Completed), iLO straight from Bios/settings.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from . import envelope
from .base import ROOT, add_log, collection, now_iso, paths_of, ref, vendor_data

BASE = "Base.1.12"
# How long a Dell configuration job stays Running after the host resets (BIOS POST).
JOB_RUN_S = 2.0
ACTIVE_JOB_STATES = ("Scheduled", "Running", "New")


class RedfishError(Exception):
    """A request the service refuses: HTTP status plus one DMTF message."""

    def __init__(self, status: int, message_id: str, message: str,
                 args: list[str] | None = None, resolution: str = "",
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message_id, self.message = status, message_id, message
        self.args_, self.resolution, self.headers = args or [], resolution, headers or {}

    def body(self) -> dict[str, Any]:
        info = {"@odata.type": "#Message.v1_1_1.Message", "MessageId": self.message_id,
                "Message": self.message, "MessageArgs": self.args_,
                "Severity": "Critical" if self.status >= 500 else "Warning",
                "Resolution": self.resolution}
        return {"error": {"code": self.message_id, "message": self.message,
                          "@Message.ExtendedInfo": [info]}}


def not_found(path: str) -> RedfishError:
    return RedfishError(404, f"{BASE}.ResourceNotFound",
                        f"The requested resource of type Resource named '{path}' was not found.",
                        ["Resource", path], "Provide a valid resource identifier and resubmit.")


def not_allowed(method: str, path: str, allow: str = "GET") -> RedfishError:
    return RedfishError(405, f"{BASE}.OperationNotAllowed",
                        f"The {method} operation is not allowed on {path}.", [method, path],
                        "None.", headers={"Allow": allow})


def success(extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    msgs = [{"MessageId": f"{BASE}.Success", "Message": "The request completed successfully.",
             "MessageArgs": [], "Severity": "OK", "Resolution": "None"}]
    return {"@Message.ExtendedInfo": msgs + (extra or [])}


def normalize(path: str) -> str:
    path = path.split("?", 1)[0].split("#", 1)[0]
    return path.rstrip("/") or "/"


def _aliases(state: dict[str, Any]) -> dict[str, str]:
    p = paths_of(state)
    out = {}
    for svc in vendor_data(state["vendor"])["log_services"]:
        if svc["under"] == "system":  # reachable from the manager too (iLO's IML)
            out[f"{p.manager}/LogServices/{svc['id']}"] = p.log_service(svc)
    return out


def resolve(state: dict[str, Any], path: str) -> str:
    path = normalize(path)
    for alias, real in _aliases(state).items():
        if path == alias or path.startswith(alias + "/"):
            return real + path[len(alias):]
    return path


# --- time passes --------------------------------------------------------------

def advance(state: dict[str, Any], now: float | None = None) -> None:
    """Finish the jobs whose host has been through POST long enough."""
    now = time.time() if now is None else now
    for job in state["jobs"]:
        if job["JobState"] == "Running" and job.get("complete_at", 0) <= now:
            _complete(state, job)


def dependents(vendor: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """What the system profile in attrs forces (data/<vendor>.yml bios.dependents)."""
    dep = vendor_data(vendor)["bios"].get("dependents")
    if not dep:
        return {}
    return dict(dep["values"].get(attrs.get(dep["controller"]), {}))


def make_current(state: dict[str, Any]) -> None:
    """Pending values take effect (POST); the system profile then sets its dependents."""
    bios = state["bios"]
    bios["current"].update(bios["pending"])
    bios["current"].update(dependents(state["vendor"], bios["current"]))
    bios["pending"] = {}


def _complete(state: dict[str, Any], job: dict[str, Any]) -> None:
    make_current(state)
    job.update(JobState="Completed", PercentComplete=100, Message="Job completed successfully.",
               MessageId="PR19", EndTime=now_iso())
    job.pop("complete_at", None)
    add_log(state, "Lclog", "OK", "PR19", f"Job {job['Id']} completed successfully.")


def host_reset(state: dict[str, Any], now: float | None = None) -> None:
    """The host went through a power cycle: pending BIOS settings take effect."""
    now = time.time() if now is None else now
    state["boots"] += 1
    system = state["resources"][paths_of(state).system]
    system["PowerState"] = "On"
    if vendor_data(state["vendor"])["jobs"]:
        for job in state["jobs"]:
            if job["JobState"] == "Scheduled":
                job.update(JobState="Running", PercentComplete=50, StartTime=now_iso(),
                           Message="Task successfully scheduled.", complete_at=now + JOB_RUN_S)
    else:
        make_current(state)
    advance(state, now)


# --- GET ------------------------------------------------------------------------

def load_of(state: dict[str, Any], measured: float = 0.0) -> float:
    """The node's load fraction: the state's override when set, else what was measured."""
    override = (state.get("load") or {}).get("override")
    return envelope.clamp(measured if override is None else override)


def render(state: dict[str, Any], path: str, sessions: list[dict[str, Any]] | None = None,
           user: str = "", load: float | None = None) -> dict[str, Any]:
    """GET of path; load is the node's load fraction (None: the state's override or 0)."""
    path = resolve(state, path)
    p = paths_of(state)
    v = vendor_data(state["vendor"])
    res = state["resources"].get(path)
    if path == p.bios:
        return {**copy.deepcopy(res), "Attributes": dict(state["bios"]["current"])}
    if path == p.bios_settings:
        bios = state["bios"]
        # iDRAC shows only what is pending; iLO shows the whole next-boot set.
        attrs = dict(bios["pending"]) if v["jobs"] else {**bios["current"], **bios["pending"]}
        return {**copy.deepcopy(res), "Attributes": attrs}
    if path in (f"{p.chassis}/Power", f"{p.chassis}/Thermal") and res is not None:
        u = load_of(state) if load is None else envelope.clamp(load)
        return (envelope.power if path.endswith("/Power") else envelope.thermal)(state, res, u)
    if path.startswith(f"{p.chassis}/ThermalSubsystem"):
        sub = envelope.thermal_subsystem(state, path, load_of(state) if load is None else load)
        if sub is not None:
            return sub
    if path == p.manager:  # the BMC's clock, read by the bios role at provisioning
        return {**copy.deepcopy(res), "DateTime": now_iso()}
    if path == p.sessions:
        return collection(path, "SessionCollection", "Session Collection",
                          [f"{path}/{s['Id']}" for s in sessions or []])
    if path.startswith(p.sessions + "/"):
        for s in sessions or []:
            if path == f"{p.sessions}/{s['Id']}":
                return {"@odata.id": path, "@odata.type": "#Session.v1_6_0.Session",
                        "Id": s["Id"], "Name": "User Session", "UserName": s["UserName"]}
    if path == f"{ROOT}/AccountService/Accounts":
        return collection(path, "ManagerAccountCollection", "Accounts Collection",
                          [f"{path}/2"])
    if path == f"{ROOT}/AccountService/Accounts/2" and user:
        return {"@odata.id": path, "@odata.type": "#ManagerAccount.v1_10_0.ManagerAccount",
                "Id": "2", "Name": "User Account", "UserName": user, "RoleId": "Administrator",
                "Enabled": True, "Locked": False}
    if p.jobs and path == p.jobs:
        return {**copy.deepcopy(res), "Members": [ref(f"{path}/{j['Id']}")
                                                  for j in state["jobs"]],
                "Members@odata.count": len(state["jobs"])}
    if p.jobs and path.startswith(p.jobs + "/"):
        return _job_view(state, _job(state, path.rsplit("/", 1)[1], path), p.jobs)
    if path == p.tasks:
        return collection(path, "TaskCollection", "Task Collection",
                          [f"{path}/{j['Id']}" for j in state["jobs"]])
    if path.startswith(p.tasks + "/"):
        return _task_view(_job(state, path.rsplit("/", 1)[1], path), p.tasks)
    for svc in v["log_services"]:
        entries = f"{p.log_service(svc)}/Entries"
        if path == entries:  # members expanded, as iDRAC's and iLO's entry collections are
            out = collection(path, "LogEntryCollection", f"{svc['title']} Entries", [])
            out["Members"] = [_entry_view(f"{path}/{e['Id']}", svc, e)
                              for e in state["logs"].get(svc["id"], [])]
            out["Members@odata.count"] = len(out["Members"])
            return out
        if path.startswith(entries + "/"):
            for e in state["logs"].get(svc["id"], []):
                if path == f"{entries}/{e['Id']}":
                    return _entry_view(path, svc, e)
    if res is None:
        raise not_found(path)
    return copy.deepcopy(res)


def _entry_view(path: str, svc: dict[str, Any], e: dict[str, Any]) -> dict[str, Any]:
    return {"@odata.id": path, "@odata.type": "#LogEntry.v1_15_0.LogEntry",
            "Name": f"Log Entry {e['Id']}", "EntryType": svc["entry_type"], **e}


def task_monitor(state: dict[str, Any], path: str) -> tuple[int, dict[str, Any]]:
    """DMTF task monitor: 202 while the job runs, then the finished task."""
    p = paths_of(state)
    job = _job(state, normalize(path).rsplit("/", 1)[1], path)
    view = _task_view(job, p.tasks)
    return (200 if view["TaskState"] in ("Completed", "Exception", "Cancelled") else 202), view


def _job(state: dict[str, Any], jid: str, path: str) -> dict[str, Any]:
    for job in state["jobs"]:
        if job["Id"] == jid:
            return job
    raise not_found(path)


def _job_view(state: dict[str, Any], job: dict[str, Any], base: str) -> dict[str, Any]:
    view = {k: v for k, v in job.items() if k != "complete_at"}
    return {"@odata.id": f"{base}/{job['Id']}", "@odata.type": "#DellJob.v1_5_0.DellJob",
            **view}


TASK_STATES = {"Scheduled": "Pending", "New": "New", "Running": "Running",
               "Completed": "Completed", "Failed": "Exception", "Deleted": "Cancelled"}


def _task_view(job: dict[str, Any], base: str) -> dict[str, Any]:
    state = TASK_STATES.get(job["JobState"], "Running")
    return {"@odata.id": f"{base}/{job['Id']}", "@odata.type": "#Task.v1_7_0.Task",
            "Id": job["Id"], "Name": job["Name"], "TaskState": state,
            "TaskStatus": "Critical" if state == "Exception" else "OK",
            "PercentComplete": job["PercentComplete"], "StartTime": job.get("StartTime"),
            "TaskMonitor": f"{ROOT}/TaskService/TaskMonitors/{job['Id']}",
            "Messages": [{"MessageId": job.get("MessageId", ""), "Message": job["Message"]}]}


# --- PATCH ------------------------------------------------------------------------

def patch(state: dict[str, Any], path: str, body: Any) -> tuple[int, dict[str, Any],
                                                                  dict[str, str], bool]:
    """Returns (status, body, headers, reset_now)."""
    path = resolve(state, path)
    p = paths_of(state)
    if not isinstance(body, dict):
        raise RedfishError(400, f"{BASE}.MalformedJSON", "The request body submitted was "
                           "malformed JSON and could not be parsed by the receiving service.",
                           resolution="Ensure that the request body is valid JSON and resubmit.")
    if path == p.bios_settings:
        return _patch_bios(state, body)
    if path == p.system:
        return _patch_system(state, body)
    if path == p.bios:
        raise RedfishError(405, f"{BASE}.OperationNotAllowed",
                           f"The PATCH operation is not allowed on {path}: change BIOS "
                           f"attributes through {p.bios_settings}.", ["PATCH", path],
                           "Use the @Redfish.Settings SettingsObject.", {"Allow": "GET"})
    render(state, path)  # 404 before 405
    raise not_allowed("PATCH", path)


def _unknown_property(name: str) -> RedfishError:
    return RedfishError(400, f"{BASE}.PropertyUnknown",
                        f"The property {name} is not in the list of valid properties for the "
                        "resource.", [name], "Remove the unknown property from the request "
                        "body and resubmit the request if the operation failed.")


def _patch_system(state: dict[str, Any], body: dict[str, Any]):
    system = state["resources"][paths_of(state).system]
    for key, value in body.items():
        if key == "AssetTag" and isinstance(value, str):
            system["AssetTag"] = value
        elif key == "Boot" and isinstance(value, dict):
            for k, x in value.items():
                if k not in system["Boot"]:
                    raise _unknown_property(f"Boot/{k}")
                system["Boot"][k] = x
        else:
            raise _unknown_property(key)
    return 200, success(), {}, False


def _patch_bios(state: dict[str, Any], body: dict[str, Any]):
    v = vendor_data(state["vendor"])
    p = paths_of(state)
    for key in body:
        if key not in ("Attributes", "@Redfish.SettingsApplyTime"):
            raise _unknown_property(key)
    attrs = body.get("Attributes")
    if not isinstance(attrs, dict) or not attrs:
        raise RedfishError(400, f"{BASE}.PropertyMissing", "The property Attributes is a "
                           "required property and must be included in the request.",
                           ["Attributes"], "Ensure that the property is in the request body.")
    registry = {a["name"]: a for a in v["bios"]["attributes"]}
    for name, value in attrs.items():
        entry = registry.get(name)
        if entry is None:
            raise _unknown_property(name)
        if entry.get("read_only"):
            raise RedfishError(400, f"{BASE}.PropertyNotWritable", f"The property {name} is "
                               "a read only property and cannot be assigned a value.", [name],
                               "Remove the property from the request body and resubmit.")
        if entry["type"] == "Enumeration" and value not in entry["values"]:
            raise RedfishError(400, f"{BASE}.PropertyValueNotInList",
                               f"The value '{value}' for the property {name} is not in the "
                               "list of acceptable values.", [str(value), name],
                               "Choose a value from the enumeration list that the "
                               "implementation can support and resubmit the request.")
        if entry["type"] in ("String", "Enumeration") and not isinstance(value, str):
            raise RedfishError(400, f"{BASE}.PropertyValueTypeError", f"The value '{value}' "
                               f"for the property {name} is of a different type than the "
                               "property can accept.", [str(value), name],
                               "Correct the value and resubmit.")
    _check_locked(state, attrs)
    apply_time = (body.get("@Redfish.SettingsApplyTime") or {}).get("ApplyTime")
    supported = state["resources"][p.bios]["@Redfish.Settings"]["SupportedApplyTimes"]
    if apply_time is not None and apply_time not in supported:
        raise RedfishError(400, f"{BASE}.PropertyValueNotInList", f"The value '{apply_time}' "
                           "for the property ApplyTime is not in the list of acceptable "
                           "values.", [str(apply_time), "ApplyTime"],
                           f"Choose one of: {', '.join(supported)}.")
    if not v["jobs"]:
        state["bios"]["pending"].update(attrs)
        return 200, success([{"MessageId": "iLO.2.15.SystemResetRequired",
                              "Message": "One or more properties were changed and will not "
                                         "take effect until system is reset.",
                              "MessageArgs": [], "Severity": "Warning",
                              "Resolution": "Reset the system."}]), {}, False
    if active_bios_job(state):
        raise RedfishError(400, "IDRAC.2.9.SYS011", "Pending configuration values are already "
                           "committed, unable to perform another set operation.", [],
                           "Wait for the scheduled job to complete or delete the configuration "
                           "job before attempting more configuration operations.")
    state["bios"]["pending"].update(attrs)
    if apply_time is None:
        return 200, success(), {}, False
    job = create_bios_job(state)
    return 202, success(), {"Location": f"{p.jobs}/{job['Id']}"}, apply_time == "Immediate"


def _check_locked(state: dict[str, Any], attrs: dict[str, Any]) -> None:
    """A system profile other than Custom owns its dependents (iDRAC refuses them)."""
    dep = vendor_data(state["vendor"])["bios"].get("dependents")
    if not dep:
        return
    bios = state["bios"]
    name = dep["controller"]
    profile = attrs.get(name, bios["pending"].get(name, bios["current"].get(name)))
    if profile == dep["free_when"]:
        return
    locked = sorted(set(attrs) & {k for vals in dep["values"].values() for k in vals})
    if locked:
        raise RedfishError(400, f"{BASE}.PropertyNotWritable",
                           f"The attribute {locked[0]} is read-only because {name} is "
                           f"{profile}: it is set by the system profile.",
                           [locked[0], name], f"Set {name} to {dep['free_when']} in the same "
                           "request to change it, or leave it to the system profile.")


def active_bios_job(state: dict[str, Any]) -> dict[str, Any] | None:
    return next((j for j in state["jobs"] if j["JobType"] == "BIOSConfiguration"
                 and j["JobState"] in ACTIVE_JOB_STATES), None)


def create_bios_job(state: dict[str, Any]) -> dict[str, Any]:
    n = state["next_id"]["job"]
    state["next_id"]["job"] = n + 1
    jid = f"JID_{int(time.time()) % 10**9:09d}{n:03d}"
    job = {"Id": jid, "Name": "Configure: BIOS.Setup.1-1", "JobType": "BIOSConfiguration",
           "JobState": "Scheduled", "PercentComplete": 0, "Message": "Task successfully "
           "scheduled.", "MessageId": "JCP001", "StartTime": "TIME_NOW",
           "EndTime": "TIME_NA", "TargetSettingsURI": None}
    state["jobs"].append(job)
    return job


# --- POST / DELETE -------------------------------------------------------------------

def post(state: dict[str, Any], path: str, body: Any) -> tuple[int, dict[str, Any],
                                                                 dict[str, str], bool]:
    """Actions and job creation; returns (status, body, headers, reset_now)."""
    path = resolve(state, path)
    p = paths_of(state)
    body = body if isinstance(body, dict) else {}
    if path == f"{p.system}/Actions/ComputerSystem.Reset":
        return _reset(state, body.get("ResetType"))
    if p.jobs and path == p.jobs:
        target = body.get("TargetSettingsURI")
        if normalize(str(target)) != p.bios_settings:
            raise RedfishError(400, f"{BASE}.ActionParameterValueNotInList",
                               f"The value '{target}' for the parameter TargetSettingsURI is "
                               "not in the list of acceptable values.",
                               [str(target), "TargetSettingsURI"], f"Use {p.bios_settings}.")
        if active_bios_job(state):
            raise RedfishError(400, "IDRAC.2.9.SYS011", "Pending configuration values are "
                               "already committed, unable to perform another set operation.")
        if not state["bios"]["pending"]:
            raise RedfishError(400, "IDRAC.2.9.SYS030", "No pending data present to create a "
                               "Configuration job.", [], "Set attributes first.")
        job = create_bios_job(state)
        return 200, success(), {"Location": f"{p.jobs}/{job['Id']}"}, False
    if path == f"{p.bios}/Actions/Bios.ResetBios":
        v = vendor_data(state["vendor"])
        defaults = {a["name"]: a["current"] for a in v["bios"]["attributes"]
                    if not a.get("read_only")}
        state["bios"]["pending"].update(defaults)
        return 200, success(), {}, False
    for svc in vendor_data(state["vendor"])["log_services"]:
        if path == f"{p.log_service(svc)}/Actions/LogService.ClearLog":
            state["logs"][svc["id"]] = []
            return 200, success(), {}, False
    render(state, path)
    raise not_allowed("POST", path)


RESETS = ("On", "ForceOff", "ForceRestart", "GracefulRestart", "GracefulShutdown",
          "PushPowerButton", "PowerCycle", "Nmi")


def _reset(state: dict[str, Any], kind: Any):
    if kind not in RESETS:
        raise RedfishError(400, f"{BASE}.ActionParameterValueNotInList",
                           f"The value '{kind}' for the parameter ResetType in the action "
                           "ComputerSystem.Reset is not in the list of acceptable values.",
                           [str(kind), "ResetType", "ComputerSystem.Reset"],
                           f"Choose one of: {', '.join(RESETS)}.")
    system = state["resources"][paths_of(state).system]
    if kind in ("ForceOff", "GracefulShutdown"):
        system["PowerState"] = "Off"
        return 204, {}, {}, False
    if kind == "Nmi":
        return 204, {}, {}, False
    if kind in ("On", "PushPowerButton") and system["PowerState"] == "On":
        if kind == "On":
            raise RedfishError(409, f"{BASE}.ResourceInUse", "The system is already on.")
        system["PowerState"] = "Off"
        return 204, {}, {}, False
    host_reset(state)
    return 204, {}, {}, True


def delete(state: dict[str, Any], path: str) -> tuple[int, dict[str, Any]]:
    path = resolve(state, path)
    p = paths_of(state)
    if p.jobs and path.startswith(p.jobs + "/"):
        job = _job(state, path.rsplit("/", 1)[1], path)
        if job["JobState"] == "Running":
            raise RedfishError(400, "IDRAC.2.9.SUP0517", f"Unable to delete job {job['Id']}: "
                               "it is running.", [job["Id"]], "Wait for the job to complete.")
        if job["JobState"] == "Scheduled" and job["JobType"] == "BIOSConfiguration":
            state["bios"]["pending"] = {}
        state["jobs"].remove(job)
        return 200, success()
    render(state, path)
    raise not_allowed("DELETE", path)
