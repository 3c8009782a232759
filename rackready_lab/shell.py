"""Running host commands for the lab, with errors that say what failed."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

from rackready.errors import EnvironmentProblem


class CommandFailed(EnvironmentProblem):
    pass


def run(
    cmd: Sequence[str],
    *,
    check: bool = True,
    input: str | None = None,
    timeout: float | None = 600,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing output; on failure raise with its last stderr line."""
    try:
        proc = subprocess.run(
            list(cmd),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
    except FileNotFoundError as exc:
        raise CommandFailed(f"{cmd[0]}: not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandFailed(f"{' '.join(cmd)}: timed out after {timeout:.0f}s") from exc
    if check and proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        last = detail[-1] if detail else f"exit {proc.returncode}"
        raise CommandFailed(f"{' '.join(cmd[:3])}: {last}")
    return proc


def require_root() -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem("the lab needs root (network namespaces, systemd-nspawn)")


# Debian packages the controller needs to run the lab.
HOST_PACKAGES = {
    "systemd-nspawn": "systemd-container",
    "debootstrap": "debootstrap",
    "dpkg-scanpackages": "dpkg-dev",
    "ssh-keygen": "openssh-client",
    "ip": "iproute2",
    "gpg": "gnupg",
    "losetup": "mount",
    "mkfs.ext4": "e2fsprogs",
}


def missing_host_packages() -> list[str]:
    return sorted({pkg for tool, pkg in HOST_PACKAGES.items() if shutil.which(tool) is None})


def apt_install(packages: list[str]) -> list[str]:
    """The controller's one way to install Debian packages; returns what it installed.
    Raises EnvironmentProblem (one line) where there is no apt-get."""
    if not packages:
        return []
    if shutil.which("apt-get") is None:
        raise EnvironmentProblem(f"install these Debian packages first: {' '.join(packages)}")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-qq"], env=env, timeout=900)
    run(["apt-get", "install", "-y", "-qq", *packages], env=env, timeout=1800)
    return list(packages)


def ensure_host_packages() -> list[str]:
    """apt-get install what the lab needs on the controller; returns what was installed."""
    return apt_install(missing_host_packages())
