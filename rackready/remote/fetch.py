"""The capped fetch: result.json and the artifacts/ tree over SFTP, within caps and a
deadline, refusing hostile names (a folder listed with paramiko's private requests)."""

from __future__ import annotations

import errno
import os
import secrets
import stat
import time
from collections.abc import Callable
from pathlib import Path

import paramiko
from paramiko.sftp import CMD_CLOSE, CMD_HANDLE, CMD_NAME, CMD_OPENDIR, CMD_READDIR

from rackready.remote.records import Limits, NodeFiles, SessionOutcome
from rackready.remote.runner import CHUNK, Fail, size_text
from rackready.remote.sftp import Refused, open_sftp, sftp_channel, sftp_errors
from rackready.sanitize import one_line, strip_control

MAX_NAME_BYTES = 255  # one artifact file or directory name

MAX_DEPTH = 8  # directory levels under artifacts/


class _StopWalk(Exception):
    """More entries under artifacts/ than max_files: the walk ends there."""


def unsafe_name(name: str) -> str:
    """Why a node-chosen file name may not be used on the controller ("" when it may)."""
    if not name:
        return "empty"
    if name in (".", ".."):
        return f"is {name!r}"
    if "/" in name:
        return "contains '/'"
    if "\x00" in name:
        return "contains NUL"
    if strip_control(name) != name or "\n" in name or "\t" in name:
        return "contains control characters"
    if len(name.encode("utf-8", errors="surrogateescape")) > MAX_NAME_BYTES:
        return f"longer than {MAX_NAME_BYTES} bytes"
    return ""


def _request(sftp: paramiko.SFTPClient, t: int, *args: object) -> tuple[int, paramiko.Message]:
    """paramiko's private request call (its stubs leave it out): the reply's type and body."""
    reply: tuple[int, paramiko.Message] = sftp._request(t, *args)  # type: ignore[attr-defined]
    return reply


def _listdir(sftp: paramiko.SFTPClient, path: str, limit: int,
             in_time: Callable[[], None] = lambda: None
             ) -> list[tuple[bytes, paramiko.SFTPAttributes]] | None:
    """At most `limit` entries of a remote folder, names as raw bytes; None when missing.

    paramiko's listdir_attr reads a whole folder into memory and decodes names strictly;
    a node listing millions of entries or non-UTF-8 names must not take the controller down.
    in_time runs before every request (the fetch's deadline; it raises when passed).
    """
    try:
        in_time()
        t, msg = _request(sftp, CMD_OPENDIR, path)
    except FileNotFoundError:
        return None
    if t != CMD_HANDLE:
        raise paramiko.SFTPError("expected a handle")
    handle = msg.get_binary()
    entries: list[tuple[bytes, paramiko.SFTPAttributes]] = []
    try:
        while len(entries) < limit:
            in_time()
            try:
                t, msg = _request(sftp, CMD_READDIR, handle)
            except EOFError:
                break  # end of the folder
            if t != CMD_NAME:
                raise paramiko.SFTPError("expected a name response")
            for _ in range(msg.get_int()):
                raw = msg.get_string()
                msg.get_string()  # longname
                # private and unstubbed, like _request
                attr = paramiko.SFTPAttributes._from_msg(msg)  # type: ignore[attr-defined]
                entries.append((raw, attr))
    finally:
        _request(sftp, CMD_CLOSE, handle)
    return entries


def _local_write(local: Path, write: Callable[..., object], *args: object) -> None:
    """A write on the controller's own disk (full, a folder where the file goes) is the
    controller's problem, said as such: never read as the node's connection being lost."""
    try:
        write(*args)
    except OSError as exc:
        raise Fail(f"cannot write {local} on the controller: "
                    f"{exc.strerror or type(exc).__name__}") from None


def _kind(mode: int | None) -> str:
    mode = mode or 0
    if stat.S_ISLNK(mode):
        return "a symlink (not followed)"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a fifo"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


