"""One lab node: its root file system copy, drives, boot and shutdown."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from rackready.errors import EnvironmentProblem
from rackready.sanitize import one_line
from rackready_lab import config, keys, repo, rootfs
from rackready_lab.config import NodeSpec
from rackready_lab.shell import run

T = TypeVar("T")
_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def create(node: NodeSpec, base: Path, all_nodes: list[NodeSpec]) -> str:
    """Lay out a fresh node; returns its known_hosts line."""
    rootfs.copy_rootfs(base, node.root)
    root = node.root
    (root / "etc/hostname").write_text(node.name + "\n")
    jump = config.jump_spec()
    ctl = config.slurm_spec()
    hosts = [f"{config.GATEWAY} rackready-controller", f"{jump.ip} {jump.name}",
             f"{ctl.ip} {ctl.name}"]
    _names(root, hosts + [f"{n.ip} {n.name}" for n in all_nodes if n.name != ctl.name])
    # Air-gapped, as a site's OS installer leaves a node: apt knows only the
    # local mirror (the controller's repository), verified by its signing key.
    (root / "etc/apt/sources.list").write_text("")
    keyring = root / "etc/apt/keyrings/rackready-lab.asc"
    keyring.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(repo.signing_key(), keyring)
    (root / "etc/apt/sources.list.d/rackready-lab.sources").write_text(
        f"Types: deb\nURIs: {repo.url()}/debian\nSuites: {config.SUITE}\n"
        "Components: main\nSigned-By: /etc/apt/keyrings/rackready-lab.asc\n"
    )
    return keys.install_node_keys(root, node.name, node.ip, allow_from=jump.ip)


def _names(root: Path, hosts: list[str]) -> None:
    """Name resolution of an air-gapped site: every name the node needs in /etc/hosts and
    no DNS server. The image's resolv.conf names the build host's server, which the lab
    network cannot reach, so a lookup of anything missing from /etc/hosts (torchrun's
    stores look up their peers' names) would wait out the resolver's timeouts."""
    local = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
    (root / "etc/hosts").write_text("\n".join(local + hosts) + "\n")
    resolv = root / "etc/resolv.conf"
    resolv.unlink(missing_ok=True)  # may be a link into the image's resolver setup
    resolv.write_text("# rackready lab: air-gapped, no DNS server; names are in /etc/hosts\n"
                      "options timeout:1 attempts:1\n")


def create_jump(base: Path) -> str:
    """The jump host: the same Debian image, SSH only, no sudo for the admin; returns
    its known_hosts line."""
    jump = config.jump_spec()
    rootfs.copy_rootfs(base, jump.root)
    (jump.root / "etc/hostname").write_text(jump.name + "\n")
    _names(jump.root, [f"{jump.ip} {jump.name}"])
    (jump.root / "etc/apt/sources.list").write_text("")
    return keys.install_node_keys(jump.root, jump.name, jump.ip, sudo=False)


def attach_drives(node: NodeSpec, count: int = config.DATA_DRIVES) -> list[str]:
    """Loop devices backed by sparse files stand for the NVMe data drives."""
    drives = node.dir / "drives"
    drives.mkdir(parents=True, exist_ok=True)
    devices = []
    for i in range(count):
        img = drives / f"nvme{i}n1.img"
        if not img.exists():
            with img.open("wb") as f:
                f.truncate(config.DATA_DRIVE_MIB * 1024 * 1024)
        devices.append(run(["losetup", "--find", "--show", str(img)]).stdout.strip())
    return devices


def detach_drives(devices: list[str]) -> None:
    for dev in devices:
        run(["losetup", "-d", dev], check=False)


def lab_loop_devices() -> list[str]:
    """Loop devices whose backing file belongs to the lab (for cleanup and tests)."""
    out = run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"]).stdout
    state = str(config.STATE_DIR)
    return [line.split()[0] for line in out.splitlines() if state in line]


CGROUP_ROOT = Path("/sys/fs/cgroup")
# a cgroup mount's options that name no controller (Documentation/admin-guide/cgroup-v1)
_MOUNT_FLAGS = {"rw", "ro", "xattr", "noprefix", "clone_children", "cpuset_v2_mode"}


def own_cgroups(name: str, root: Path = CGROUP_ROOT, mine: Path = Path("/proc/self/cgroup"),
                mounts: Path = Path("/proc/self/mountinfo")) -> list[Path]:
    """A cgroup of the node's own under this process's, in every mounted hierarchy.

    With no systemd on the controller, `--keep-unit` leaves nspawn's payload in the cgroup
    it was started in; on cgroup v1 that was the same one for every node, so each node's
    systemd made its units' cgroups at the same paths (/system.slice/...) as the others'. Two
    nodes booting at once then raced: one removed a unit's empty cgroup as the other attached
    to it ("Failed to attach to cgroup /system.slice/systemd-user-sessions.service: No such
    file or directory"), systemd-user-sessions failed and /run/nologin kept SSH out."""
    by_options: dict[frozenset[str], Path] = {}  # a hierarchy's controllers -> its mount
    with contextlib.suppress(OSError, ValueError):
        for line in mounts.read_text().splitlines():
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1] in ("cgroup", "cgroup2") and Path(fields[4]).is_relative_to(root):
                kind = frozenset() if fields[sep + 1] == "cgroup2" else frozenset(
                    o for o in fields[-1].split(",")
                    if o not in _MOUNT_FLAGS and not o.startswith("release_agent="))
                by_options[kind] = Path(fields[4])
    out = []
    with contextlib.suppress(OSError, ValueError):
        for line in mine.read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            mount = by_options.get(frozenset(c for c in controllers.split(",") if c))
            if mount is not None and (mount / "cgroup.procs").exists():
                out.append(mount / path.lstrip("/") / f"rackready-{name}")
    return out


# joins each cgroup named in $0 (one it cannot join, such as a v1 cpuset with no CPUs of
# its own, is left), then becomes the command: nspawn starts inside them, with no window
_ENTER = 'for cg in $0; do echo $$ 2>/dev/null >"$cg/cgroup.procs" || true; done; exec "$@"'


def boot(node: NodeSpec, devices: list[str]) -> int:
    """Start the node's systemd under systemd-nspawn, in cgroups of its own (own_cgroups);
    returns the nspawn pid."""
    cgroups = own_cgroups(node.name)
    for cg in cgroups:
        with contextlib.suppress(OSError):
            cg.mkdir(exist_ok=True)
    log = (node.dir / "console.log").open("ab")
    cmd = [
        "systemd-nspawn",
        "--boot",
        "--quiet",
        "--keep-unit",  # the controller may not run systemd; no scope to register
        "--register=no",
        f"--directory={node.root}",
        f"--machine={node.name}",
        f"--network-namespace-path=/run/netns/{node.netns}",
        # its own namespace, so network admin stays inside it (RoCE MTU, as on a server)
        "--capability=CAP_NET_ADMIN",
        # The console goes to console.log. "passive" leaves its pseudo-TTY unread:
        # once the buffer fills, PID 1 blocks on a status line and units stop starting.
        "--console=read-only",
        *(f"--bind={dev}" for dev in devices),
    ]
    joined = " ".join(str(cg) for cg in cgroups if cg.is_dir())
    proc = subprocess.Popen(
        ["sh", "-c", _ENTER, joined, *cmd], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        start_new_session=True,
    )
    (node.dir / "nspawn.pid").write_text(str(proc.pid))
    return proc.pid


def pid_of(node: NodeSpec) -> int | None:
    pidfile = node.dir / "nspawn.pid"
    if not pidfile.exists():
        return None
    pid = int(pidfile.read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return None
    if stat.rsplit(")", 1)[1].split()[0] == "Z":  # exited, not yet reaped
        return None
    # empty: forked but not yet exec'd (right after boot); the cgroup step before nspawn
    # (boot's _ENTER: `sh -c ... systemd-nspawn ...`); anything else is not ours
    argv = cmdline.split(b"\0")
    ours = argv[0].endswith(b"systemd-nspawn") or (
        argv[0] == b"sh" and argv[1:2] == [b"-c"] and b"systemd-nspawn" in argv[4:5])
    return pid if not cmdline or ours else None


def at_once(action: Callable[[T], object], items: list[T]) -> None:
    """action on every item at the same time (machines that boot or shut down mostly wait
    on their own systemd); the first item's failure is raised, as the action alone would."""
    with ThreadPoolExecutor(max_workers=max(1, len(items))) as pool:
        for done in [pool.submit(action, item) for item in items]:
            done.result()


def stop_all(machines: list[NodeSpec]) -> None:
    """nodes.stop for several machines at the same time."""
    at_once(stop, machines)


def wait_for_ssh(node: NodeSpec, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    last = "port 22 closed"
    while time.monotonic() < deadline:
        if pid_of(node) is None:
            raise EnvironmentProblem(
                f"{node.name} stopped while booting; see {node.dir / 'console.log'}"
            )
        if _port_open(node.ip, 22):
            probe = ssh(node, "true", check=False)
            if probe.returncode == 0:
                return
            last = f"ssh: {one_line(probe.stderr, 160) or f'exit {probe.returncode}'}"
        time.sleep(0.5)
    # The console's last lines go with the error: a test run removes the lab afterwards.
    raise EnvironmentProblem(f"{node.name}: SSH did not answer within {timeout_s:.0f}s "
                             f"({last}); console: {console_tail(node)}")


def console_tail(node: NodeSpec, lines: int = 8) -> str:
    """The console's last non-blank lines as one line (" | " between them)."""
    try:
        text = (node.dir / "console.log").read_bytes()[-8192:].decode(errors="replace")
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    text = _CSI.sub("", text)  # systemd colours its status words
    kept = [one_line(line, 160) for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "empty"


def ssh(node: NodeSpec, command: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command as root on a lab machine the way the inventory reaches it: the
    admin through the jump host, then `sudo -n`; host keys verified (the lab's ssh
    config). On the jump host itself: the admin, directly, without sudo."""
    jump = config.jump_spec()
    login = f"{config.ADMIN_USER}@{node.ip}"
    if node.name == jump.name:
        route, remote = [], command
    else:
        route = ["-J", f"{config.ADMIN_USER}@{jump.ip}"]
        remote = f"sudo -n sh -c {shlex.quote(command)}"
    return run(["ssh", "-F", str(keys.ssh_config()), *route, login, remote],
               check=check, timeout=120)


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def stop(node: NodeSpec, timeout_s: float = 30) -> None:
    """Clean shutdown (SIGTERM makes nspawn power the container off), then force."""
    pid = pid_of(node)
    if pid is None:
        return
    # it may end between the check and the signal (a reboot beside a shutdown)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and pid_of(node) is not None:
        time.sleep(0.2)
    if pid_of(node) is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        time.sleep(0.5)
    (node.dir / "nspawn.pid").unlink(missing_ok=True)
