"""dkms stand-in (package dkms) and sign-file: build = write stub modules, signed as dkms 3 signs.

`dkms install -m nvidia -v VER [-k KERNEL] [--force]` (or `nvidia/VER`) writes
the driver's modules under /lib/modules/KERNEL/updates/dkms/. As dkms 3 does,
it signs them with mok_signing_key/mok_certificate from /etc/dkms/framework.conf
and framework.conf.d/*.conf (HWSIM_DKMS_CONF) when both files exist; unlike
Debian's dkms it never generates a key of its own. `dkms status` lists builds.
`sign-file HASH KEY X509 MODULE` signs one module file (the kernel's script).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .common import ToolError, run
from .secureboot import kernel_release, modules_root, sign, stub_module

MODULES = ("nvidia", "nvidia_modeset", "nvidia_uvm", "nvidia_drm", "nvidia_peermem")
USAGE = "Usage: dkms install|remove -m MODULE -v VERSION [-k KERNEL] [--force] | dkms status"


def conf_dir() -> Path:
    return Path(os.environ.get("HWSIM_DKMS_CONF", "/etc/dkms"))


def signing_conf() -> tuple[Path, Path] | None:
    values: dict[str, str] = {}
    d = conf_dir()
    files = [d / "framework.conf", *sorted((d / "framework.conf.d").glob("*.conf"))]
    for f in files:
        if not f.is_file():
            continue
        for line in f.read_text().splitlines():
            key, eq, value = line.strip().partition("=")
            if eq and not key.startswith("#"):
                values[key.strip()] = value.strip().strip("\"'")
    mok_key, mok_cert = values.get("mok_signing_key"), values.get("mok_certificate")
    if mok_key and mok_cert and Path(mok_key).is_file() and Path(mok_cert).is_file():
        return Path(mok_key), Path(mok_cert)
    return None


def _args(argv: list[str]) -> tuple[str, str, str, bool]:
    name = version = kernel = ""
    force = False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-m", "-v", "-k") and i + 1 < len(argv):
            i += 1
            if a == "-m":
                name = argv[i]
            elif a == "-v":
                version = argv[i]
            else:
                kernel = argv[i]
        elif a == "--force":
            force = True
        elif "/" in a and not name:
            name, _, version = a.partition("/")
        elif a != "--all":
            raise ToolError(USAGE, 1)
        i += 1
    if not name or not version:
        raise ToolError(USAGE, 1)
    return name, version, kernel or kernel_release(), force


def _dir(kernel: str) -> Path:
    return modules_root() / kernel / "updates" / "dkms"


def install(name: str, version: str, kernel: str, force: bool) -> None:
    target = _dir(kernel)
    stamp = target / f".{name}-{version}"
    if stamp.exists() and not force:
        print(f"Module {name}/{version} already installed on kernel {kernel} (x86_64), skip. "
              "You may override by specifying --force.")
        return
    target.mkdir(parents=True, exist_ok=True)
    signing = signing_conf()
    for mod in MODULES:
        path = target / f"{mod}.ko"
        path.write_text(stub_module(mod, version))
        if signing:
            sign(path, *signing)
    stamp.write_text("")
    if signing:
        print(f"Signing key: {signing[0]}\nPublic certificate (MOK): {signing[1]}")
    print(f"{name}.ko:\nRunning module version sanity check.\n - Installation\n"
          f"   - Installing to /lib/modules/{kernel}/updates/dkms/\ndepmod...")


def main(argv: list[str]) -> int:
    if argv[:1] == ["status"]:
        root = modules_root()
        for stamp in sorted(root.glob("*/updates/dkms/.*-*")) if root.is_dir() else []:
            name, _, version = stamp.name[1:].partition("-")
            print(f"{name}/{version}, {stamp.parts[-4]}, x86_64: installed")
        return 0
    if argv[:1] == ["install"]:
        install(*_args(argv[1:]))
        return 0
    if argv[:1] == ["remove"]:
        name, version, kernel, _ = _args(argv[1:])
        for path in _dir(kernel).glob("*.ko"):
            path.unlink()
        (_dir(kernel) / f".{name}-{version}").unlink(missing_ok=True)
        return 0
    raise ToolError(USAGE, 1)


def sign_file(argv: list[str]) -> int:
    """sign-file <hash_algo> <key> <x509> <module> [<dest>]"""
    if len(argv) not in (4, 5):
        raise ToolError("Usage: scripts/sign-file <hash algo> <key> <x509> <module> [<dest>]", 2)
    module = Path(argv[3])
    if not module.is_file():
        raise ToolError(f"sign-file: {module}: No such file or directory", 1)
    dest = Path(argv[4]) if len(argv) == 5 else module
    if dest != module:
        dest.write_text(module.read_text())
    sign(dest, Path(argv[1]), Path(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
