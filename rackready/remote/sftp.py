"""SFTP on a node's connection: opened with an idle timeout, its refusals told apart from
a lost connection (shipping writes through it, the fetch reads through it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import paramiko

from rackready.remote.runner import Fail
from rackready.sanitize import one_line


class Refused(Fail):
    """The node's SFTP server refused one request (permission, missing file)."""

    def __init__(self, message: str, errno_: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno_


def sftp_channel(sftp: paramiko.SFTPClient) -> paramiko.Channel:
    """The SFTP session's channel (paramiko types it optional; an open client has one)."""
    channel = sftp.get_channel()
    assert channel is not None
    return channel


def open_sftp(client: paramiko.SSHClient, idle: float) -> paramiko.SFTPClient:
    sftp = client.open_sftp()
    sftp_channel(sftp).settimeout(idle)  # a node that stops answering
    return sftp


@contextmanager
def sftp_errors(verb: str, path: str, client: paramiko.SSHClient) -> Iterator[None]:
    """An SFTP refusal is reported as what it is; only a dead connection is 'lost'."""
    try:
        yield
    except (PermissionError, FileNotFoundError) as exc:
        raise Refused(f"cannot {verb} {path}: {exc.strerror or exc}", exc.errno) from None
    except (TimeoutError, ConnectionError):
        raise
    except OSError as exc:
        transport = client.get_transport()
        if transport is not None and transport.is_active():
            raise Refused(f"cannot {verb} {path}: {one_line(str(exc)) or 'SFTP failure'}"
                          ) from None
        raise
