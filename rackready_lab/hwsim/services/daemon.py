"""The simulated daemons: nvidia-persistenced, nvidia-fabricmanager, nv-hostengine.

Each marks itself running in the state, keeps the GPU fields it owns in step
(persistence mode, fabric state) and undoes that when systemd stops it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

from ..cli.common import ToolError, fault_active, load_state, locked_state, run

SERVICES = ("nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm")


def _apply(state: dict[str, Any], name: str, up: bool) -> None:
    state["services"].setdefault(name, {})["running"] = up
    for g in state["gpus"]:
        if name == "nvidia-persistenced":
            g["persistence_mode"] = "Enabled" if up else "Disabled"
        elif name == "nvidia-fabricmanager" and state["nvswitches"]:
            g["fabric"] = ({"state": "Completed", "status": "Success"} if up
                           else {"state": "In Progress", "status": "N/A"})


def refusal(state: dict[str, Any], name: str, version: str | None) -> str | None:
    """Why the daemon must not start, or None."""
    if name != "nvidia-fabricmanager":
        return None
    if not state["nvswitches"]:
        return "fabric manager: no NVSwitch found on this system"
    driver = state["driver"]["version"]
    if version and version.split("-")[0] != driver:
        return (f"fabric manager version {version.split('-')[0]} does not match the "
                f"driver version {driver}; refusing to start")
    if fault_active(state, "fabric-manager-down"):
        return "fabric manager: NVSwitch initialization failed (simulated fault)"
    return None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="hwsim-daemon")
    p.add_argument("service", choices=SERVICES)
    p.add_argument("--version", help="package version, checked against the driver")
    p.add_argument("--once", action="store_true", help="start, record, exit (tests)")
    a = p.parse_args(argv)
    why = refusal(load_state(), a.service, a.version)
    if why:
        raise ToolError(why, 1)
    with locked_state() as state:
        _apply(state, a.service, True)
    if a.once:
        return 0
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    try:
        while not stopping:
            time.sleep(2)
            if refusal(load_state(), a.service, a.version):
                break  # a fault injected while running takes the daemon down
    except KeyboardInterrupt:
        pass
    with locked_state() as state:
        _apply(state, a.service, False)
    return 0 if stopping else 1


if __name__ == "__main__":
    sys.exit(run(main))
