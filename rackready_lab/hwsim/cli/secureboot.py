"""Secure Boot for the stand-ins: module files, their signatures, the trusted keys.

Standard library only. A stand-in kernel module is a small text file under
/lib/modules/<release>/ (HWSIM_MODULES_ROOT); signing appends what
`modinfo` would show (signer, sig_key) and the kernel's trailer
"~Module signature appended~". The kernel accepts a module under Secure Boot
when its sig_key is the distribution's built-in key or an enrolled MOK key.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from .common import ToolError

SIG_MAGIC = "~Module signature appended~"
# The kernel's own words (EKEYREJECTED) as modprobe prints them.
REJECTED = "modprobe: ERROR: could not insert '{name}': Key was rejected by service"
CN_OID = b"\x06\x03\x55\x04\x03"  # id-at-commonName


def modules_root() -> Path:
    return Path(os.environ.get("HWSIM_MODULES_ROOT", "/lib/modules"))


def kernel_release() -> str:
    # A lab node shares the controller's kernel: uname -r is what Ansible sees too.
    return os.environ.get("HWSIM_KERNEL_RELEASE") or os.uname().release


def stub_module(name: str, version: str) -> str:
    return f"hwsim stand-in kernel module {name} {version} (SIMULATED)\n"


def find_module(name: str, release: str | None = None) -> Path | None:
    """The file modprobe would load: updates/ (DKMS) before the rest, as depmod orders."""
    base = modules_root() / (release or kernel_release())
    found = sorted(base.rglob(f"{name}.ko")) if base.is_dir() else []
    found.sort(key=lambda p: 0 if "updates" in p.relative_to(base).parts else 1)
    return found[0] if found else None


def cert_info(der: bytes) -> dict[str, str]:
    """SHA1 fingerprint (as mokutil prints it) and subject CN of a DER certificate."""
    if not der or der[0] != 0x30:
        raise ToolError("Failed to parse certificate: not DER (convert PEM with "
                        "openssl x509 -outform DER)", 1)
    sha1 = hashlib.sha1(der).hexdigest()  # noqa: S324 - X.509 fingerprints are SHA1
    fp = ":".join(sha1[i:i + 2] for i in range(0, len(sha1), 2))
    subject = ""
    at = der.rfind(CN_OID)  # issuer comes first; the subject's CN is the last one
    if at >= 0 and at + 7 <= len(der):
        length = der[at + 6]
        if length < 0x80:
            subject = "CN=" + der[at + 7:at + 7 + length].decode("utf-8", "replace")
    return {"sha1": fp, "subject": subject}


def read_cert(path: str) -> dict[str, str]:
    try:
        return cert_info(Path(path).read_bytes())
    except OSError as exc:
        raise ToolError(f"Failed to open {path}: {exc.strerror}", 1) from exc


def signature(path: Path) -> dict[str, str] | None:
    """signer/sig_key of a signed stand-in module, None when unsigned."""
    text = path.read_text(errors="replace")
    if not text.rstrip("\n").endswith(SIG_MAGIC):
        return None
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    return {"signer": fields.get("signer", ""), "sig_key": fields.get("sig_key", "")}


def sign(module: Path, key: Path, cert: Path) -> dict[str, str]:
    """What sign-file does: replace any signature with one made by key/cert."""
    if not key.is_file():
        raise ToolError(f"sign-file: {key}: No such file or directory", 1)
    info = read_cert(str(cert))
    body = module.read_text(errors="replace").split("sig_id: ", 1)[0]
    module.write_text(body + f"sig_id: PKCS#7\nsigner: {info['subject'].removeprefix('CN=')}\n"
                      f"sig_key: {info['sha1']}\nsig_hashalgo: sha256\n{SIG_MAGIC}\n")
    return info


def trusted(state: dict[str, Any]) -> set[str]:
    sb = state.get("secure_boot") or {}
    return {k["sha1"] for k in sb.get("builtin_keys", []) + sb.get("enrolled_keys", [])}


def refusal(state: dict[str, Any], name: str) -> str | None:
    """Why the kernel refuses to load module `name` (None: it loads).

    Only under Secure Boot: then the module must be signed by a trusted key.
    """
    if not (state.get("secure_boot") or {}).get("enabled"):
        return None
    path = find_module(name)
    if path is None:
        return (f"modprobe: FATAL: Module {name} not found in directory "
                f"{modules_root() / kernel_release()}")
    sig = signature(path)
    if sig is None or sig["sig_key"] not in trusted(state):
        return REJECTED.format(name=name)
    return None
