"""Shipping: the run folder made, the bundle verified by its hash (shipped when needed)
and unpacked, files uploaded atomically, the suite's command line."""

from __future__ import annotations

import re
import secrets
import shlex
import time
from collections.abc import Callable

import paramiko

from rackready.remote.records import Limits, SessionOutcome
from rackready.remote.runner import Fail
from rackready.remote.sftp import open_sftp, sftp_errors
from rackready.remote.shell import NodeShell, command_failed
from rackready.sanitize import one_line

LOCK_HELD_RC = 75  # flock -E: the lock is held by another suite

_SAFE_RUN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")

ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_DIGEST = re.compile(r"[0-9a-f]{64}")


def build_suite_script(*, command_args: list[str], env: dict[str, str], bundle_dir: str,
                       lock: str, pgid_file: str, out: str, site: str) -> str:
    """cd into the verified bundle, take the node's lock (never wait), start a new session."""
    for key in env:
        if not ENV_KEY.fullmatch(key):
            raise ValueError(f"environment variable name {key!r} is not valid")
    if not command_args:
        raise ValueError("command_args is empty")
    prog = command_args[0]
    argv = [*command_args, "--out", out, "--site", site]
    assign = [f"{k}={v}" for k, v in env.items()]
    q = shlex.quote
    missing = q(f"{prog} not found on the node; provision it first")
    return (
        f"umask 022; cd {q(bundle_dir)} || exit 3; "
        f"command -v {q(prog)} >/dev/null 2>&1 || {{ echo {missing} >&2; exit 127; }}; "
        f"exec flock -n -E {LOCK_HELD_RC} {q(lock)} setsid -w "
        f"sh -c 'echo $$ > \"$0\" && exec \"$@\"' {q(pgid_file)} "
        f"env {shlex.join(assign + argv)}"
    )


def check_args(digest: str, run_id: str, remote_base: str) -> None:
    if not _DIGEST.fullmatch(digest):
        raise ValueError(f"bundle digest {digest!r} is not a sha256 hex digest")
    if not _SAFE_RUN_ID.fullmatch(run_id):
        raise ValueError(f"run id {run_id!r} is not a safe directory name")
    if not remote_base.startswith("/"):
        raise ValueError(f"remote_base {remote_base!r} is not an absolute path")


def _verify_script(cache: str, digest: str, rdir: str) -> str:
    """Exit 11: not shipped; 10: corrupt or not matching; 0: the unpacked folder on stdout."""
    q = shlex.quote
    c = q(cache)
    return (
        f"[ -f {c} ] || exit 11; umask 022; "
        f"d=$(mktemp -d {q(rdir + '/bundle.XXXXXX')}) || exit 12; "
        f"if ! gzip -dc -- {c} > \"$d/bundle.tar\" 2>/dev/null || "
        f"! printf '%s  %s\\n' {digest} \"$d/bundle.tar\" | sha256sum -c --status; "
        "then rm -rf -- \"$d\"; exit 10; fi; "
        "tar -xf \"$d/bundle.tar\" -C \"$d\" --no-same-owner || exit 13; "
        "rm -f -- \"$d/bundle.tar\"; printf '%s\\n' \"$d\""
    )


def _mkdir_problem(err: str, fallback: str) -> str:
    m = re.search(r"cannot create directory ['‘\"]?(.+?)['’\"]?: (.+)$", err.strip(), re.M)
    if m:
        return f"cannot create {one_line(m.group(1))}: {one_line(m.group(2))}"
    return f"cannot create {fallback}: {one_line(_reason(err)) or 'mkdir failed'}"


def _reason(err: str) -> str:
    lines = err.strip().splitlines()
    return one_line(lines[-1].rsplit(": ", 1)[-1]) if lines else ""


