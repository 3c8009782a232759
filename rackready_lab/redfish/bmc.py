"""The lab's BMCs: one Redfish service per node, on the controller.

Address: 127.0.1.<node's last octet> (lab-gpu01 at 10.213.7.11 -> BMC 127.0.1.11),
port 443. The whole 127/8 answers on the controller's loopback without any
interface to create, and the nodes (each in its own network namespace) cannot
reach it: as on a site, the BMC sits on a management network the host OS does
not see, and only the controller talks to it.

Under config.STATE_DIR: bmc-credentials (the lab's BMC account, 0600, made once
per lab like vault-password), bmc/ca.pem (the CA the controller trusts), and
per node bmc/<node>/state.json, a certificate, a pid file and a log.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rackready.errors import EnvironmentProblem, UserError
from rackready_lab import config
from rackready_lab.config import NodeSpec

from . import ca, store
from .faults import FAULT_KINDS, FaultError, apply_fault
from .faults import heal as heal_state
from .resources import host_reset
from .tree import build

PORT = 443
USER = "root"  # iDRAC's factory account name; one lab account on every BMC
START_TIMEOUT_S = 15.0

__all__ = ["FAULT_KINDS", "address", "ca_file", "credentials", "fault", "faults", "heal",
           "power_cycle", "start_all", "stop_all"]


def bmc_dir() -> Path:
    return config.STATE_DIR / "bmc"


def address(spec: NodeSpec) -> str:
    return f"127.0.1.{spec.ip.rsplit('.', 1)[1]}"


def ca_file() -> Path:
    return bmc_dir() / "ca.pem"


def state_file(spec: NodeSpec) -> Path:
    return bmc_dir() / spec.name / "state.json"


def credentials_file() -> Path:
    return config.STATE_DIR / "bmc-credentials"


def credentials() -> dict[str, str]:
    """The lab's BMC account, generated once per lab (the vault holds the password)."""
    path = credentials_file()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"user": USER, "password": secrets.token_urlsafe(18)}, fh)
    return json.loads(path.read_text())


def _pidfile(spec: NodeSpec) -> Path:
    return bmc_dir() / spec.name / "bmc.pid"


def pid_of(spec: NodeSpec) -> int | None:
    try:
        pid = int(_pidfile(spec).read_text())
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ValueError):
        return None
    return pid if b"rackready_lab.redfish" in cmd else None


def start(spec: NodeSpec) -> int:
    """Start the node's BMC (idempotent); its state is built once from the node's hwsim
    state and kept for the lab's life (BIOS settings survive a BMC restart)."""
    pid = pid_of(spec)
    if pid:
        return pid
    from rackready_lab.hwsim.sysroot import read_node_state

    creds = credentials()
    ca.ensure_ca(bmc_dir())
    path = state_file(spec)
    if not path.exists():
        state = build(read_node_state(spec.root))
        state["address"] = address(spec)
        store.write(path, state)
    cert, key = ca.issue(bmc_dir(), f"{spec.name}-bmc", address(spec))
    log = (path.parent / "bmc.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rackready_lab.redfish", "serve", "--state", str(path),
         "--bind", address(spec), "--port", str(PORT), "--cert", str(cert), "--key", str(key),
         "--credentials", str(credentials_file()), "--node", spec.name],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
    )
    _pidfile(spec).write_text(str(proc.pid))
    _wait_listening(spec, proc, creds)
    return proc.pid


def _wait_listening(spec: NodeSpec, proc: subprocess.Popen, creds: dict[str, str]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (state_file(spec).parent / "bmc.log").read_text()[-300:].strip()
            raise EnvironmentProblem(f"{spec.name}: BMC service exited at start "
                                     f"({address(spec)}:{PORT}): {tail.splitlines()[-1:]}")
        try:
            socket.create_connection((address(spec), PORT), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise EnvironmentProblem(f"{spec.name}: BMC not listening on {address(spec)}:{PORT} "
                             f"after {START_TIMEOUT_S:.0f}s; see {state_file(spec).parent}/bmc.log")


def start_all(specs: list[NodeSpec]) -> None:
    for spec in specs:
        start(spec)


def stop(spec: NodeSpec) -> None:
    pid = pid_of(spec)
    if pid:
        os.kill(pid, signal.SIGTERM)
    _pidfile(spec).unlink(missing_ok=True)


def stop_all() -> None:
    """Stop every lab BMC and remove their state, certificates and account."""
    base = bmc_dir()
    if base.exists():
        for pidfile in base.glob("*/bmc.pid"):
            stop(NodeSpec(pidfile.parent.name, 0, "", ""))
    shutil.rmtree(base, ignore_errors=True)
    credentials_file().unlink(missing_ok=True)


def power_cycle(spec: NodeSpec) -> None:
    """The node was power-cycled (lab.reboot): what its BIOS does at POST."""
    path = state_file(spec)
    if path.exists():
        with store.locked(path) as state:
            host_reset(state)


def fault(spec: NodeSpec, kind: str, target: str | None) -> str:
    path = state_file(spec)
    if not path.exists():
        raise UserError(f"{spec.name} has no BMC (run `invoke lab.up`)")
    with store.locked(path) as state:
        try:
            new = apply_fault(state, kind, target)
        except FaultError as exc:
            raise UserError(str(exc)) from None
        state.clear()
        state.update(new)
    return str(new["faults"][-1]["description"])


def heal(spec: NodeSpec) -> None:
    path = state_file(spec)
    if not path.exists():
        return
    with store.locked(path) as state:
        healed = heal_state(state)
        state.clear()
        state.update(healed)


def faults(spec: NodeSpec) -> list[str]:
    path = state_file(spec)
    if not path.exists():
        return []
    state: dict[str, Any] = json.loads(path.read_text())
    return [f["kind"] for f in state.get("faults", [])]
