"""An in-process SSH node for tests: paramiko in server mode on a localhost socket.

The client side is the real one (rackready.remote.ssh.connect: host key checked against a
known_hosts file, RejectPolicy). Exec requests run through /bin/sh on this machine
with the node's temp folder as working directory, or through a scripted Python
behaviour (exec_hook). SFTP serves the real files, reports symlinks as symlinks
(lstat, listings) and refuses any path outside the node's folder.

Hostile touches a test can switch on:
    fake_entries[dir] = {name: bytes}   extra listing entries (names no file system allows)
    listed_sizes[name] = n              the size a fake entry claims in the listing
    deny_writes = True                  SFTP writes answer "permission denied"
    denied.add(path)                    SFTP answers "permission denied" for that path
    corrupt_uploads = True              every uploaded byte string arrives altered
    after_exec = fn(command, channel)   called when a command's process has ended, before
                                        its exit status: a node that rewrites its own
                                        files or prints more after the suite ran
    list_delay = 3.0                    each folder listing is answered this late

As a jump host: forwarding = True accepts "direct-tcpip" channels (ssh -J, ProxyJump)
and connects them to the destination; forwarded records every destination asked for.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import paramiko
from paramiko import SFTPAttributes, SFTPHandle, SFTPServer, SFTPServerInterface
from paramiko.common import MSG_CHANNEL_FAILURE, MSG_CHANNEL_SUCCESS

from rackready.remote import ssh
from rackready.site.inventory import Node

# a hook gets the command and the channel; it returns True when it handled the request
ExecHook = Callable[[str, paramiko.Channel], bool]


class FakeNode:
    def __init__(self, root: Path, exec_hook: ExecHook | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.root = root.resolve()
        self.env = {**os.environ, **(env or {})}  # what the node's commands see
        self.root.mkdir(parents=True, exist_ok=True)
        self.exec_hook = exec_hook
        self.commands: list[str] = []
        self.uploads: list[str] = []  # paths opened for writing over SFTP
        self.fake_entries: dict[str, dict[str, bytes]] = {}
        self.listed_sizes: dict[str, int] = {}  # a fake entry's size as listed (a lie)
        self.deny_writes = False
        self.denied: set[str] = set()  # paths SFTP answers "permission denied" for
        self.corrupt_uploads = False
        self.after_exec: Callable[[str, paramiko.Channel], None] | None = None
        self.list_delay = 0.0  # seconds before each folder listing is answered
        self.procs: list[subprocess.Popen] = []
        self.allowed = [f"{self.root}/"]  # SFTP serves paths under these prefixes only
        self.transports: list[paramiko.Transport] = []
        self.forwarding = False  # a jump host: direct-tcpip channels are connected onwards
        self.forwarded: list[tuple[str, int]] = []
        self._forwards: dict[int, tuple[str, int]] = {}  # channel id -> destination
        self._host_key = paramiko.ECDSAKey.generate()
        self._client_key = paramiko.ECDSAKey.generate()
        keys = root.parent / f"{root.name}-keys"
        keys.mkdir(exist_ok=True)
        key_file = keys / "id_ecdsa"
        self._client_key.write_private_key_file(str(key_file))
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        port = self._sock.getsockname()[1]
        known = keys / "known_hosts"
        known.write_text(f"[127.0.0.1]:{port} {self._host_key.get_name()} "
                         f"{self._host_key.get_base64()}\n")
        self.node = Node(name="fake01", address="127.0.0.1", profile="test", platform="",
                         fabric="", user="tester", port=port, key_file=str(key_file),
                         known_hosts=str(known), sysroot="/", lab=True,
                         # the suite runs on this machine: its hostname is the node's
                         hostname=socket.gethostname())
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="fake-node-accept").start()

    # -- test side ---------------------------------------------------------------------

    def connect(self) -> paramiko.SSHClient:
        return ssh.connect(self.node, timeout_s=5)

    def drop_connections(self) -> None:
        """The network goes away: every SSH connection closes."""
        for t in self.transports:
            t.close()

    def close(self) -> None:
        self._closed = True
        self._sock.close()
        self.drop_connections()
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    # -- server side -------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            transport = paramiko.Transport(conn)
            transport.add_server_key(self._host_key)
            transport.set_subsystem_handler("sftp", SFTPServer, _SFTP, fake=self)
            self.transports.append(transport)
            try:
                transport.start_server(server=_Server(self))
            except (OSError, EOFError, paramiko.SSHException):
                transport.close()  # a client that went away during the handshake
                continue
            threading.Thread(target=self._channels, args=(transport,), daemon=True,
                             name="fake-node-channels").start()

    def _channels(self, transport: paramiko.Transport) -> None:
        """Every channel opened lands in the accept queue; forwarded ones are bridged."""
        while transport.is_active() and not self._closed:
            channel = transport.accept(timeout=0.5)
            if channel is None:
                continue
            dest = self._forwards.pop(channel.get_id(), None)
            if dest is not None:
                threading.Thread(target=_bridge, args=(channel, dest), daemon=True,
                                 name="fake-node-forward").start()

    def run_exec(self, command: str, channel: paramiko.Channel) -> None:
        self.commands.append(command)
        if self.exec_hook is not None and self.exec_hook(command, channel):
            return
        proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=self.root,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=self.env)
        self.procs.append(proc)
        pumps = [threading.Thread(target=_pump, args=(proc.stdout, channel.sendall), daemon=True),
                 threading.Thread(target=_pump, args=(proc.stderr, channel.sendall_stderr),
                                  daemon=True)]
        for p in pumps:
            p.start()
        rc = proc.wait()
        for p in pumps:
            p.join()
        if self.after_exec is not None:
            self.after_exec(command, channel)
        finish(channel, rc if rc >= 0 else 128 - rc)

    def path(self, remote: str | bytes) -> str:
        text = remote.decode(errors="surrogateescape") if isinstance(remote, bytes) else remote
        p = os.path.abspath(text)
        if p in self.denied:
            raise PermissionError(13, "denied")
        if not (p == str(self.root) or any(p.startswith(a) for a in self.allowed)):
            raise PermissionError(13, "outside the fake node")
        return p


def finish(channel: paramiko.Channel, rc: int) -> None:
    """End an exec request the way sshd does: EOF, exit status, close."""
    try:
        channel.shutdown_write()
        channel.send_exit_status(rc)
        channel.close()
    except (OSError, EOFError, paramiko.SSHException):
        pass


def _bridge(channel: paramiko.Channel, dest: tuple[str, int]) -> None:
    """A forwarded channel joined to a TCP connection, both ways, until either closes."""
    try:
        sock = socket.create_connection(dest, timeout=5)
    except OSError:
        channel.close()
        return
    sock.settimeout(None)

    def onward() -> None:
        try:
            while data := channel.recv(1 << 15):
                sock.sendall(data)
        except (OSError, EOFError):
            pass
        finally:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)

    threading.Thread(target=onward, daemon=True).start()
    try:
        while data := sock.recv(1 << 15):
            channel.sendall(data)
    except (OSError, EOFError, paramiko.SSHException):
        pass
    finally:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            channel.close()  # the client may have dropped the connection already
        sock.close()


def _pump(pipe, send) -> None:
    """Copy a process pipe to the channel; like sshd, stop (and close it) once the
    channel is gone, so a writing process then gets EPIPE."""
    try:
        while True:
            data = pipe.read1(1 << 15)
            if not data:
                return
            send(data)
    except (OSError, EOFError, paramiko.SSHException):
        pass
    finally:
        pipe.close()


class _Server(paramiko.ServerInterface):
    def __init__(self, fake: FakeNode) -> None:
        self.fake = fake

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        if key.get_base64() == self.fake._client_key.get_base64():
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_direct_tcpip_request(self, chanid: int, origin, destination) -> int:
        if not self.fake.forwarding:
            return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED
        dest = (str(destination[0]), int(destination[1]))
        self.fake.forwarded.append(dest)
        self.fake._forwards[chanid] = dest
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        # paramiko sends the request's success reply after this returns: a command that
        # ended (and closed its channel) before that reads as "Channel closed." to the
        # client, a race sshd does not have (it replies before the command can end). The
        # command waits for the reply, then runs.
        replied = _reply_sent(channel)

        def run() -> None:
            replied.wait(10)
            self.fake.run_exec(command.decode(), channel)

        threading.Thread(target=run, daemon=True, name="fake-node-exec").start()
        return True


def _reply_sent(channel: paramiko.Channel) -> threading.Event:
    """Set once the server transport has sent its reply to this channel's request: its
    sender is wrapped once per transport and sets the event of the channel it answers."""
    transport = channel.get_transport()
    send = transport._send_user_message
    waiting: dict[int, threading.Event] | None = getattr(send, "waiting", None)
    if waiting is None:
        waiting = {}

        def sending(m: paramiko.Message) -> None:
            send(m)
            data = m.asbytes()
            if data[:1] in (bytes([MSG_CHANNEL_SUCCESS]), bytes([MSG_CHANNEL_FAILURE])):
                sent = waiting.pop(int.from_bytes(data[1:5], "big"), None)
                if sent is not None:
                    sent.set()

        sending.waiting = waiting  # type: ignore[attr-defined]
        transport._send_user_message = sending
    event = waiting[channel.remote_chanid] = threading.Event()
    return event


class _Handle(SFTPHandle):
    def __init__(self, flags: int, fh, corrupt: bool) -> None:
        super().__init__(flags)
        self.readfile = self.writefile = fh
        self.corrupt = corrupt

    def write(self, offset: int, data: bytes) -> int:
        if self.corrupt:
            data = bytes(b ^ 0xFF for b in data)
        return super().write(offset, data)

    def stat(self):
        return SFTPAttributes.from_stat(os.fstat(self.readfile.fileno()))


class _MemHandle(SFTPHandle):
    """A file that exists only in a fake listing."""

    def __init__(self, data: bytes) -> None:
        super().__init__(os.O_RDONLY)
        self.data = data

    def read(self, offset: int, length: int) -> bytes:
        return self.data[offset:offset + length]

    def stat(self):
        return _regular(len(self.data), "")


def _regular(size: int, name: str) -> SFTPAttributes:
    attr = SFTPAttributes()
    attr.st_mode = stat.S_IFREG | 0o644
    attr.st_size = size
    attr.filename = name
    return attr


class _SFTP(SFTPServerInterface):
    def __init__(self, server, *args, fake: FakeNode, **kwargs) -> None:
        super().__init__(server, *args, **kwargs)
        self.fake = fake

    def _fake_file(self, path: str) -> bytes | None:
        for folder, entries in self.fake.fake_entries.items():
            for name, data in entries.items():
                if path == f"{folder}/{name}":
                    return data
        return None

    def list_folder(self, path):
        time.sleep(self.fake.list_delay)
        try:
            p = self.fake.path(path)
            out = []
            for name in os.listdir(p):
                attr = SFTPAttributes.from_stat(os.lstat(os.path.join(p, name)))
                attr.filename = name
                out.append(attr)
            out += [_regular(self.fake.listed_sizes.get(name, len(data)), name)
                    for name, data in self.fake.fake_entries.get(p, {}).items()]
            return out
        except OSError as exc:
            return SFTPServer.convert_errno(exc.errno)

    def stat(self, path):
        try:
            return SFTPAttributes.from_stat(os.stat(self.fake.path(path)))
        except OSError as exc:
            return SFTPServer.convert_errno(exc.errno)

    def lstat(self, path):
        try:
            return SFTPAttributes.from_stat(os.lstat(self.fake.path(path)))
        except OSError as exc:
            return SFTPServer.convert_errno(exc.errno)

    def open(self, path, flags, attr):
        data = self._fake_file(path)
        if data is not None:
            return _MemHandle(data)
        try:
            p = self.fake.path(path)
            writing = flags & (os.O_WRONLY | os.O_RDWR)
            if writing:
                self.fake.uploads.append(p)
                if self.fake.deny_writes:
                    raise PermissionError(13, "denied")
            if not writing:  # a symlink is followed only inside the node's folder
                self.fake.path(os.path.realpath(p))
            fd = os.open(p, flags | getattr(os, "O_BINARY", 0), 0o644)
            mode = "wb" if flags & os.O_WRONLY else "r+b" if flags & os.O_RDWR else "rb"
            if flags & os.O_APPEND:
                mode = "ab"
            return _Handle(flags, os.fdopen(fd, mode), writing and self.fake.corrupt_uploads)
        except OSError as exc:
            return SFTPServer.convert_errno(exc.errno)

    def remove(self, path):
        try:
            os.remove(self.fake.path(path))
        except OSError as exc:
            return SFTPServer.convert_errno(exc.errno)
        return paramiko.SFTP_OK

    def rename(self, oldpath, newpath):
        try:
            os.rename(self.fake.path(oldpath), self.fake.path(newpath))
        except OSError as exc:
            return SFTPServer.convert_errno(exc.errno)
        return paramiko.SFTP_OK

    posix_rename = rename

    def mkdir(self, path, attr):
        try:
            os.mkdir(self.fake.path(path))
        except OSError as exc:
            return SFTPServer.convert_errno(exc.errno)
        return paramiko.SFTP_OK

    def chattr(self, path, attr):
        return paramiko.SFTP_OK
