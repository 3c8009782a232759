"""SSH identity of the lab: one client key, a host key per node, a known_hosts.

Host keys are generated on the controller before a node first boots, so the
known_hosts file is written from the keys themselves: no trust on first use.
"""

from __future__ import annotations

from pathlib import Path

from rackready.lab import config
from rackready.lab.shell import run


def ssh_dir() -> Path:
    return config.STATE_DIR / "ssh"


def client_key() -> Path:
    return ssh_dir() / "id_ed25519"


def known_hosts() -> Path:
    return ssh_dir() / "known_hosts"


def ensure_client_key() -> Path:
    key = client_key()
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rackready-lab", "-f", str(key)])
    return key


def install_node_keys(root: Path, hostname: str, ip: str) -> str:
    """Give a node its host key and our client key; return its known_hosts line."""
    hostkey = root / "etc/ssh/ssh_host_ed25519_key"
    if not hostkey.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{hostname}",
             "-f", str(hostkey)])
    auth = root / "root/.ssh/authorized_keys"
    auth.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    auth.write_text(client_key().with_suffix(".pub").read_text())
    auth.chmod(0o600)
    algo, blob = hostkey.with_suffix(".pub").read_text().split()[:2]
    return f"{hostname},{ip} {algo} {blob}"


def write_known_hosts(lines: list[str]) -> Path:
    path = known_hosts()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in sorted(lines)))
    return path
