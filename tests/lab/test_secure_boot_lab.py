"""Secure Boot and the GPU modes on a provisioned lab node, through the driver stage.

One node (lab-gpu02, no NVSwitch, so no fabric manager waits on the driver) is
switched to Secure Boot on in its firmware (hwsim state, as a person would in the
BIOS setup), with ECC turned off on GPU 0 and MIG on on GPU 1, then rebooted: the
unsigned DKMS module is refused and nvidia-smi fails, as on a field machine. Then,
in order (one module fixture, the results recorded):

1. no signing path (no signed package on Debian, no MOK key): the role stops with
   one line and installs nothing;
2. nvidia_driver_mok_create: DKMS re-signs with a new site key, mokutil queues its
   enrollment, a reboot is flagged; the module is not loaded yet;
3. lab.reboot: the lab confirms the enrollment (a person does at the console) and
   the signed module loads at boot;
4. the stage again: ECC/MIG set for the next boot, persistence on, reboot flagged;
5. lab.reboot, then the modes match the profile; a further run changes nothing and
   --check --diff runs clean.

The node is put back afterwards (Secure Boot off, keys and DKMS config removed,
modes as before, rebooted), so later lab tests see the node they expect.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import shutil
import time
from dataclasses import dataclass

import pytest
import yaml

from rackready.steps.provision import RunResult, run_playbook
from rackready_lab import lab
from rackready_lab.hwsim.sysroot import locked_node_state, read_node_state
from validation.profile import load_profile

pytestmark = pytest.mark.lab

NODE = "lab-gpu02"
MOK_DIR = "/var/lib/rackready/mok"
MOK_CERT = f"{MOK_DIR}/rackready-mok.der"
DKMS_CONF = "/etc/dkms/framework.conf.d/rackready-mok.conf"
MODES = "index,persistence_mode,ecc.mode.current,ecc.mode.pending,mig.mode.current,mig.mode.pending"
MOK_VARS = {"nvidia_driver_mok_create": True, "nvidia_driver_mok_password": "rackready-lab"}


@dataclass
class SecureBootRun:
    smi_rc_at_secure_boot: int
    refused: RunResult
    packages_before: str
    packages_after: str
    with_key: RunResult
    test_key_after_import: str
    modules_before_enrollment: list[str]
    modules_after_enrollment: list[str]
    modes_run: RunResult
    modes_after_reboot: list[list[str]]
    converged: RunResult
    check: RunResult


_RUNS = itertools.count(1)


def _driver(lab_nodes, check: bool = False, **extravars) -> RunResult:
    r = run_playbook(lab_nodes.inventory, "site.yml", tags="driver", limit=NODE, quiet=True,
                     check=check, diff=check, extravars=extravars or None)
    # run_playbook writes every run's output to one file: keep this run's own copy
    kept = r.stdout_path.with_name(f"secure-boot-driver-{next(_RUNS)}.log")
    shutil.copyfile(r.stdout_path, kept)
    return dataclasses.replace(r, stdout_path=kept)


def _wait_for_persistenced(name: str, timeout_s: float = 30) -> None:
    # After a reboot the daemon (Type=simple) marks persistence on a moment after it starts.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        services = read_node_state(lab.find(name).root).get("services", {})
        if services.get("nvidia-persistenced", {}).get("running"):
            return
        time.sleep(0.5)


def _nvidia_modules(name: str) -> list[str]:
    return [m for m in read_node_state(lab.find(name).root)["modules"] if m.startswith("nvidia")]


@pytest.fixture(scope="module")
def sb_run(provisioned_lab) -> SecureBootRun:
    spec = lab.find(NODE)
    with locked_node_state(spec.root) as state:
        saved_sb = copy.deepcopy(state.get("secure_boot"))
        saved_gpus = copy.deepcopy(state["gpus"])
        state["secure_boot"]["enabled"] = True
        state["gpus"][0]["ecc_mode"] = state["gpus"][0]["ecc_mode_pending"] = "Disabled"
        state["gpus"][1]["mig_mode"] = state["gpus"][1]["mig_mode_pending"] = "Enabled"
    sh = provisioned_lab.sh
    try:
        lab.reboot(NODE)
        smi_rc = sh(NODE, "nvidia-smi -L", check=False).returncode
        before = sh(NODE, "dpkg-query -W -f='${Package} ${Version} ${Status}\\n'").stdout
        refused = _driver(provisioned_lab)
        after = sh(NODE, "dpkg-query -W -f='${Package} ${Version} ${Status}\\n'").stdout

        with_key = _driver(provisioned_lab, **MOK_VARS)
        test_key = sh(NODE, f"mokutil --test-key {MOK_CERT}", check=False).stdout.strip()
        before_enroll = _nvidia_modules(NODE)
        lab.reboot(NODE)
        after_enroll = _nvidia_modules(NODE)

        _wait_for_persistenced(NODE)
        modes_run = _driver(provisioned_lab, **MOK_VARS)
        lab.reboot(NODE)
        _wait_for_persistenced(NODE)
        out = sh(NODE, f"nvidia-smi --query-gpu={MODES} --format=csv,noheader").stdout
        modes = [[f.strip() for f in line.split(",")] for line in out.splitlines()]
        converged = _driver(provisioned_lab, **MOK_VARS)
        check = _driver(provisioned_lab, check=True, **MOK_VARS)
        return SecureBootRun(smi_rc, refused, before, after, with_key, test_key, before_enroll,
                             after_enroll, modes_run, modes, converged, check)
    finally:
        # Back to the node the other lab tests expect: Secure Boot off, no MOK key or
        # DKMS signing config, unsigned modules rebuilt, GPU modes as they were.
        sh(NODE, f"rm -rf {MOK_DIR} {DKMS_CONF}; dkms install -m nvidia -v 580.159.04 "
                 "-k $(uname -r) --force >/dev/null", check=False)
        with locked_node_state(spec.root) as state:
            state["secure_boot"] = saved_sb
            for g, old in zip(state["gpus"], saved_gpus, strict=True):
                for key in ("ecc_mode", "ecc_mode_pending", "mig_mode", "mig_mode_pending"):
                    g[key] = old.get(key, g.get(key))
        lab.reboot(NODE)
        assert "nvidia" in _nvidia_modules(NODE), "the node did not come back with its driver"


def test_secure_boot_refuses_the_unsigned_dkms_module_at_boot(sb_run):
    assert sb_run.smi_rc_at_secure_boot == 9  # "couldn't communicate with the NVIDIA driver"


def test_no_signing_path_is_one_line_before_anything_is_installed(sb_run):
    r = sb_run.refused
    assert r.rc != 0 and r.stats[NODE].get("failures", 0) == 1
    reason = r.failures[NODE]
    assert "Secure Boot is on and nothing can sign the driver modules" in reason
    assert "nothing was installed" in reason and "\n" not in reason
    assert sb_run.packages_after == sb_run.packages_before


def test_site_key_signs_dkms_and_its_enrollment_waits_for_the_reboot(sb_run):
    r = sb_run.with_key
    assert r.rc == 0 and r.failures == {}, r.failures
    assert "MOK manager" in r.stdout_path.read_text()  # the console step is said
    assert sb_run.test_key_after_import == f"{MOK_CERT} is already in the enrollment request"
    assert sb_run.modules_before_enrollment == []


def test_driver_loads_after_the_enrollment_reboot(sb_run):
    assert {"nvidia", "nvidia_uvm"} <= set(sb_run.modules_after_enrollment)


def test_gpu_mode_changes_flag_a_reboot(sb_run):
    r = sb_run.modes_run
    assert r.rc == 0 and r.failures == {}, r.failures
    assert r.changed()[NODE] > 0
    assert "reboot pending: GPU 0,1 ECC/MIG mode" in r.stdout_path.read_text()


def test_modes_match_the_profile_after_the_reboot(provisioned_lab, sb_run):
    groups = yaml.safe_load(provisioned_lab.inventory.read_text())["all"]["children"]
    host_vars = next(g["hosts"][NODE] for g in groups.values() if NODE in g["hosts"])
    profile = load_profile(host_vars["rackready_profile"])
    want = {m: profile.thresholds_for(m)[0].value
            for m in ("gpu.persistence_mode", "gpu.ecc_mode", "gpu.mig_mode")}
    assert len(sb_run.modes_after_reboot) == profile.gpu("count")
    for idx, pm, ecc, ecc_pending, mig, mig_pending in sb_run.modes_after_reboot:
        assert pm == want["gpu.persistence_mode"], idx
        assert ecc == ecc_pending == want["gpu.ecc_mode"], idx
        assert mig == mig_pending == want["gpu.mig_mode"], idx


def test_converged_run_changes_nothing_and_check_mode_works(sb_run):
    assert sb_run.converged.rc == 0 and sb_run.converged.changed() == {NODE: 0}
    assert sb_run.check.rc == 0 and sb_run.check.failures == {}, sb_run.check.failures
