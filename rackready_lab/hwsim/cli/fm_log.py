"""The simulated Fabric Manager log (/var/log/fabricmanager.log) of a node with NVSwitches.

Standard library only (node-side tools re-render). The session's startup entries at boot,
then one entry per NVSwitch error in state["host"]["fm_errors"], in Fabric Manager's own
shape: `[Mon DD YYYY HH:MM:SS] [LEVEL] [tid N] message`, the node's local time (as
gpud's capture, tests/fixtures/field/fabricmanager). The startup option lines are made
from the options the Fabric Manager user guide lists (fabricmanager.cfg), not captured.

An error is logged when it happens: a fault records it with no time, and the node's next
tool call (cli/common.advance_faults; the tool calls are the simulated node's clock) stamps
it with the wall clock, so a run that starts after the fault finds it logged during the run.
"""

from __future__ import annotations

import time
from typing import Any

from .state_view import smi_bus_id

PATH = "var/log/fabricmanager.log"
# the boot of the simulated node (kern.log's lines are dated Nov 30 too)
BOOT = "Nov 30 2026 01:00:"


def _startup(state: dict[str, Any]) -> list[str]:
    tag = f"[{BOOT}12] [INFO] [tid 2841]"
    options = ("Logging level = 4", "Logging file name/path = /var/log/fabricmanager.log",
               "Append to log file = 1", "Max Log file size = 1024 (MBs)", "Use Syslog file = 0",
               "Fabric Manager communication ports = 16000", "Fabric Mode = 0",
               "Fabric Mode Restart = 0", "FM Library communication bind interface = 127.0.0.1",
               "FM Library communication port number = 6666",
               "Continue to run when facing failures = 0", "Abort CUDA jobs when FM exits = 1")
    return ([f"{tag} Fabric Manager version {state['driver']['version']} is running with the "
             "following configuration options"] + [f"{tag} {o}" for o in options]
            + [f"[{BOOT}19] [INFO] [tid 2841] Successfully configured all the available GPUs "
               "and NVSwitches to route NVLink traffic."])


def logged(state: dict[str, Any]) -> bool:
    """Fabric Manager has run on this node: NVSwitches and the driver provisioned."""
    return bool(state.get("nvswitches")) and "nvidia" in state.get("modules", [])


def render(state: dict[str, Any]) -> str:
    lines = _startup(state)
    errors = [e for e in (state.get("host") or {}).get("fm_errors", []) if e.get("at")]
    for e in sorted(errors, key=lambda e: e["at"]):
        when = time.strftime("%b %d %Y %H:%M:%S", time.localtime(e["at"]))
        sev = "fatal" if e["fatal"] else "non-fatal"
        lines.append(f"[{when}] [ERROR] [tid 2877] detected NVSwitch {sev} error {e['sxid']} "
                     f"on fid 0 on NVSwitch pci bus id {smi_bus_id(e['bdf'])} physical id "
                     f"{e['physical_id']} port {e['port']}")
    return "\n".join(lines) + "\n"


def pending(state: dict[str, Any]) -> bool:
    return any(e.get("at") is None for e in (state.get("host") or {}).get("fm_errors", []))


def stamp(state: dict[str, Any]) -> None:
    """Log the errors a fault recorded since the last tool call: now."""
    now = time.time()
    for e in (state.get("host") or {}).get("fm_errors", []):
        if e.get("at") is None:
            e["at"] = now
