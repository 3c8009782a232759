"""A simulated GPU node in a temp dir, for running the node-side suite end to end.

hwsim's state and sysroot (rackready_lab.hwsim) plus a bin dir of wrapper
scripts named like the vendor tools, each exec-ing hwsim's CLI for that tool.
Put `bin` first on PATH and set HWSIM_STATE, and the suite reads the simulated
hardware through the same commands and files it reads on a real node.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rackready_lab.hwsim.packages import NCCL
from rackready_lab.hwsim.state import build_state
from rackready_lab.hwsim.sysroot import ROOT_REL, STATE_REL, write_node_state
from validation.result_schema import check_result

REPO = Path(__file__).resolve().parents[2]

# tool name on PATH -> hwsim CLI module (rackready_lab.hwsim.cli.<module>)
TOOLS = {
    "nvidia-smi": "nvidia_smi",
    "dcgmi": "dcgmi",
    "ibstat": "ibstat",
    "ibv_devinfo": "ibv_devinfo",
    "mlxconfig": "mlxconfig",
    "mlnx_qos": "mlnx_qos",
    "nvme": "nvme",
    "lspci": "lspci",
    "ib_write_bw": "ib_write_bw",
    "mlxlink": "mlxlink",
    "ras-mc-ctl": "ras_mc_ctl",
    "edac-util": "edac_util",
    "dmidecode": "dmidecode",
}

# Stands in for the lab's real systemd (lab nodes are systemd-nspawn machines
# where hwsim's daemons are real units): answers `systemctl is-active UNIT`
# from the state's services, which is what the fabric.manager check asks.
SYSTEMCTL = """\
import json, os, sys
args = [a for a in sys.argv[1:] if not a.startswith("-")]
if len(args) != 2 or args[0] != "is-active":
    print("systemctl stub: only 'is-active UNIT'", file=sys.stderr)
    sys.exit(2)
state = json.load(open(os.environ["HWSIM_STATE"]))
svc = state.get("services", {}).get(args[1].removesuffix(".service"))
running = bool(svc and svc.get("running"))
print("active" if running else "inactive")
sys.exit(0 if running else 3)
"""


@dataclass(frozen=True)
class Node:
    root: Path  # node root: var/lib/hwsim/state.json and var/lib/hwsim/root
    bin: Path
    raid: Path  # a real directory standing in for /raid (storage and checkpoint writes)

    @property
    def state_path(self) -> Path:
        return self.root / STATE_REL

    @property
    def sysroot(self) -> Path:
        return self.root / ROOT_REL

    def state(self) -> dict[str, Any]:
        return json.loads(self.state_path.read_text())

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "HWSIM_STATE": str(self.state_path),
            "PYTHONPATH": str(REPO),
        }


def make_node(tmp: Path, platform: str, name: str, fabric: str,
              state: dict[str, Any] | None = None) -> Node:
    """Build (or take) a provisioned state, render its sysroot, write the tool wrappers."""
    st = state if state is not None else build_state(platform, name, fabric, provisioned=True)
    root = tmp / "node"
    write_node_state(st, root)
    bindir = tmp / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    for tool, module in TOOLS.items():
        _script(bindir / tool, f'exec "{py}" -m rackready_lab.hwsim.cli.{module} "$@"\n')
    # Stands in for the lab node's package database, where hwsim's libnccl2 stand-in is
    # installed at the version design.md pins (rackready_lab.hwsim.packages.NCCL).
    _script(bindir / "dpkg-query",
            f'case "$*" in *libnccl2*) printf %s "{NCCL}"; exit 0;; esac\n'
            'echo "dpkg-query stub: only libnccl2" >&2; exit 1\n')
    (bindir / "systemctl.py").write_text(SYSTEMCTL)
    _script(bindir / "systemctl", f'exec "{sys.executable}" "{bindir / "systemctl.py"}" "$@"\n')
    raid = tmp / "raid"
    raid.mkdir(exist_ok=True)
    return Node(root, bindir, raid)


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def run_suite(node: Node, out: Path, profile: str, site: dict[str, Any],
              *extra: str, timeout_s: float = 240) -> tuple[subprocess.CompletedProcess[str],
                                                             dict[str, Any]]:
    """`python -m validation run` against the node; (process, result.json)."""
    site_file = out.parent / f"{out.name}-site.yml"
    site_file.write_text(yaml.safe_dump(site))
    cmd = [sys.executable, "-m", "validation", "run", "--profile", profile, "--level", "quick",
           "--out", str(out), "--sysroot", str(node.sysroot), "--site", str(site_file), *extra]
    proc = subprocess.run(cmd, cwd=REPO, env=node.env(), capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    result_path = out / "result.json"
    result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    if result:  # what the node wrote meets its schema, whatever the fault
        assert check_result(result) == [], check_result(result)[:5]
    return proc, result