class Shipper:
    """The session's preparation: run folder, bundle, uploads. Takes the node's shell,
    where notes and status go, and the outcome it marks `shipped`; keeps the /tmp upload
    folder of a `become` session until cleanup()."""

    def __init__(self, shell: NodeShell, note: Callable[[str], None],
                 on_status: Callable[[str], None], out: SessionOutcome) -> None:
        self.shell = shell
        self.note = note
        self.on_status = on_status
        self.out = out
        self.staging: str | None = None  # become: the user's upload folder under /tmp

    def prepare(self, base: str, rdir: str, resume: bool) -> None:
        self.on_status("preparing")
        q = shlex.quote
        if resume:
            leaf = f"[ -d {q(rdir)} ] || exit 23"
        else:  # exclusive: no -p on the leaf, an existing directory is an error
            leaf = f"mkdir -- {q(rdir)} || {{ [ -e {q(rdir)} ] && exit 21; exit 22; }}"
        # a resumed run's old pgid file would hide a held lock (see the session's _run_suite)
        script = (f"umask 022; mkdir -p -- {q(base + '/bundle')} {q(base + '/runs')} "
                  f"|| exit 20; {leaf}; rm -f -- {q(rdir + '/pgid')}")
        rc, _, err = self.shell.exec(script, "preparing the node")
        if rc == 21:
            raise Fail(f"remote run directory {rdir} already exists (a run id used twice)")
        if rc == 23:
            raise Fail(f"nothing to resume: {rdir} does not exist on the node")
        if rc in (20, 22):
            raise Fail(_mkdir_problem(err, rdir if rc == 22 else f"{base}/runs"))
        if rc:
            raise Fail(command_failed("preparing the node", rc, err))

    def bundle(self, payload: bytes, digest: str, base: str, rdir: str) -> str:
        """Verify the cached bundle by its hash and unpack it fresh; ship it when needed."""
        cache = f"{base}/bundle/{digest}.tar.gz"
        shipped_now = False
        while True:
            self.on_status("verifying bundle")
            rc, out, err = self.shell.exec(_verify_script(cache, digest, rdir),
                                           "verifying the bundle")
            if rc == 0:
                bundle_dir = out.strip()
                if not (bundle_dir.startswith(f"{rdir}/bundle.") and "\n" not in bundle_dir):
                    raise Fail(f"verifying the bundle printed {one_line(bundle_dir, 80)!r}")
                return bundle_dir
            if rc not in (10, 11):
                raise Fail(command_failed("unpacking the bundle", rc, err))
            if shipped_now:
                raise Fail(f"the bundle on the node does not match sha256 {digest[:12]} "
                            "even after shipping it again")
            if rc == 10:
                self.note(f"cached bundle {cache} does not match its sha256: shipping again")
            self.on_status("shipping bundle")
            self.put(payload, cache)
            shipped_now = self.out.shipped = True

    def put(self, data: bytes, dest: str) -> None:
        """Upload to dest atomically (a temporary name, then mv); become: staged in /tmp."""
        token = secrets.token_hex(4)
        tmp = f"{dest}.part-{token}"
        q = shlex.quote
        if self.shell.become:
            staged = f"{self._staging()}/{token}"
            self._sftp_write(staged, data)
            script = (f"install -m 0644 -- {q(staged)} {q(tmp)} && mv -f -- {q(tmp)} {q(dest)}; "
                      f"rc=$?; rm -f -- {q(staged)} {q(tmp)}; exit $rc")
        else:
            self._sftp_write(tmp, data)
            script = f"mv -f -- {q(tmp)} {q(dest)} || {{ rc=$?; rm -f -- {q(tmp)}; exit $rc; }}"
        rc, _, err = self.shell.exec(script, f"writing {dest}")
        if rc:
            raise Fail(f"cannot write {dest}: {_reason(err) or f'exit status {rc}'}")

    def _staging(self) -> str:
        if self.staging is None:  # as the login user: sudo installs from here
            rc, out, err = self.shell.exec("mktemp -d /tmp/rackready.XXXXXX",
                                           "making an upload folder", become=False)
            path = out.strip()
            if rc or not path.startswith("/tmp/rackready.") or "\n" in path:
                raise Fail(command_failed("making an upload folder in /tmp", rc, err))
            self.staging = path
        return self.staging

    def _sftp_write(self, path: str, data: bytes) -> None:
        sftp = open_sftp(self.shell.client, self.shell.limits.command_s)
        try:
            with sftp_errors("write", path, self.shell.client), sftp.open(path, "wb") as fh:
                fh.set_pipelined(True)
                fh.write(data)
        finally:
            sftp.close()

    def cleanup(self) -> None:
        if self.staging is None:
            return
        try:
            rc, _, err = self.shell.exec(f"rm -rf -- {shlex.quote(self.staging)}",
                                         "removing the upload folder", become=False)
            if rc:
                self.note(f"could not remove {self.staging}: {one_line(err)}")
        except (Fail, OSError, EOFError, paramiko.SSHException) as exc:
            self.note(f"could not remove {self.staging}: {one_line(str(exc))}")


def quiet_shipper(client: paramiko.SSHClient, limits: Limits, become: bool) -> Shipper:
    """A shipper outside a suite run (ship_bundle, put_file): no node.log to note in, no
    status to show; its commands under limits.deadline_s from now."""
    shell = NodeShell(client, limits, become, time.monotonic() + limits.deadline_s)
    return Shipper(shell, lambda text: None, lambda text: None,
                   SessionOutcome(rc=None, problem=""))
