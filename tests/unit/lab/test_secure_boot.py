"""Secure Boot: hwsim's mokutil/dkms/modprobe stand-ins, and the nvidia_driver role's
expressions that read them (rendered by Ansible's templar from the role files).

mokutil's messages and exit codes are mokutil 0.6's (--sb-state, --test-key,
--import); the certificate is a real one made with openssl where it is installed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rackready.site.paths import PROJECT_ROOT
from rackready_lab.hwsim.state import DISTRIBUTION_KEY, build_state
from rackready_lab.hwsim.sysroot import write_node_state
from tests.unit.roles.test_roles_parsing import render, task

REPO = PROJECT_ROOT
SB_VAR = ("var/lib/hwsim/root/sys/firmware/efi/efivars/"
          "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c")
KERNEL = "6.1.0-41-amd64"
DRIVER = "580.159.04"


def env(node: Path) -> dict[str, str]:
    return dict(os.environ, HWSIM_STATE=str(node / "var/lib/hwsim/state.json"),
                HWSIM_MODULES_DIR=str(node / "modules.d"),
                HWSIM_MODULES_ROOT=str(node / "lib/modules"),
                HWSIM_KERNEL_RELEASE=KERNEL, HWSIM_DKMS_CONF=str(node / "etc/dkms"),
                HWSIM_MODULES_LOAD_D=str(node / "etc/modules-load.d"),
                HWSIM_GRUB_DEFAULT=str(node / "etc/default"))


def tool(node: Path, name: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"rackready_lab.hwsim.cli.{name}", *args],
                          cwd=REPO, env=env(node), capture_output=True, text=True, input=stdin)


def state(node: Path) -> dict:
    return json.loads((node / "var/lib/hwsim/state.json").read_text())


def make_node(tmp_path: Path, secure_boot: bool, efi: bool = True) -> Path:
    s = build_state("xe9680-h200", "sb", provisioned=False, secure_boot=secure_boot)
    s["secure_boot"]["efi"] = efi
    write_node_state(s, tmp_path)
    (tmp_path / "modules.d").mkdir()
    (tmp_path / "modules.d/nvidia-kernel-open-dkms.list").write_text(
        "nvidia nvidia_modeset nvidia_uvm nvidia_drm nvidia_peermem\n")
    (tmp_path / "modules.d/nvidia-kernel-open-dkms.autoload").write_text("nvidia nvidia_uvm\n")
    return tmp_path


def make_key(tmp_path: Path, cn: str = "rackready module signing sb") -> tuple[Path, Path]:
    key, cert = tmp_path / "mok.priv", tmp_path / "mok.der"
    if shutil.which("openssl"):
        subprocess.run(["openssl", "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-days", "1", "-subj", f"/CN={cn}/", "-keyout", str(key),
                        "-outform", "DER", "-out", str(cert)], check=True, capture_output=True)
    else:  # the few DER bytes the stand-ins read: SEQUENCE ... commonName UTF8String
        cert.write_bytes(b"\x30\x40\x06\x03\x55\x04\x03\x0c" + bytes([len(cn)]) + cn.encode())
        key.write_text("-----BEGIN PRIVATE KEY-----\n")
    return key, cert


def configure_dkms(node: Path, key: Path, cert: Path) -> None:
    conf = node / "etc/dkms/framework.conf.d"
    conf.mkdir(parents=True)
    (conf / "rackready-mok.conf").write_text(f'mok_signing_key="{key}"\nmok_certificate="{cert}"\n')


# --- hwsim ---------------------------------------------------------------------------


@pytest.mark.parametrize("on,line", [(True, "SecureBoot enabled"), (False, "SecureBoot disabled")])
def test_mokutil_sb_state_prints_what_the_real_tool_prints(tmp_path, on, line):
    node = make_node(tmp_path, on)
    r = tool(node, "mokutil", "--sb-state")
    assert (r.returncode, r.stdout) == (0, line + "\n")
    # the EFI variable the kernel exposes says the same (attributes 0x06, then the value)
    assert (node / SB_VAR).read_bytes() == b"\x06\x00\x00\x00" + (b"\x01" if on else b"\x00")


def test_mokutil_without_efi_fails_and_no_efivars(tmp_path):
    node = make_node(tmp_path, False, efi=False)
    r = tool(node, "mokutil", "--sb-state")
    assert r.returncode == 1
    assert r.stderr.strip() == "EFI variables are not supported on this system"
    assert not (node / "var/lib/hwsim/root/sys/firmware/efi").exists()


def test_import_queues_the_key_and_the_next_boot_enrolls_it(tmp_path):
    node = make_node(tmp_path, True)
    _, cert = make_key(tmp_path)
    r = tool(node, "mokutil", "--test-key", str(cert))
    assert (r.returncode, r.stdout.strip()) == (0, f"{cert} is not enrolled")
    assert tool(node, "mokutil", "--import", str(cert), stdin="pw\nother\n").returncode == 1
    r = tool(node, "mokutil", "--import", str(cert), stdin="pw\npw\n")
    assert r.returncode == 0 and "SKIP" not in r.stdout
    r = tool(node, "mokutil", "--test-key", str(cert))
    assert (r.returncode, r.stdout.strip()) == (
        1, f"{cert} is already in the enrollment request")
    assert "SKIP:" in tool(node, "mokutil", "--import", str(cert), stdin="pw\npw\n").stdout
    assert tool(node, "mokutil", "--list-enrolled").stdout.strip() == "MokListRT is empty"
    assert tool(node, "boot", "gpu").returncode == 0
    r = tool(node, "mokutil", "--test-key", str(cert))
    assert (r.returncode, r.stdout.strip()) == (1, f"{cert} is already enrolled")
    listing = tool(node, "mokutil", "--list-enrolled").stdout
    assert "CN=rackready module signing sb" in listing
    if shutil.which("openssl"):
        fp = subprocess.run(["openssl", "x509", "-inform", "DER", "-in", str(cert), "-noout",
                             "-fingerprint", "-sha1"], capture_output=True, text=True).stdout
        assert f"SHA1 Fingerprint: {fp.split('=', 1)[1].strip().lower()}" in listing
    assert tool(node, "mokutil", "--list-new").stdout.strip() == "MokNew is empty"


def test_unsigned_dkms_module_is_rejected_under_secure_boot(tmp_path):
    node = make_node(tmp_path, True)
    assert tool(node, "dkms", "install", "-m", "nvidia", "-v", DRIVER).returncode == 0
    r = tool(node, "modprobe", "nvidia")
    assert r.returncode == 1
    assert r.stderr.strip() == \
        "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service"
    assert "nvidia" not in state(node)["modules"]


def test_the_same_unsigned_module_loads_with_secure_boot_off(tmp_path):
    node = make_node(tmp_path, False)
    assert tool(node, "dkms", "install", "-m", "nvidia", "-v", DRIVER).returncode == 0
    assert tool(node, "modprobe", "nvidia").returncode == 0
    assert "nvidia" in state(node)["modules"]


def test_dkms_signs_with_the_configured_key_which_loads_once_enrolled(tmp_path):
    node = make_node(tmp_path, True)
    key, cert = make_key(tmp_path)
    configure_dkms(node, key, cert)
    r = tool(node, "dkms", "install", "-m", "nvidia", "-v", DRIVER)
    assert r.returncode == 0 and f"Signing key: {key}" in r.stdout
    ko = node / f"lib/modules/{KERNEL}/updates/dkms/nvidia.ko"
    assert ko.read_text().rstrip().endswith("~Module signature appended~")
    # signed, but by a key the firmware does not trust yet
    assert "Key was rejected" in tool(node, "modprobe", "nvidia").stderr
    tool(node, "mokutil", "--import", str(cert), stdin="pw\npw\n")
    assert "Key was rejected" in tool(node, "modprobe", "nvidia").stderr  # pending only
    tool(node, "boot", "gpu")  # the MOK manager enrolls; the autoload list loads the driver
    assert {"nvidia", "nvidia_uvm"} <= set(state(node)["modules"])
    assert tool(node, "nvidia_smi", "-L").stdout.count("GPU ") == 8


def test_boot_skips_an_unsigned_driver_under_secure_boot(tmp_path):
    node = make_node(tmp_path, True)
    tool(node, "dkms", "install", "-m", "nvidia", "-v", DRIVER)
    assert tool(node, "boot", "gpu").returncode == 0
    assert not [m for m in state(node)["modules"] if m.startswith("nvidia")]
    assert tool(node, "nvidia_smi", "-L").returncode == 9


def test_module_signed_by_the_distribution_key_is_trusted(tmp_path):
    node = make_node(tmp_path, True)
    ko = node / f"lib/modules/{KERNEL}/kernel/nvidia-580srv-open/nvidia.ko"
    ko.parent.mkdir(parents=True)
    signer = DISTRIBUTION_KEY["subject"].removeprefix("CN=")
    ko.write_text(f"stub\nsig_id: PKCS#7\nsigner: {signer}\nsig_key: {DISTRIBUTION_KEY['sha1']}\n"
                  "sig_hashalgo: sha256\n~Module signature appended~\n")
    assert tool(node, "modprobe", "nvidia").returncode == 0
    # a DKMS build in updates/ shadows it, as depmod orders them, and is refused unsigned
    tool(node, "modprobe", "-r", "nvidia")
    tool(node, "dkms", "install", "-m", "nvidia", "-v", DRIVER)
    assert "Key was rejected" in tool(node, "modprobe", "nvidia").stderr


def test_sign_file_signs_one_module(tmp_path):
    node = make_node(tmp_path, True)
    key, cert = make_key(tmp_path)
    tool(node, "dkms", "install", "-m", "nvidia", "-v", DRIVER)
    ko = node / f"lib/modules/{KERNEL}/updates/dkms/nvidia.ko"
    assert tool(node, "sign_file", "sha256", str(key), str(cert), str(ko)).returncode == 0
    assert "signer: rackready module signing sb" in ko.read_text()
    assert tool(node, "sign_file", "sha256", str(key)).returncode == 2


def test_ecc_and_mig_changes_wait_for_the_boot_persistence_does_not(tmp_path):
    node = make_node(tmp_path, False)
    s = state(node)
    s["modules"].append("nvidia")
    write_node_state(s, node)
    q = "--query-gpu=index,persistence_mode,ecc.mode.current,ecc.mode.pending,mig.mode.current," \
        "mig.mode.pending"
    assert tool(node, "nvidia_smi", q, "--format=csv,noheader", "-i", "0").stdout == \
        "0, Disabled, Enabled, Enabled, Disabled, Disabled\n"
    r = tool(node, "nvidia_smi", "-i", "0", "-e", "0")
    assert r.returncode == 0 and r.stdout.endswith("All done.\nReboot required.\n")
    pm = tool(node, "nvidia_smi", "-pm", "1").stdout
    assert "Enabled persistence mode for GPU 00000000:" in pm
    assert "pending enable state" in tool(node, "nvidia_smi", "-i", "1", "-mig", "1").stdout
    out = tool(node, "nvidia_smi", q, "--format=csv,noheader").stdout.splitlines()
    assert out[0] == "0, Enabled, Enabled, Disabled, Disabled, Disabled"
    assert out[1] == "1, Enabled, Enabled, Enabled, Disabled, Enabled"
    text = tool(node, "nvidia_smi", "-q", "-i", "1").stdout
    assert "MIG Mode\n        Current                                        : Disabled\n" \
           "        Pending                                        : Enabled" in text
    tool(node, "boot", "gpu")
    out = tool(node, "nvidia_smi", q, "--format=csv,noheader").stdout.splitlines()
    # modes survive, pending ones now current; persistence is the daemon's again
    assert out[0] == "0, Disabled, Disabled, Disabled, Disabled, Disabled"
    assert out[1] == "1, Disabled, Enabled, Enabled, Enabled, Enabled"
    assert tool(node, "nvidia_smi", "-e", "2").returncode == 2


def test_heal_keeps_secure_boot_and_gpu_modes():
    from rackready_lab.hwsim.faults import apply_fault, heal

    s = build_state("xe9680-h200", "sb", secure_boot=True)
    s["secure_boot"]["enrolled_keys"].append({"sha1": "aa", "subject": "CN=x"})
    s["gpus"][2]["ecc_mode"] = s["gpus"][2]["ecc_mode_pending"] = "Disabled"
    healed = heal(apply_fault(s, "xid-79", "2"))
    assert healed["secure_boot"]["enrolled_keys"] == [{"sha1": "aa", "subject": "CN=x"}]
    assert healed["gpus"][2]["ecc_mode"] == "Disabled" and not healed["gpus"][2]["lost"]


# --- the role's expressions ---------------------------------------------------------


def decide_sb(efi: bool, mokutil: str | None = None, var: bytes | None = None) -> str:
    t = task("roles/nvidia_driver/tasks/secure_boot.yml", "Decide the Secure Boot state")
    variables = {**t["vars"],
                 "nvidia_driver_register_efi": {"stat": {"exists": efi}},
                 "nvidia_driver_register_mokutil": {"stat": {"exists": mokutil is not None}},
                 "nvidia_driver_register_sb_state": {"stdout": mokutil or ""},
                 "nvidia_driver_register_sb_var": (
                     {"content": base64.b64encode(var).decode()} if var is not None
                     else {"failed": True})}
    return str(render(t["ansible.builtin.set_fact"]["nvidia_driver_secure_boot"],
                      **variables)).strip()


@pytest.mark.parametrize("kwargs,expected", [
    ({"efi": False}, "off"),  # legacy BIOS boot: no Secure Boot at all
    ({"efi": True, "mokutil": "SecureBoot enabled\n"}, "on"),
    ({"efi": True, "mokutil": "SecureBoot disabled\n"}, "off"),
    # mokutil 0.6 on a machine in setup mode / shim validation off
    ({"efi": True, "mokutil": "SecureBoot enabled\nSecureBoot validation is disabled in shim\n"},
     "on"),
    ({"efi": True, "mokutil": "EFI variables are not supported on this system"}, "unknown"),
    ({"efi": True, "var": b"\x06\x00\x00\x00\x01"}, "on"),
    ({"efi": True, "var": b"\x06\x00\x00\x00\x00"}, "off"),
    ({"efi": True, "var": b"\x07\x00\x00\x00\x01"}, "on"),
    ({"efi": True}, "unknown"),  # no mokutil and the variable unreadable
])
def test_role_reads_the_secure_boot_state(kwargs, expected):
    assert decide_sb(**kwargs) == expected


def test_role_reads_hwsims_efi_variable_and_mokutil_alike(tmp_path):
    for on in (True, False):
        node = make_node(tmp_path / str(on), on)
        var = (node / SB_VAR).read_bytes()
        said = tool(node, "mokutil", "--sb-state").stdout
        assert decide_sb(True, var=var) == decide_sb(True, mokutil=said) == ("on" if on else "off")


def module_source(sb: str, policy: str = "", mok_files=(False, False), create=False,
                  test_key: str = "") -> tuple[str, str]:
    t = task("roles/nvidia_driver/tasks/secure_boot.yml",
             "Choose how the driver modules get loaded")
    facts = t["ansible.builtin.set_fact"]
    variables = {"nvidia_driver_secure_boot": sb,
                 "nvidia_driver_register_signed": {"stdout": policy},
                 "nvidia_driver_mok_create": create,
                 "nvidia_driver_register_mok_files": {
                     "results": [{"stat": {"exists": e}} for e in mok_files]},
                 "nvidia_driver_register_mok_test": {"stdout": test_key}}
    return (str(render(facts["nvidia_driver_module_source"], **variables)).strip(),
            str(render(facts["__nvidia_driver_mok_enrollment"], **variables)).strip())


POLICY = """linux-modules-nvidia-580-server-open-6.8.0-45-generic:
  Installed: (none)
  Candidate: 6.8.0-45.45+1
  Version table:
     6.8.0-45.45+1 500
        500 http://archive.ubuntu.com/ubuntu noble-updates/restricted amd64 Packages
