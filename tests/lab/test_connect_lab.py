"""The lab is reached as a real rack is: a non-root admin, only through the jump host,
root through sudo, with vault-encrypted group_vars (rackready_lab/inventory.py)."""

from __future__ import annotations

import json

import pytest

from rackready.remote import ssh
from rackready.remote.runner import run_command
from rackready.site import inventory
from rackready.steps.validate import NODE_BASE, run_validation
from rackready_lab import config, keys
from rackready_lab.inventory import LAB_INVENTORY
from rackready_lab.shell import run

pytestmark = pytest.mark.lab

NODE = "lab-gpu01"


def _ssh(*args: str):
    return run(["ssh", "-F", str(keys.ssh_config()), *args], check=False, timeout=60)


def test_direct_root_login_is_refused(lab_nodes):
    for target in (lab_nodes.spec(NODE).ip, config.jump_spec().ip):
        proc = _ssh(f"root@{target}", "true")
        assert proc.returncode == 255 and "Permission denied" in proc.stderr, proc.stderr
    # not even through the jump host
    proc = _ssh("-J", f"{config.ADMIN_USER}@{config.jump_spec().ip}",
                f"root@{lab_nodes.spec(NODE).ip}", "true")
    assert proc.returncode == 255 and "Permission denied" in proc.stderr, proc.stderr


def test_the_admin_reaches_a_node_only_through_the_jump_host(lab_nodes):
    admin, jump, ip = config.ADMIN_USER, config.jump_spec().ip, lab_nodes.spec(NODE).ip
    direct = _ssh(f"{admin}@{ip}", "true")
    assert direct.returncode == 255 and "Permission denied" in direct.stderr, direct.stderr
    via = _ssh("-J", f"{admin}@{jump}", f"{admin}@{ip}", "id -un; sudo -n id -u")
    assert via.returncode == 0, via.stderr
    assert via.stdout.split() == [admin, "0"]
    # the jump host gives no root: it is a way through, nothing more
    on_jump = _ssh(f"{admin}@{jump}", "sudo -n true")
    assert on_jump.returncode != 0


def test_the_inventory_describes_that_path_and_rackready_walks_it(lab_nodes):
    node = inventory.find(NODE, "lab")
    jump = config.jump_spec()
    assert (node.user, node.become) == (config.ADMIN_USER, True)
    assert node.jump is not None and (node.jump.address, node.jump.user) == (jump.ip,
                                                                            config.ADMIN_USER)
    assert node.jump.known_hosts == str(keys.known_hosts())
    client = ssh.connect(node)
    try:
        res = run_command(client, "id -un; echo $SSH_CONNECTION", timeout_s=60, idle_s=60,
                          max_stdout=1 << 16, max_stderr=1 << 16)
        rc, out = res.rc, res.out
    finally:
        client.close()
    assert rc == 0
    user, connection = out.splitlines()[0], out.splitlines()[1]
    assert user == config.ADMIN_USER
    assert connection.split()[0] == jump.ip  # the session came from the jump host


def _lab_secret() -> str:
    """The BMC password stand-in, decrypted with the lab's vault password."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    vault = LAB_INVENTORY / "group_vars" / "all" / "vault.yml"
    assert vault.read_text().startswith("$ANSIBLE_VAULT;")
    password = config.vault_password_file().read_bytes().strip()
    plain = VaultLib([("default", VaultSecret(password))]).decrypt(vault.read_bytes()).decode()
    secret = plain.split(":", 1)[1].strip()
    assert len(secret) >= 16
    return secret


def test_the_group_vars_secret_is_vault_encrypted_and_never_printed(provisioned_lab):
    secret = _lab_secret()
    log = (inventory.PROJECT_ROOT / "artifacts" / "provision-last.log").read_text()
    assert "lab-gpu01" in log and secret not in log


def test_validate_runs_the_suite_as_root_through_sudo(provisioned_lab, tmp_path):
    out = tmp_path / "as-root"
    run_validation(node=NODE, inventory="lab", level="quick", out=str(out),
                   formats="json", only="kernel.cmdline")
    judged = json.loads((out / NODE / "judgement.json").read_text())
    assert judged["outcome"] == "PARTIAL", judged["outcome_reason"]  # narrowed, but ran
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    result = f"{NODE_BASE}/runs/{run_id}/out/result.json"
    owner = provisioned_lab.sh(NODE, f"stat -c %U {result}").stdout.strip()
    assert owner == "root"
    log = (out / NODE / "node.log").read_text()
    assert "$ sudo -n -- sh -c" in log
    secret = _lab_secret().encode()
    for path in out.rglob("*"):  # the vaulted secret never reaches the run directory
        if path.is_file():
            assert secret not in path.read_bytes(), path
