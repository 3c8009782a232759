"""Reaching nodes as Ansible does: connection facts from the inventory (through Ansible's
own variable manager, vault included) and SSH through a jump host (FakeNode-based)."""

from __future__ import annotations

import dataclasses
import getpass
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import paramiko
import pytest
from fake_node import FakeNode

from rackready.errors import UserError
from rackready.remote import ssh
from rackready.remote.runner import run_command
from rackready.site import inventory
from rackready.site.connection import Hop
from rackready.site.inventory import provisioned
from rackready.site.paths import PROJECT_ROOT
from rackready.site.vault import vault_env
from rackready.steps import validate

ROOT = PROJECT_ROOT
PASSWORD = "correct horse battery staple"


def write_inventory(folder: Path, host_vars: dict, group_vars: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    hv = {"rackready_profile": "xe9680-h200", **host_vars}
    (folder / "hosts.yml").write_text(json.dumps({"all": {"hosts": {"gpu01": hv}}}))
    if group_vars is not None:
        (folder / "group_vars").mkdir(exist_ok=True)
        (folder / "group_vars" / "all.yml").write_text(json.dumps(group_vars))
    return folder / "hosts.yml"


def node(tmp_path: Path, **host_vars) -> inventory.Node:
    return inventory.find("gpu01", str(write_inventory(tmp_path / "inv", host_vars)))


@pytest.fixture(autouse=True)
def no_vault_settings(monkeypatch):
    for name in ("ANSIBLE_VAULT_PASSWORD_FILE", "ANSIBLE_VAULT_IDENTITY_LIST",
                 "ANSIBLE_HOST_KEY_CHECKING", "ANSIBLE_SSH_ARGS"):
        monkeypatch.delenv(name, raising=False)


# -- connection facts -------------------------------------------------------------------


def test_user_port_key_and_become_come_from_the_ansible_variables(tmp_path):
    n = node(tmp_path, ansible_host="192.0.2.5", ansible_user="admin", ansible_port=2200,
             ansible_ssh_private_key_file="~/keys/rack", ansible_become=True)
    assert (n.address, n.user, n.port, n.become) == ("192.0.2.5", "admin", 2200, True)
    assert n.key_file == str(Path("~/keys/rack").expanduser())
    assert n.jump is None and n.proxy_command is None


def test_templated_facts_are_rendered_as_ansible_renders_them(tmp_path):
    n = node(tmp_path, site_admin="ops", ansible_user="{{ site_admin }}",
             ansible_become="{{ 1 == 1 }}")
    assert n.user == "ops" and n.become is True


@pytest.mark.parametrize("args, hop", [
    ("-o ProxyJump=jumper@bastion:2222", Hop("bastion", 2222, "jumper", None, None)),
    ("-J jumper@bastion", Hop("bastion", 22, "jumper", None, None)),
    ("-oProxyJump=bastion", Hop("bastion", 22, getpass.getuser(), None, None)),
    ("-o 'ProxyJump ssh://jumper@[fd00::7]:2022'", Hop("fd00::7", 2022, "jumper", None, None)),
])
def test_proxyjump_forms(tmp_path, args, hop):
    n = node(tmp_path, ansible_ssh_common_args=args)
    assert n.jump == hop


def test_the_jump_host_uses_the_nodes_known_hosts_and_key(tmp_path):
    n = node(tmp_path, ansible_ssh_private_key_file="/k/id",
             ansible_ssh_common_args="-o UserKnownHostsFile=/k/known -J j@bastion")
    assert n.jump == Hop("bastion", 22, "j", "/k/id", "/k/known")
    assert n.known_hosts == "/k/known"


def test_a_config_file_gives_the_jump_host_its_own_options(tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host bastion\n  HostName 192.0.2.9\n  Port 2022\n  User hop\n"
                   "  IdentityFile /k/hop\n  UserKnownHostsFile /k/hop_known\n")
    n = node(tmp_path, ansible_ssh_private_key_file="/k/id",
             ansible_ssh_common_args=f"-F {cfg} -o UserKnownHostsFile=/k/known "
                                     "-o ProxyJump=bastion")
    assert n.jump == Hop("192.0.2.9", 2022, "hop", "/k/hop", "/k/hop_known")
    assert (n.key_file, n.known_hosts) == ("/k/id", "/k/known")


def test_more_than_one_hop_is_refused(tmp_path):
    with pytest.raises(UserError, match="2 jump hosts; rackready supports one"):
        node(tmp_path, ansible_ssh_common_args="-o ProxyJump=a@one,b@two")


@pytest.mark.parametrize("args", ["-o StrictHostKeyChecking=no",
                                  "-o StrictHostKeyChecking=accept-new",
                                  "-oStrictHostKeyChecking=off"])
def test_host_key_checking_off_is_refused(tmp_path, args):
    with pytest.raises(UserError, match="refused: rackready verifies every host key"):
        node(tmp_path, ansible_ssh_common_args=args)


def test_ansible_host_key_checking_false_is_refused(tmp_path):
    with pytest.raises(UserError, match="StrictHostKeyChecking=no is refused"):
        node(tmp_path, ansible_host_key_checking=False)


def test_ssh_takes_the_first_value_in_ansibles_order(tmp_path):
    # ansible_user/_port/_key come before ansible_ssh_common_args on Ansible's command line
    n = node(tmp_path, ansible_user="admin",
             ansible_ssh_common_args="-o User=other -o Port=2022 -i /k/a",
             ansible_ssh_extra_args="-p 2023 -o IdentityFile=/k/b")
    assert (n.user, n.port, n.key_file) == ("admin", 2022, "/k/a")
    n = node(tmp_path, ansible_ssh_common_args="-l other")
    assert n.user == "other" and n.port == 22


def test_unknown_options_are_ignored_and_logged(tmp_path, caplog):
    with caplog.at_level(logging.DEBUG, logger="rackready.site"):
        n = node(tmp_path, ansible_ssh_common_args="-o ServerAliveInterval=30 -C -c aes256-ctr "
                                                   "-o ProxyJump=j@bastion")
    assert n.jump is not None
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "ServerAliveInterval=30" in logged and "-c aes256-ctr" in logged


def test_proxy_command_is_expanded(tmp_path):
    n = node(tmp_path, ansible_host="192.0.2.5", ansible_user="admin",
             ansible_ssh_common_args="-o ProxyCommand='nc -X 5 -x proxy:1080 %h %p # %r 100%%'")
    assert n.proxy_command == "nc -X 5 -x proxy:1080 192.0.2.5 22 # admin 100%"


@pytest.mark.parametrize("var, value, words", [
    ("ansible_become_method", "su", "ansible_become_method=su is not supported"),
    ("ansible_become_user", "postgres", "the suite must run as root"),
])
def test_become_other_than_sudo_to_root_is_one_line(tmp_path, var, value, words):
    with pytest.raises(UserError, match=words):
        node(tmp_path, ansible_become=True, **{var: value})


# -- vault ------------------------------------------------------------------------------


def _vault(text: str) -> bytes:
    from ansible.parsing.vault import VaultLib, VaultSecret

    return VaultLib([("default", VaultSecret(PASSWORD.encode()))]).encrypt(text.encode())


def _inline(value: str) -> str:
    body = _vault(value).decode().replace("\n", "\n  ")
    return f"!vault |\n  {body}"


@pytest.fixture
def vaulted(tmp_path):
    """host_vars/gpu01.yml wholly encrypted (a BMC password and the login user), plus an
    inline-encrypted value in group_vars."""
    hosts = write_inventory(tmp_path / "inv", {"ansible_host": "192.0.2.5"})
    hv = tmp_path / "inv" / "host_vars"
    hv.mkdir()
    (hv / "gpu01.yml").write_bytes(_vault("vault_bmc: hunter2-bmc\nvault_user: admin\n"))
    (tmp_path / "inv" / "group_vars").mkdir()
    (tmp_path / "inv" / "group_vars" / "all.yml").write_text(
        "rackready_bmc_password: '{{ vault_bmc }}'\n"
        f"inline_secret: {_inline('s3cret-inline')}\n")
    pw = tmp_path / "vault-pass"
    pw.write_text(PASSWORD + "\n")
    return hosts, pw


def test_vaulted_vars_are_decrypted_with_the_password_file(vaulted, monkeypatch):
    hosts, pw = vaulted
    (hosts.parent / "group_vars" / "all.yml").write_text(
        "ansible_user: '{{ vault_user }}'\nansible_port: " + _inline("2222") + "\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(pw))
    n = inventory.find("gpu01", str(hosts))
    assert (n.user, n.port) == ("admin", 2222)


def test_an_inventory_may_name_its_vault_password_file(vaulted, monkeypatch):
    """rackready_vault_password_file in the plain group_vars/all, relative to the inventory's
    folder (the lab's inventory names its own so): used when none is configured."""
    hosts, pw = vaulted
    all_yml = hosts.parent / "group_vars" / "all.yml"
    all_yml.write_text("ansible_user: '{{ vault_user }}'\n")
    assert vault_env(hosts) == {}
    with pytest.raises(UserError, match="gpu01.yml is vault-encrypted"):
        inventory.find("gpu01", str(hosts))
    all_yml.write_text(all_yml.read_text() + "rackready_vault_password_file: ../vault-pass\n")
    named = vault_env(hosts)["ANSIBLE_VAULT_PASSWORD_FILE"]
    assert Path(named).resolve() == pw.resolve()
    assert inventory.find("gpu01", str(hosts)).user == "admin"
    # a password configured the way Ansible reads it wins over the inventory's
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(pw))
    assert vault_env(hosts) == {}
    # a named file that is not there is no password (the refusal says what is missing)
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE")
    all_yml.write_text("rackready_vault_password_file: /nonexistent/vault-pass\n")
    assert vault_env(hosts) == {}


def test_vault_identity_list_works_too(vaulted, monkeypatch):
    hosts, pw = vaulted
    (hosts.parent / "group_vars" / "all.yml").write_text("ansible_user: '{{ vault_user }}'\n")
    monkeypatch.setenv("ANSIBLE_VAULT_IDENTITY_LIST", f"rack@{pw}")
    assert inventory.find("gpu01", str(hosts)).user == "admin"


def test_without_a_password_inline_vaulted_values_not_needed_do_not_stop_validate(vaulted):
    hosts, _ = vaulted
    (hosts.parent / "host_vars" / "gpu01.yml").unlink()  # only the inline secret is left
    (hosts.parent / "group_vars" / "all.yml").write_text(
        f"inline_secret: {_inline('s3cret-inline')}\n")
    n = inventory.find("gpu01", str(hosts))
    assert n.address == "192.0.2.5"


def test_a_wholly_encrypted_vars_file_without_a_password_is_refused_by_validate(vaulted):
    """Skipped, the file's plain settings (fabric, user, what a node lacks) would silently
    leave the plan; validate refuses it as provision does."""
    hosts, _ = vaulted
    for find in (lambda: inventory.find("gpu01", str(hosts)),
                 lambda: inventory.load(str(hosts))):
        with pytest.raises(UserError) as err:
            find()
        message = str(err.value)
        assert "gpu01.yml is vault-encrypted and no vault password is given" in message
        assert "\n" not in message and "hunter2" not in message


def test_a_needed_vaulted_value_without_a_password_is_one_line(vaulted):
    hosts, _ = vaulted
    (hosts.parent / "host_vars" / "gpu01.yml").unlink()
    text = "ansible_user: " + _inline("admin")
    (hosts.parent / "group_vars" / "all.yml").write_text(text + "\n")
    with pytest.raises(UserError) as err:
        inventory.find("gpu01", str(hosts))
    message = str(err.value)
    assert "ansible_user needs a vault password" in message and "\n" not in message
    assert "admin" not in message and "ANSIBLE_VAULT_PASSWORD_FILE" in message


def test_a_wrong_vault_password_is_one_line_and_never_shows_a_secret(vaulted, monkeypatch,
                                                                      tmp_path):
    hosts, _ = vaulted
    wrong = tmp_path / "wrong"
    wrong.write_text("not it\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(wrong))
    with pytest.raises(UserError, match="malformed inventory: Decryption failed") as err:
        inventory.find("gpu01", str(hosts))
    assert "hunter2" not in str(err.value)


# -- the command line: a person's mistakes are one line, exit 2 -------------------------


def invoke(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("task", ["provision", "bundle", "validate"])
@pytest.mark.parametrize("text, words", [
    ("all:\n  children: [unclosed\n", "malformed inventory"),
    ("all:\n  hosts: {}\n", "names no host"),
    ("all:\n  hosts:\n    gpu01: {ansible_host: [1, 2}\n", "malformed inventory"),
])
def test_malformed_or_empty_inventory_is_exit_2_for_every_task(tmp_path, task, text, words):
    inv = tmp_path / "hosts.yml"
    inv.write_text(text)
    proc = invoke(task, "--inventory", str(inv))
    err = proc.stderr.strip()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(err.splitlines()) == 1, err
    assert words in err


def test_provision_refuses_an_encrypted_file_it_cannot_open(vaulted):
    hosts, _ = vaulted
    proc = invoke("provision", "--inventory", str(hosts))
    assert proc.returncode == 2
    assert "is vault-encrypted and no vault password is given" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# -- SSH through a jump host ------------------------------------------------------------


@pytest.fixture
def pair(tmp_path):
    target = FakeNode(tmp_path / "target")
    jump = FakeNode(tmp_path / "jump")
    jump.forwarding = True
    yield jump, target
    jump.close()
    target.close()


def _via(jump: FakeNode, target: FakeNode, **hop) -> inventory.Node:
    j = jump.node
    return dataclasses.replace(target.node, jump=Hop(**{
        "address": j.address, "port": j.port, "user": "hopper", "key_file": j.key_file,
        "known_hosts": j.known_hosts, **hop}))


def test_a_node_is_reached_through_its_jump_host(pair):
    jump, target = pair
    client = ssh.connect(_via(jump, target), timeout_s=5)
    try:
        res = run_command(client, "echo through", timeout_s=10, idle_s=10,
                          max_stdout=1 << 16, max_stderr=1 << 16)
        assert (res.rc, res.out, res.err) == (0, "through\n", "")
    finally:
        client.close()
    assert jump.forwarded == [("127.0.0.1", target.node.port)]
    assert jump.commands == [] and target.commands == ["echo through"]


def test_the_jump_hosts_key_is_verified_and_the_hop_named(pair, tmp_path):
    jump, target = pair
    empty = tmp_path / "empty_known"
    empty.write_text("")
    with pytest.raises(UserError, match=r"jump host hopper@127\.0\.0\.1:\d+: .*not in "
                                        "known_hosts"):
        ssh.connect(_via(jump, target, known_hosts=str(empty)), timeout_s=5)
    assert jump.forwarded == []


def test_the_nodes_key_is_verified_through_the_jump(pair, tmp_path):
    jump, target = pair
    forged = tmp_path / "forged"
    key = paramiko.ECDSAKey.generate()
    forged.write_text(f"[127.0.0.1]:{target.node.port} {key.get_name()} {key.get_base64()}\n")
    n = dataclasses.replace(_via(jump, target), known_hosts=str(forged))
    with pytest.raises(UserError, match="through the jump host 127.0.0.1.*host key CHANGED"):
        ssh.connect(n, timeout_s=5)


def test_a_jump_host_that_refuses_forwarding_is_one_line(pair):
    jump, target = pair
    jump.forwarding = False
    with pytest.raises(ssh.NodeUnreachable, match="jump host .* could not open a channel to "
                                                  "127.0.0.1"):
        ssh.connect(_via(jump, target), timeout_s=5)


def test_a_dead_jump_host_is_named(pair):
    jump, target = pair
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ssh.NodeUnreachable, match=rf"jump host hopper@127\.0\.0\.1:{port}: "
                                                  "unreachable"):
        ssh.connect(_via(jump, target, port=port), timeout_s=5)


def test_validate_runs_the_suite_through_the_jump_host_with_sudo(tmp_path, monkeypatch):
    """The real controller path: jump host, target, `sudo -n` around every command."""
    from hwsim_node import make_node

    sim = make_node(tmp_path / "sim", "xe9680-h200", "gpu01", "roce")
    shim = tmp_path / "shim"
    shim.mkdir()
    calls = tmp_path / "sudo.log"
    (shim / "sudo").write_text(f'#!/bin/sh\n[ "$1" = -n ] && shift\n[ "$1" = -- ] && shift\n'
                               f'echo "$*" >> {calls}\nexec "$@"\n')
    (shim / "sudo").chmod(0o755)
    env = {k: v for k, v in sim.env().items() if k != "PYTHONPATH"}
    env["PATH"] = f"{shim}:{env.get('PATH', os.environ['PATH'])}"
    target = FakeNode(tmp_path / "target", env=env)
    target.allowed.append("/tmp/rackready.")  # the login user's staging folders
    jump = FakeNode(tmp_path / "jump")
    jump.forwarding = True
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    monkeypatch.setattr(validate, "NODE_BASE", str(tmp_path / "target" / "base"))
    # the role variables the controller ships; the venv is this test's interpreter
    roles = {**provisioned({}, Path("roles")), "validation_tools_venv": str(venv.parent)}
    n = dataclasses.replace(_via(jump, target), name="gpu01", profile="xe9680-h200-lab",
                            validation_without=("bmc",),  # no BMC in this test
                            sysroot=str(sim.sysroot), fabric="roce", become=True,
                            provisioned=roles)
    monkeypatch.setattr(validate, "_find", lambda name, inv: n)
    try:
        validate.run_validation(node="gpu01", inventory="test", out=str(tmp_path / "run"),
                                formats="json", only="kernel.cmdline")
    finally:
        jump.close()
        target.close()
    judged = json.loads((tmp_path / "run" / "gpu01" / "judgement.json").read_text())
    assert judged["outcome"] == "PARTIAL", judged["outcome_reason"]
    assert jump.forwarded and jump.commands == []
    assert all(c.startswith("sudo -n -- sh -c") or c.startswith("sh -c")
               for c in target.commands)
    assert "flock -n" in calls.read_text()  # the suite itself ran through sudo


# -- the lab's inventory ----------------------------------------------------------------


def test_the_lab_inventory_reads_as_the_admin_through_the_jump_host(tmp_path, monkeypatch):
    from rackready_lab import config, keys, repo
    from rackready_lab import inventory as lab_inventory

    monkeypatch.setattr(config, "STATE_DIR", tmp_path / "state")
    signing = tmp_path / "signing.asc"
    signing.write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\n")
    monkeypatch.setattr(repo, "signing_key", lambda: signing)
    keys.ensure_client_key()
    keys.write_ssh_config()
    inv = tmp_path / "lab"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text(json.dumps({"all": {"hosts": {"lab-gpu01": {
        "ansible_host": "10.213.7.11", "rackready_profile": "xe9680-h200-lab"}}}}))
    (inv / "group_vars" / "all" / "main.yml").write_text(json.dumps(lab_inventory.group_vars()))
    lab_inventory.write_vault(inv / "group_vars" / "all" / "vault.yml")
    assert (inv / "group_vars" / "all" / "vault.yml").read_text().startswith("$ANSIBLE_VAULT")

    # the inventory names its vault password file (rackready_vault_password_file): read
    # from anywhere, it opens with it, as a site's would; the product knows no lab path
    assert inventory.find("lab-gpu01", str(inv / "hosts.yml")).user == "rradmin"
    moved = config.vault_password_file().rename(tmp_path / "moved-vault-password")
    with pytest.raises(UserError, match="vault.yml is vault-encrypted"):  # named file gone
        inventory.find("lab-gpu01", str(inv / "hosts.yml"))
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(moved))
    n = inventory.find("lab-gpu01", str(inv / "hosts.yml"))
    jump = config.jump_spec()
    assert (n.user, n.become, n.known_hosts) == ("rradmin", True, str(keys.known_hosts()))
    assert n.jump == Hop(jump.ip, 22, "rradmin", str(keys.client_key()), str(keys.known_hosts()))
    # what Ansible would template for the roles: the decrypted vault value
    _, hosts = inventory._read(inv / "hosts.yml")
    secret = inventory._Facts("lab-gpu01", hosts["lab-gpu01"]).text("rackready_bmc_password")
    vault_text = (inv / "group_vars" / "all" / "vault.yml").read_text()
    assert len(secret) >= 16 and secret not in vault_text


def test_a_missing_vault_password_file_is_one_line(vaulted, monkeypatch, tmp_path):
    hosts, _ = vaulted
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match=r"^vault password: .*nowhere"):
        inventory.find("gpu01", str(hosts))
