"""The lab's package repository: what an air-gapped site's local mirror holds.

Real Debian packages that the roles install (downloaded on the controller,
with their dependencies) and the hwsim stand-ins for vendor packages, in one
signed apt repository, plus a pip wheelhouse for the node-side venv. Served
over HTTP to the lab subnet only.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from email.utils import formatdate
from pathlib import Path

from rackready_lab import config, rootfs
from rackready_lab.shell import run

REPO_ROOT = config.STATE_DIR / "repo"
GNUPG_HOME = config.STATE_DIR / "gnupg"
DEB_CACHE = config.CACHE_DIR / "debs"
WHEEL_CACHE = config.CACHE_DIR / "wheels"
PROJECT_ROOT = Path(__file__).resolve().parents[1]
REQUIRED_LIST = PROJECT_ROOT / "roles" / "REQUIRED_DEBIAN_PACKAGES.txt"

# The node venv's requirements: the one list, which validation_tools installs and the
# offline bundle downloads (lab nodes run Debian 12's Python 3.11).
NODE_REQUIREMENTS = PROJECT_ROOT / "roles/validation_tools/files/node-requirements.txt"
# The same pins and their dependencies, every wheel by sha256 (committed): the lab's
# wheelhouse is downloaded by it, so the lab serves exactly the wheels it pins.
NODE_LOCK = NODE_REQUIREMENTS.with_suffix(".lock")


def url() -> str:
    return f"http://{config.GATEWAY}:{config.REPO_PORT}"


def required_debian_packages() -> list[str]:
    if not REQUIRED_LIST.exists():
        return []
    lines = (line.split("#")[0].strip() for line in REQUIRED_LIST.read_text().splitlines())
    return sorted({line for line in lines if line})


def node_requirements(path: Path = NODE_REQUIREMENTS) -> list[str]:
    """The requirement lines of a requirements file, comments and blanks dropped."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def fetch_debian_packages(base: Path, packages: list[str]) -> Path:
    """Download packages and their dependencies, resolved against the node image."""
    DEB_CACHE.mkdir(parents=True, exist_ok=True)
    if not packages:
        return DEB_CACHE
    stamp = DEB_CACHE / ".list"
    wanted = "\n".join(packages) + "\n"
    if stamp.exists() and stamp.read_text() == wanted:
        return DEB_CACHE
    fetch_root = config.CACHE_DIR / "fetch-root"
    if not (fetch_root / ".rackready-complete").exists():
        rootfs.copy_rootfs(base, fetch_root)
        (fetch_root / ".rackready-complete").write_text("")
    shutil.copy("/etc/resolv.conf", fetch_root / "etc/resolv.conf")
    archives = fetch_root / "var/cache/apt/archives"
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    run(["chroot", str(fetch_root), "apt-get", "update", "-qq"], env=env, timeout=900)
    run(
        ["chroot", str(fetch_root), "apt-get", "install", "-y", "-qq", "--download-only",
         "--no-install-recommends", *packages],
        env=env,
        timeout=1800,
    )
    for deb in archives.glob("*.deb"):
        shutil.copy2(deb, DEB_CACHE / deb.name)
    stamp.write_text(wanted)
    return DEB_CACHE


def fetch_wheels() -> Path:
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    stamp = WHEEL_CACHE / ".list"
    wanted = NODE_LOCK.read_text()
    if stamp.exists() and stamp.read_text() == wanted:
        return WHEEL_CACHE
    # --require-hashes: pip refuses any wheel whose sha256 the lock does not list (a cached
    # file of the same name included), so the lab's wheels are the committed ones
    run(
        [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
         "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
         "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64",
         "--platform", "any", "--dest", str(WHEEL_CACHE), "--require-hashes",
         "-r", str(NODE_LOCK)],
        timeout=1800,
    )
    stamp.write_text(wanted)
    return WHEEL_CACHE


def build(base: Path, hwsim_debs: list[Path], extra: list[str] | None = None) -> Path:
    """Lay out pool/, index it, sign it; returns the repository root. extra: packages for
    the lab's own machines (its Slurm controller) beside the roles' list."""
    shutil.rmtree(REPO_ROOT, ignore_errors=True)
    pool = REPO_ROOT / "debian/pool/main"
    pool.mkdir(parents=True)
    wanted = sorted({*required_debian_packages(), *(extra or [])})
    for deb in fetch_debian_packages(base, wanted).glob("*.deb"):
        os.link(deb, pool / deb.name) if _same_fs(deb, pool) else shutil.copy2(deb, pool)
    for deb in hwsim_debs:
        shutil.copy2(deb, pool / deb.name)
    shutil.copy2(headers_standin(pool.parent.parent / "build"), pool)
    _index(REPO_ROOT / "debian")
    wheels = REPO_ROOT / "wheels"
    shutil.copytree(fetch_wheels(), wheels, ignore=shutil.ignore_patterns(".list"))
    return REPO_ROOT


