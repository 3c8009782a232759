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
    if a.once:
        with locked_state() as state:
            _apply(state, a.service, True)
        return 0
    signal.signal(signal.SIGTERM, _stop)  # before it says it runs: a stop then is recorded
    stopped = False
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # never cut the write
        with locked_state() as state:
            _apply(state, a.service, True)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        while True:
            time.sleep(2)
            if refusal(load_state(), a.service, a.version):
                break  # a fault injected while running takes the daemon down
    except _Stopped:
        stopped = True
    except KeyboardInterrupt:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second TERM: the record is written
    with locked_state() as state:
        _apply(state, a.service, False)
    return 0 if stopped else 1


class _Stopped(Exception):
    pass


def _stop(*_: object) -> None:
    # Raising ends the sleep at once: a daemon that waited out its sleep held every
    # systemctl stop, restart and lab reboot up to 2 s.
    raise _Stopped


if __name__ == "__main__":
    sys.exit(run(main))
