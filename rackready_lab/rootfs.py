"""The Debian 12 root file system every lab node boots, built once and cached.

debootstrap runs only when the cache is missing or its recipe changed; each
node then gets its own copy (see nodes.py).
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from rackready_lab import config
from rackready_lab.shell import run

# What a freshly installed server has before provisioning: systemd, SSH and the
# Python that Ansible needs (python3-apt for the apt module). Everything else
# comes from the lab's package repository, through the roles.
INCLUDE = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-apt",
    "python3-yaml",
    "iproute2",
    "kmod",
    "udev",
    "ca-certificates",
    "procps",
    "sudo",
    "less",
    "util-linux",
    "e2fsprogs",
)
RECIPE_VERSION = "3"


def recipe_key() -> str:
    text = "|".join((config.SUITE, RECIPE_VERSION, *INCLUDE))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def cached_rootfs() -> Path:
    return config.CACHE_DIR / f"debian-{config.SUITE}-{recipe_key()}"


def ensure_rootfs(mirror: str | None = None) -> Path:
    """Return the cached root file system, building it with debootstrap if needed."""
    target = cached_rootfs()
    if (target / ".rackready-complete").exists():
        return target
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(INCLUDE)}",
        config.SUITE,
        str(staging),
    ]
    if mirror:  # otherwise debootstrap's own default mirror
        cmd.append(mirror)
    run(cmd, timeout=1800)
    _prepare(staging)
    (staging / ".rackready-complete").write_text(recipe_key() + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def _prepare(root: Path) -> None:
    """Make the image boot cleanly as a container and carry no shared secrets."""
    # Host keys are made per node so each node has its own identity.
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/machine-id").write_text("")
    # No console login in a container; getty would only spin.
    _mask(root, "console-getty.service")
    _mask(root, "getty@tty1.service")
    # Nodes reach no time servers; nothing to wait for.
    _mask(root, "systemd-timesyncd.service")
    dropin = root / "etc/ssh/sshd_config.d/rackready-lab.conf"
    dropin.write_text(
        "# rackready lab: key-only root login\n"
        "PermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\n"
        "HostKey /etc/ssh/ssh_host_ed25519_key\n"
    )


def _mask(root: Path, unit: str) -> None:
    link = root / "etc/systemd/system" / unit
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")


def copy_rootfs(source: Path, dest: Path) -> None:
    """A node's own writable copy (reflinks where the file system has them)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    run(["cp", "-a", "--reflink=auto", str(source), str(dest)], timeout=900)
    (dest / ".rackready-complete").unlink(missing_ok=True)
