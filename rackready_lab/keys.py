"""SSH identity of the lab: one client key, a host key per machine, a known_hosts,
an ssh config, and the non-root admin account every machine is reached as.

Host keys are generated on the controller before a machine first boots, so the
known_hosts file is written from the keys themselves: no trust on first use.
Root cannot log in over SSH; the admin (config.ADMIN_USER) logs in with the
lab's key and, on the nodes, only from the jump host, then uses sudo.
"""

from __future__ import annotations

import os
from pathlib import Path

from rackready_lab import config
from rackready_lab.shell import run


def ssh_dir() -> Path:
    return config.STATE_DIR / "ssh"


def client_key() -> Path:
    return ssh_dir() / "id_ed25519"


def known_hosts() -> Path:
    return ssh_dir() / "known_hosts"


def ssh_config() -> Path:
    """`ssh -F` file: what ssh uses for every lab machine, the jump host included
    (ssh hands -F, and nothing else of its command line, to the ProxyJump hop)."""
    return ssh_dir() / "config"


def ensure_client_key() -> Path:
    key = client_key()
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rackready-lab", "-f", str(key)])
    return key


def write_ssh_config() -> Path:
    path = ssh_config()
    path.write_text(
        "# Written by `invoke lab.up`: how ssh reaches lab machines (keys always verified).\n"
        "Host *\n"
        f"  IdentityFile {client_key()}\n"
        "  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {known_hosts()}\n"
        "  StrictHostKeyChecking yes\n"
        "  BatchMode yes\n"
        "  ConnectTimeout 10\n"
    )
    return path


def install_node_keys(root: Path, hostname: str, ip: str, *, allow_from: str | None = None,
                      sudo: bool = True) -> str:
    """Give a machine its host key and the admin account; return its known_hosts line.

    allow_from: the only address the admin may log in from (the jump host's).
    """
    hostkey = root / "etc/ssh/ssh_host_ed25519_key"
    if not hostkey.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{hostname}",
             "-f", str(hostkey)])
    user = config.ADMIN_USER
    (root / "root/.ssh/authorized_keys").unlink(missing_ok=True)
    _add_admin(root, sudo)
    allowed = f"{user}@{allow_from}" if allow_from else user
    (root / "etc/ssh/sshd_config.d/rackready-lab.conf").write_text(
        "# rackready lab: no root login; the admin with a key, from where it may come\n"
        "PermitRootLogin no\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        f"AllowUsers {allowed}\n"
        "HostKey /etc/ssh/ssh_host_ed25519_key\n"
    )
    algo, blob = hostkey.with_suffix(".pub").read_text().split()[:2]
    return f"{hostname},{ip} {algo} {blob}"


def _add_admin(root: Path, sudo: bool) -> None:
    user = config.ADMIN_USER
    passwd = (root / "etc/passwd").read_text()
    if not any(line.startswith(f"{user}:") for line in passwd.splitlines()):
        run(["useradd", "--root", str(root), "--create-home", "--user-group",
             "--shell", "/bin/bash", user])
    entry = next(line for line in (root / "etc/passwd").read_text().splitlines()
                 if line.startswith(f"{user}:"))
    uid, gid = int(entry.split(":")[2]), int(entry.split(":")[3])
    home = root / entry.split(":")[5].lstrip("/")
    dot_ssh = home / ".ssh"
    dot_ssh.mkdir(parents=True, exist_ok=True)
    auth = dot_ssh / "authorized_keys"
    auth.write_text(client_key().with_suffix(".pub").read_text())
    for path, mode in ((home, 0o750), (dot_ssh, 0o700), (auth, 0o600)):
        os.chown(path, uid, gid)
        path.chmod(mode)
    if sudo:
        rule = root / "etc/sudoers.d/rackready-admin"
        rule.parent.mkdir(parents=True, exist_ok=True)
        rule.write_text(f"# rackready lab: the admin becomes root without a password\n"
                        f"{user} ALL=(ALL:ALL) NOPASSWD: ALL\n")
        rule.chmod(0o440)


def write_known_hosts(lines: list[str]) -> Path:
    path = known_hosts()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in sorted(lines)))
    return path