class Fetcher:
    """The fetch of result.json and artifacts/ into the node's files: takes the client,
    the files, the limits, the outcome it fills (fetched, refused, result_fetched) and
    where its notes go."""

    def __init__(self, client: paramiko.SSHClient, files: NodeFiles, limits: Limits,
                 out: SessionOutcome, note: Callable[[str], None]) -> None:
        self.client = client
        self.files = files
        self.limits = limits
        self.out = out
        self.note = note
        self.fetch_end = 0.0
        self.total = 0  # bytes fetched
        self.entries = 0  # entries listed under artifacts/

    def fetch(self, rout: str) -> None:
        files = self.files
        self.fetch_end = time.monotonic() + self.limits.fetch_s
        self.total = 0
        self.entries = 0
        sftp = open_sftp(self.client, self.limits.idle_s)
        try:
            try:
                self._in_time(sftp)
                with sftp_errors("read", f"{rout}/result.json", self.client):
                    attr = sftp.lstat(f"{rout}/result.json")
                    if not stat.S_ISREG(attr.st_mode or 0):
                        self._refuse("result.json", _kind(attr.st_mode))
                    else:
                        self.out.result_fetched = self._get(
                            sftp, f"{rout}/result.json", attr, files.result,
                            "result.json", "result.json")
            except Refused as exc:
                if exc.errno != errno.ENOENT:  # no result.json is said by result_fetched
                    self._refuse("result.json", str(exc))
            self._walk(sftp, f"{rout}/artifacts", files.artifacts.resolve(), [], 0)
        except _StopWalk:
            pass  # recorded as refused
        except TimeoutError:
            if time.monotonic() >= self.fetch_end - 0.05:  # the wait was cut to the deadline
                raise Fail(self._fetch_late()) from None
            raise Fail(f"stalled: no answer for {self.limits.idle_s:g} s while fetching "
                        "results") from None
        finally:
            sftp.close()

    def _fetch_late(self) -> str:
        return f"fetching results took longer than {self.limits.fetch_s:g} s"

    def _in_time(self, sftp: paramiko.SFTPClient) -> None:
        """Before each SFTP request of the fetch: the deadline passed ends it; the wait
        for an answer is cut to what is left of it (a slow node never stretches it)."""
        left = self.fetch_end - time.monotonic()
        if left <= 0:
            raise Fail(self._fetch_late())
        sftp_channel(sftp).settimeout(min(self.limits.idle_s, left))

    def _walk(self, sftp: paramiko.SFTPClient, remote: str, base: Path, parts: list[str],
              depth: int) -> None:
        room = self.limits.max_files - self.entries
        try:
            with sftp_errors("list", remote, self.client):
                entries = _listdir(sftp, remote, room + 1, lambda: self._in_time(sftp))
        except Refused as exc:
            self._refuse("/".join(parts) or ".", str(exc))
            return
        if entries is None:
            return  # no artifacts/ folder
        for raw, attr in sorted(entries, key=lambda e: e[0]):
            if raw in (b".", b".."):
                continue
            self.entries += 1
            if self.entries > self.limits.max_files:
                self._refuse("/".join([*parts, "*"]),
                             f"more than {self.limits.max_files} entries: the rest not fetched")
                raise _StopWalk
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                self._refuse(repr(raw)[1:], "unsafe name (not UTF-8)", quoted=True)
                continue
            shown = "/".join([*parts, name])
            why = unsafe_name(name)
            if why:
                self._refuse(shown, f"unsafe name ({why})")
                continue
            mode = attr.st_mode
            if mode is None:  # a server that lists no attributes
                self._in_time(sftp)
                mode = sftp.lstat(f"{remote}/{name}").st_mode or 0
            if stat.S_ISDIR(mode):
                if depth + 1 >= MAX_DEPTH:
                    self._refuse(shown, f"deeper than {MAX_DEPTH} levels")
                    continue
                self._walk(sftp, f"{remote}/{name}", base, [*parts, name], depth + 1)
            elif stat.S_ISREG(mode):
                local = (base / Path(*parts, name)).resolve()
                if not local.is_relative_to(base) or local == base:
                    self._refuse(shown, "resolves outside the artifacts folder")
                    continue
                try:
                    self._get(sftp, f"{remote}/{name}", attr, local, f"artifacts/{shown}", shown)
                except Refused as exc:
                    self._refuse(shown, str(exc))
            else:
                self._refuse(shown, _kind(mode))

    def _get(self, sftp: paramiko.SFTPClient, remote: str, attr: paramiko.SFTPAttributes,
             local: Path, shown: str, label: str) -> bool:
        """Copy one regular file, capped; a temporary name until it is whole."""
        cap = min(self.limits.max_file_bytes, self.limits.max_total_bytes - self.total)
        if (attr.st_size or 0) > cap:
            self._refuse(label, self._over(attr.st_size or 0))
            return False
        try:
            local.parent.mkdir(parents=True, exist_ok=True)
            tmp = local.with_name(f".{local.name}.part-{secrets.token_hex(4)}")
            fh = tmp.open("xb")
        except OSError as exc:
            raise Fail(f"cannot write {local} on the controller: {exc.strerror}") from None
        n = 0
        ok = False
        try:
            self._in_time(sftp)
            with fh, sftp_errors("read", remote, self.client), sftp.open(remote, "rb") as rf:
                if attr.st_size:  # requests in flight together: ~100x faster than one by one
                    rf.prefetch(min(attr.st_size, cap + 1))
                while True:
                    chunk = rf.read(min(CHUNK * 4, cap + 1 - n))
                    if not chunk:
                        break
                    n += len(chunk)
                    if n > cap:
                        self._refuse(label, self._over(n))
                        return False
                    _local_write(local, fh.write, chunk)
                    self._in_time(sftp)
            _local_write(local, os.replace, tmp, local)
            ok = True
        finally:
            if not ok:
                tmp.unlink(missing_ok=True)
        self.total += n
        self.out.fetched.append(shown)
        return True

    def _over(self, size: int) -> str:
        if size > self.limits.max_file_bytes:
            return f"larger than the per-file cap of {size_text(self.limits.max_file_bytes)}"
        return f"over the total cap of {size_text(self.limits.max_total_bytes)} per node"

    def _refuse(self, name: str, why: str, quoted: bool = False) -> None:
        shown = name if quoted else repr(name)
        self.out.refused.append(f"{one_line(shown, 120)}: {why}")
        self.note(f"refused {shown}: {why}")
