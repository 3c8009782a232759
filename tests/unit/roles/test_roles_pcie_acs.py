"""os_baseline's boot-time ACS script, run for real against the lab's pciutils stand-ins.

The script is the role's template rendered by Ansible's templar; lspci and setpci are
hwsim's, answering from a state built from the real capture (build_state). The
variant with ACS switched on (as firmware leaves it) is made in code on that state.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from rackready.site.paths import PROJECT_ROOT
from rackready_lab.hwsim.state import build_state
from rackready_lab.hwsim.sysroot import write_node_state

ROOT = PROJECT_ROOT
TEMPLATE = ROOT / "roles/os_baseline/templates/rackready-pcie-acs.sh.j2"


def shims(bin_dir: Path) -> None:
    """lspci/setpci on PATH that run hwsim's tools from this checkout."""
    bin_dir.mkdir()
    # PATH is only this directory, so a controller's own pciutils cannot stand in.
    (bin_dir / "awk").symlink_to(shutil.which("awk"))
    for tool in ("lspci", "setpci"):
        f = bin_dir / tool
        f.write_text(f"#!/bin/sh\nexec {sys.executable} -m rackready_lab.hwsim.cli.{tool} \"$@\"\n")
        f.chmod(0o755)


def node(tmp_path: Path, acs: bool) -> tuple[Path, dict[str, str]]:
    state = build_state("xe9680-h200", "gpu01")
    state.setdefault("pci", {})["acs_enabled"] = acs
    write_node_state(state, tmp_path / "node")
    shims(tmp_path / "bin")
    env = dict(os.environ, HWSIM_STATE=str(tmp_path / "node/var/lib/hwsim/state.json"),
               PATH=str(tmp_path / "bin"), PYTHONPATH=str(ROOT))
    return tmp_path, env


def script(tmp_path: Path) -> Path:
    text = Templar(loader=DataLoader(), variables={"ansible_managed": "test"}).template(
        TEMPLATE.read_text())
    path = tmp_path / "rackready-pcie-acs"
    path.write_text(text)
    path.chmod(0o755)
    return path


def pci_bridges(env: dict[str, str]) -> list[str]:
    return subprocess.run(["lspci", "-D", "-d", "::0604"], env=env, capture_output=True,
                          text=True, check=True).stdout.splitlines()


def acs_ctl_lines(env: dict[str, str]) -> list[str]:
    out = subprocess.run(["lspci", "-D", "-vvv"], env=env, capture_output=True, text=True,
                         check=True).stdout
    return [ln.strip() for ln in out.splitlines() if "ACSCtl:" in ln]


def test_script_clears_acs_on_every_bridge(tmp_path: Path) -> None:
    tmp, env = node(tmp_path, acs=True)
    before = acs_ctl_lines(env)
    # every bridge with ACS: the root ports and, per GPU, its switch's upstream port and the
    # two downstream ports (GPU and NIC) of hwsim's XE9680 tree
    bridges = pci_bridges(env)
    assert len(bridges) > 8 * 3 and len(before) == len(bridges)
    assert all("ReqRedir+" in ln for ln in before)
    r = subprocess.run([str(script(tmp))], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("ACS cleared on") == len(bridges)
    assert all("ReqRedir-" in ln and "SrcValid-" in ln for ln in acs_ctl_lines(env))


def test_lspci_class_filter_and_setpci_read(tmp_path: Path) -> None:
    _, env = node(tmp_path, acs=True)
    bridges = pci_bridges(env)
    assert all("PCI bridge" in b for b in bridges)
    switch_ports = [b for b in bridges if "PEX890xx" in b]
    assert len(switch_ports) == 8 * 3  # one switch per GPU: its upstream and two downstream
    bdf = switch_ports[0].split()[0]
    read = subprocess.run(["setpci", "-s", bdf, "ECAP_ACS+0x6.w"], env=env,
                          capture_output=True, text=True)
    assert read.returncode == 0 and read.stdout.strip() == "001d"
    # a GPU has no ACS capability: the script's read fails and it moves on
    gpu = subprocess.run(["lspci", "-D", "-d", "10de::0302"], env=env, capture_output=True,
                         text=True, check=True).stdout.split()[0]
    r = subprocess.run(["setpci", "-s", gpu, "ECAP_ACS+0x6.w"], env=env, capture_output=True,
                       text=True)
    assert r.returncode != 0 and "Traceback" not in r.stderr


def test_script_fails_loudly_without_pciutils(tmp_path: Path) -> None:
    tmp, env = node(tmp_path, acs=True)
    (tmp / "bin/setpci").unlink()
    r = subprocess.run([str(script(tmp))], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "setpci/lspci not available" in r.stderr