def _same_fs(a: Path, b: Path) -> bool:
    return a.stat().st_dev == b.stat().st_dev


def headers_standin(workdir: Path) -> Path:
    """linux-headers-<running kernel>: the lab's kernel is the controller's, and no
    distribution ships its headers; the driver role only checks they are there."""
    kernel = platform.release()
    pkg = workdir / f"linux-headers-{kernel}"
    shutil.rmtree(pkg, ignore_errors=True)
    (pkg / "DEBIAN").mkdir(parents=True)
    src = pkg / f"usr/src/linux-headers-{kernel}"
    src.mkdir(parents=True)
    (src / "Makefile").write_text("# rackready lab stand-in (SIMULATED): no kernel build here\n")
    mods = pkg / f"usr/lib/modules/{kernel}"
    mods.mkdir(parents=True)
    (mods / "build").symlink_to(f"/usr/src/linux-headers-{kernel}")
    version = "1.0-rackready1"
    (pkg / "DEBIAN/control").write_text(
        f"Package: linux-headers-{kernel}\nVersion: {version}\nArchitecture: all\n"
        "Maintainer: rackready lab <lab@rackready.invalid>\n"
        "Description: headers stand-in for the lab kernel (SIMULATED)\n"
    )
    out = workdir / f"linux-headers-{kernel}_{version}_all.deb"
    run(["dpkg-deb", "--build", "--root-owner-group", str(pkg), str(out)])
    return out


def _index(top: Path) -> None:
    dist = top / "dists" / config.SUITE
    binary = dist / "main/binary-amd64"
    binary.mkdir(parents=True)
    # dpkg-scanpackages resolves paths relative to the working directory.
    packages = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", "pool", "/dev/null"],
        cwd=top, capture_output=True, text=True, check=True,
    )
    (binary / "Packages").write_text(packages.stdout)
    with gzip.open(binary / "Packages.gz", "wt") as f:
        f.write(packages.stdout)
    files = [p for p in sorted(dist.rglob("*")) if p.is_file()]
    sums = "".join(
        f" {hashlib.sha256(p.read_bytes()).hexdigest()} {p.stat().st_size} "
        f"{p.relative_to(dist)}\n"
        for p in files
    )
    release = (
        "Origin: rackready-lab\nLabel: rackready-lab\n"
        f"Suite: {config.SUITE}\nCodename: {config.SUITE}\n"
        f"Date: {formatdate(usegmt=True)}\nArchitectures: amd64 all\nComponents: main\n"
        "Description: rackready lab mirror (real Debian packages + hwsim stand-ins)\n"
        f"SHA256:\n{sums}"
    )
    (dist / "Release").write_text(release)
    _sign(dist / "Release", dist / "InRelease")


def _gpg(*args: str) -> subprocess.CompletedProcess[str]:
    GNUPG_HOME.mkdir(parents=True, exist_ok=True, mode=0o700)
    return run(["gpg", "--homedir", str(GNUPG_HOME), "--batch", "--yes", *args])


def _sign(release: Path, inrelease: Path) -> None:
    if "rackready-lab" not in _gpg("--list-secret-keys").stdout:
        _gpg("--passphrase", "", "--quick-gen-key", "rackready-lab <lab@rackready.invalid>",
             "ed25519", "sign", "1y")
    _gpg("--local-user", "rackready-lab", "--clearsign", "--output", str(inrelease),
         str(release))
    key = _gpg("--armor", "--export", "rackready-lab").stdout
    (config.STATE_DIR / "repo-key.asc").write_text(key)


def signing_key() -> Path:
    return config.STATE_DIR / "repo-key.asc"


# --- serving -----------------------------------------------------------------

def _pidfile() -> Path:
    return config.STATE_DIR / "repo-http.pid"


def serving_pid() -> int | None:
    pidfile = _pidfile()
    if not pidfile.exists():
        return None
    pid = int(pidfile.read_text())
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return None
    return pid if b"http.server" in cmd else None


def serve() -> int:
    """Serve the repository on the lab gateway only (idempotent)."""
    pid = serving_pid()
    if pid:
        return pid
    log = (config.STATE_DIR / "repo-http.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", str(config.GATEWAY),
         "--directory", str(REPO_ROOT), str(config.REPO_PORT)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
    )
    _pidfile().write_text(str(proc.pid))
    time.sleep(0.3)
    return proc.pid


def stop_serving() -> None:
    pid = serving_pid()
    if pid:
        os.kill(pid, signal.SIGTERM)
    _pidfile().unlink(missing_ok=True)


def stop_signing_agent() -> None:
    """Signing the mirror starts gpg's agent for the lab's key home, a daemon that
    outlives the lab unless told to stop."""
    if GNUPG_HOME.is_dir() and shutil.which("gpgconf"):
        subprocess.run(["gpgconf", "--homedir", str(GNUPG_HOME), "--kill", "gpg-agent"],
                       capture_output=True, timeout=30, check=False)