"""


def test_role_prefers_signed_modules_then_mok_then_stops():
    assert module_source("off")[0] == "unsigned"
    assert module_source("on", POLICY)[0] == "signed"
    no_candidate = POLICY.replace("Candidate: 6.8.0-45.45+1", "Candidate: (none)")
    assert module_source("on", no_candidate)[0] == "none"
    assert module_source("on", "")[0] == "none"  # apt-cache policy of an unknown package
    assert module_source("on", "", (True, True))[0] == "mok"
    assert module_source("on", "", (True, False))[0] == "none"
    assert module_source("on", "", (False, False), create=True)[0] == "mok"
    assert module_source("on", "", (True, True), test_key="/k.der is already enrolled")[1] == \
        "enrolled"
    assert module_source("on", "", (True, True),
                         test_key="/k.der is already in the enrollment request")[1] == "pending"
    assert module_source("on", "", (True, True), test_key="/k.der is not enrolled")[1] == "absent"


def test_the_no_signing_path_failure_is_one_line_and_before_any_install():
    tasks = yaml.safe_load((REPO / "roles/nvidia_driver/tasks/main.yml").read_text())
    names = [t["name"] for t in tasks]
    assert names.index("Import the Secure Boot decision") < names.index(
        "Install the kernel headers for the running kernel")
    assert names.index("Import the Secure Boot decision") < names.index(
        "Install the driver packages at the pinned version")
    t = task("roles/nvidia_driver/tasks/secure_boot.yml",
             "Stop when Secure Boot is on and nothing can sign the driver")
    msg = str(render(t["ansible.builtin.fail"]["msg"], nvidia_driver_signed_modules_package="",
                     nvidia_driver_mok_key="/var/lib/rackready/mok/rackready-mok.priv",
                     ansible_facts={"distribution": "Debian", "kernel": KERNEL}))
    assert "\n" not in msg.strip() and msg.startswith("nvidia_driver: Secure Boot is on")
    assert "nothing was installed" in msg and "none on Debian" in msg


def gpu_modes(tmp_path: Path, **want) -> tuple[list[dict], list[int]]:
    node = make_node(tmp_path, False)
    s = state(node)
    s["modules"].append("nvidia")
    s["gpus"][3]["ecc_mode"] = s["gpus"][3]["ecc_mode_pending"] = "Disabled"
    s["gpus"][5]["mig_mode"] = s["gpus"][5]["mig_mode_pending"] = "Enabled"
    write_node_state(s, node)
    read = task("roles/nvidia_driver/tasks/gpu_modes.yml", "Read the GPU modes")
    cmd = read["ansible.builtin.command"].split()
    out = tool(node, "nvidia_smi", *cmd[1:]).stdout
    parse = task("roles/nvidia_driver/tasks/gpu_modes.yml", "Parse the GPU modes")
    variables = {"nvidia_driver_register_modes": {"stdout": out},
                 "nvidia_driver_persistence_enabled": True, "nvidia_driver_ecc_enabled": True,
                 "nvidia_driver_mig_enabled": False, **want}
    modes = render(parse["ansible.builtin.set_fact"]["nvidia_driver_gpu_modes"], **variables)
    want_t = {k: render(v, **variables)
              for k, v in parse["ansible.builtin.set_fact"]["__nvidia_driver_want"].items()}
    reboot = task("roles/nvidia_driver/tasks/gpu_modes.yml",
                  "Work out which GPUs wait for a reboot")
    pending = render(reboot["ansible.builtin.set_fact"]["nvidia_driver_gpu_modes_reboot"],
                     nvidia_driver_gpu_modes=modes, __nvidia_driver_want=want_t)
    return modes, pending


def test_role_parses_gpu_modes_and_flags_the_reboot(tmp_path):
    modes, pending = gpu_modes(tmp_path)
    assert len(modes) == 8
    assert modes[3] == {"index": 3, "persistence": "Disabled", "ecc": "Disabled",
                        "ecc_pending": "Disabled", "mig": "Disabled", "mig_pending": "Disabled"}
    assert pending == [3, 5]


def test_role_with_mig_wanted_flags_every_other_gpu(tmp_path):
    _, pending = gpu_modes(tmp_path, nvidia_driver_mig_enabled=True)
    assert pending == [0, 1, 2, 3, 4, 6, 7]


def test_role_defaults_match_what_validation_expects():
    # The validation profile's gpu.*_mode thresholds and the role's defaults are one fact.
    from validation.profile import inventory_thresholds

    defaults = yaml.safe_load((REPO / "roles/nvidia_driver/defaults/main.yml").read_text())
    inv = yaml.safe_load((REPO / "validation/profiles/xe9680-h200.yml").read_text())["inventory"]
    expected = {t.metric: t.value for t in inventory_thresholds(inv, "test")
                if t.metric in ("gpu.ecc_mode", "gpu.mig_mode", "gpu.persistence_mode")}
    on = {True: "Enabled", False: "Disabled"}
    assert expected == {"gpu.ecc_mode": on[defaults["nvidia_driver_ecc_enabled"]],
                        "gpu.mig_mode": on[defaults["nvidia_driver_mig_enabled"]],
                        "gpu.persistence_mode": on[defaults["nvidia_driver_persistence_enabled"]]}


def test_lab_mirror_has_mokutil_and_dkms_and_the_driver_builds_through_dkms():
    from rackready_lab.hwsim.packages import package_specs

    specs = {p.name: p for p in package_specs()}
    assert specs["mokutil"].tools == {"/usr/bin/mokutil": "cli.mokutil"}
    assert specs["dkms"].tools["/usr/sbin/dkms"] == "cli.dkms"
    dkms_pkg = specs["nvidia-kernel-open-dkms"]
    assert "dkms" in dkms_pkg.depends
    assert f"dkms install -m nvidia -v {DRIVER}" in dkms_pkg.postinst
