"""mokutil stand-in (package mokutil): Secure Boot state and MOK enrollment requests.

Messages and exit codes are mokutil 0.6's: `--sb-state` prints "SecureBoot
enabled"/"SecureBoot disabled"; `--test-key` exits 0 for "is not enrolled"
and 1 for "is already enrolled"/"is already in the enrollment request";
`--import` queues a request (MokNew) and asks for the one-time password twice
on stdin (or takes --hash-file/--root-pw). On a real machine a person confirms
the request in the MOK manager at the next boot; the lab's boot (cli/boot.py)
confirms it by itself.
"""

from __future__ import annotations

import sys
from typing import Any

from .common import ToolError, load_state, locked_state, run
from .secureboot import read_cert

USAGE = ("Usage: mokutil --sb-state | --list-enrolled | --list-new | --test-key <der> | "
         "--import <der> [--hash-file <file> | --root-pw] | --revoke-import")
NO_EFI = "EFI variables are not supported on this system"


def _sb(state: dict[str, Any]) -> dict[str, Any]:
    sb = state.get("secure_boot") or {"efi": True, "enabled": False}
    if not sb.get("efi", True):
        raise ToolError(NO_EFI, 1)
    return sb


def _listing(keys: list[dict[str, str]], empty: str) -> str:
    if not keys:
        return empty + "\n"
    out = []
    for n, k in enumerate(keys, 1):
        out += [f"[key {n}]", f"SHA1 Fingerprint: {k['sha1']}", "Certificate:", "    Data:",
                f"        Subject: {k.get('subject', '')}"]
    return "\n".join(out) + "\n"


def _where(sb: dict[str, Any], sha1: str) -> str | None:
    if any(k["sha1"] == sha1 for k in sb.get("enrolled_keys", [])):
        return "is already enrolled"
    if any(k["sha1"] == sha1 for k in sb.get("pending_keys", [])):
        return "is already in the enrollment request"
    return None


def _password(argv: list[str]) -> None:
    if "--root-pw" in argv or "-P" in argv or "--hash-file" in argv or "-f" in argv:
        return
    print("input password: ")
    first = sys.stdin.readline().rstrip("\n")
    print("input password again: ")
    second = sys.stdin.readline().rstrip("\n")
    if not first:
        raise ToolError("Abort", 1)
    if first != second:
        raise ToolError("Password doesn't match", 1)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 1
    cmd = argv[0]
    if cmd == "--sb-state":
        sb = _sb(load_state())
        print("SecureBoot enabled" if sb.get("enabled") else "SecureBoot disabled")
        return 0
    if cmd in ("--list-enrolled", "-l"):
        print(_listing(_sb(load_state()).get("enrolled_keys", []), "MokListRT is empty"),
              end="")
        return 0
    if cmd in ("--list-new", "-N"):
        print(_listing(_sb(load_state()).get("pending_keys", []), "MokNew is empty"), end="")
        return 0
    if cmd in ("--test-key", "-t") and len(argv) == 2:
        key = read_cert(argv[1])
        where = _where(_sb(load_state()), key["sha1"])
        print(f"{argv[1]} {where or 'is not enrolled'}")
        return 1 if where else 0
    if cmd in ("--import", "-i") and len(argv) >= 2:
        key = read_cert(argv[1])
        where = _where(_sb(load_state()), key["sha1"])
        if where:
            print(f"SKIP: {argv[1]} {where}")
            return 0
        _password(argv[2:])
        with locked_state() as state:
            sb = _sb(state)
            sb.setdefault("pending_keys", []).append(key)
        return 0
    if cmd == "--revoke-import":
        with locked_state() as state:
            _sb(state)["pending_keys"] = []
        return 0
    raise ToolError(USAGE, 1)


if __name__ == "__main__":
    sys.exit(run(main))
