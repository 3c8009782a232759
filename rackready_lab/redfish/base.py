"""What the lab BMC's tree builder, load envelope and Redfish semantics share: the vendor
data (data/<vendor>.yml) and where each vendor puts a resource, references, collections,
the time stamp, a log entry. It imports no other module of the lab BMC, so each of those
builds on it without coming back around.
"""

from __future__ import annotations

from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any

import yaml

DATA_DIR = Path(__file__).resolve().parent / "data"
ROOT = "/redfish/v1"


@cache
def vendor_data(name: str) -> dict[str, Any]:
    return yaml.safe_load((DATA_DIR / f"{name}.yml").read_text())


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S+00:00")


def ref(path: str) -> dict[str, str]:
    return {"@odata.id": path}


def collection(path: str, kind: str, name: str, members: list[str]) -> dict[str, Any]:
    return {"@odata.id": path, "@odata.type": f"#{kind}.{kind}", "Name": name,
            "Members": [ref(m) for m in members], "Members@odata.count": len(members)}


class Paths:
    """Where a vendor puts each resource."""

    def __init__(self, v: dict[str, Any]) -> None:
        self.system = f"{ROOT}/Systems/{v['system_id']}"
        self.chassis = f"{ROOT}/Chassis/{v['chassis_id']}"
        self.manager = f"{ROOT}/Managers/{v['manager_id']}"
        self.bios = f"{self.system}/Bios"
        self.bios_settings = f"{self.bios}/{v['bios_settings_leaf']}"
        self.jobs = f"{self.manager}/Jobs" if v["jobs"] else None
        self.tasks = f"{ROOT}/TaskService/Tasks"
        self.sessions = f"{ROOT}/SessionService/Sessions"
        self.firmware = f"{ROOT}/UpdateService/FirmwareInventory"
        self.registry = f"{ROOT}/Registries/{v['bios']['registry']}"

    def log_service(self, svc: dict[str, Any]) -> str:
        base = self.manager if svc["under"] == "manager" else self.system
        return f"{base}/LogServices/{svc['id']}"


def paths_of(state: dict[str, Any]) -> Paths:
    return Paths(vendor_data(state["vendor"]))


def add_log(state: dict[str, Any], service: str, severity: str, message_id: str,
            message: str, **extra: Any) -> dict[str, Any]:
    n = state["next_id"]["log"]
    state["next_id"]["log"] = n + 1
    entry = {"Id": str(n), "Created": now_iso(), "Severity": severity,
             "MessageId": message_id, "Message": message, **extra}
    state["logs"].setdefault(service, []).append(entry)
    return entry
