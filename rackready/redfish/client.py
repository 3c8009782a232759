"""A small Redfish client: TLS verified against a CA bundle, sessions with basic-auth fallback.

Stdlib only (http.client + ssl) so the BIOS module runs with ansible-core alone. Every
error is one line that names the BMC and never carries the password (RedfishError
scrubs it as a last guard; the messages are built without it in the first place).

The BMC is an untrusted party, like the node: every request ends within `timeout` however
slowly the BMC answers (a watchdog cuts the connection, whatever phase it is in), a caller
bounds a whole read with one deadline and a byte budget (Client.bounded), a collection is
walked within bounds of pages, members and bytes (pages, members), and a number JSON
cannot carry (NaN, Infinity, 1e999, a 400-digit integer) never leaves the client as a
number: it comes back as the BMC's text, which no reading accepts.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import math
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

SERVICE_ROOT = "/redfish/v1"
# Cap on one response body: a BMC's answer is a few hundred KiB at most.
MAX_BODY = 16 * 1024 * 1024
# A collection walk: pages (a 2000-entry log at iDRAC's 50 a page is 40), the bytes of all
# its pages, the length of one member's URI. Past them the BMC is not telling a collection.
MAX_PAGES = 256
MAX_WALK_BYTES = 64 * 1024 * 1024
MAX_URI = 2048
# Integers longer than this come back as text: no Redfish count or size needs more
# (an 8 PB drive in bytes has 16 digits), and float() of 10**400 raises.
_MAX_INT_DIGITS = 18


def _finite_float(text: str) -> float | str:
    value = float(text)
    return value if math.isfinite(value) else text  # 1e999 is inf: the BMC's text instead


def _bounded_int(text: str) -> int | str:
    return int(text) if len(text.lstrip("-")) <= _MAX_INT_DIGITS else text


def parse(raw: bytes) -> Any:
    """JSON as the client hands it on: NaN, Infinity, 1e999 and huge integers as their text
    (JSON has no such numbers; a reading of that text is refused where it is read)."""
    return json.loads(raw, parse_constant=str, parse_float=_finite_float,
                      parse_int=_bounded_int)


class RedfishError(Exception):
    """One line for a person: which BMC, what failed, the BMC's own words."""

    def __init__(self, message: str, status: int | None = None, secret: str | None = None):
        text = " ".join(str(message).split())
        if secret:
            text = text.replace(secret, "********")
        super().__init__(text)
        self.status = status


class AuthError(RedfishError):
    """Wrong user or password (the password is never part of the message)."""


def extended_info(body: Any) -> str:
    """The BMC's explanation (@Message.ExtendedInfo, error.message) in one line."""
    if not isinstance(body, dict):
        return ""
    err = e if isinstance(e := body.get("error"), dict) else body
    infos = err.get("@Message.ExtendedInfo") or body.get("@Message.ExtendedInfo") or []
    msgs = []
    for info in infos if isinstance(infos, list) else []:
        if isinstance(info, dict):
            text = info.get("Message") or info.get("MessageId") or ""
            if info.get("Resolution"):
                text = f"{text} ({info['Resolution']})" if text else str(info["Resolution"])
            if text and text not in msgs:
                msgs.append(str(text))
    if not msgs and err.get("message"):
        msgs.append(str(err["message"]))
    return "; ".join(msgs)


def _split(address: str) -> tuple[str, str, int]:
    """'192.0.2.5', '192.0.2.5:8443', 'https://bmc1:443' -> (scheme, host, port)."""
    text = address if "://" in address else f"https://{address}"
    parts = urlsplit(text)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise RedfishError(f"BMC {address}: not a BMC address (host, host:port or https://host)")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname, port


class Client:
    """One BMC. Use as a context manager: login on enter, logout on exit."""

    def __init__(self, address: str, user: str, password: str, *, ca_file: str | None = None,
                 insecure_skip_verify: bool = False, timeout: float = 30.0,
                 node: str | None = None) -> None:
        self.address = address
        self.name = f"BMC {address}" + (f" of {node}" if node else "")
        self.scheme, self.host, self.port = _split(address)
        self._user = user
        self._password = password
        self.timeout = timeout
        self._token: str | None = None
        self._session_uri: str | None = None
        self._basic = False
        self.auth_mode = "none"
        # Client.bounded: one deadline (monotonic) and byte budget for a whole read
        self._deadline: float | None = None
        self._deadline_s = 0.0
        self._what = ""
        self._bytes_left: int | None = None
        self.bytes_read = 0
        if self.scheme == "https":
            if insecure_skip_verify:
                # Only through the loudly named inventory option; never a default.
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            else:
                try:
                    ctx = ssl.create_default_context(cafile=ca_file or None)
                except (OSError, ssl.SSLError) as exc:
                    raise RedfishError(f"{self.name}: cannot read the CA bundle {ca_file}: "
                                       f"{exc}") from None
            self._ctx: ssl.SSLContext | None = ctx
        else:
            self._ctx = None

    # ------------------------------------------------------------------ transport
    def _error(self, text: str, status: int | None = None) -> RedfishError:
        return RedfishError(f"{self.name}: {text}", status, self._password or None)

    def _connection(self, limit: float) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=limit,
                                               context=self._ctx)
        return http.client.HTTPConnection(self.host, self.port, timeout=limit)

    @contextlib.contextmanager
    def bounded(self, seconds: float, what: str,
                max_bytes: int | None = None) -> Iterator[None]:
        """One deadline (and optionally a byte budget) for every request made inside: a
        BMC that answers slowly, at length or without end fails the read, naming `what`."""
        saved = self._deadline, self._deadline_s, self._what, self._bytes_left
        self._deadline, self._deadline_s = time.monotonic() + seconds, seconds
        self._what, self._bytes_left = what, max_bytes
        try:
            yield
        finally:
            self._deadline, self._deadline_s, self._what, self._bytes_left = saved

    def _limits(self, method: str, path: str) -> tuple[float, int, str]:
        """(seconds this request may take, bytes it may read, what a cut says)."""
        limit, why = self.timeout, f"{method} {path}: no complete answer within " \
                                   f"{self.timeout:g} s"
        if self._deadline is not None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise self._error(f"{self._what}: not done within {self._deadline_s:g} s")
            if left < limit:
                limit, why = left, f"{self._what}: not done within {self._deadline_s:g} s"
        cap = MAX_BODY
        if self._bytes_left is not None:
            if self._bytes_left <= 0:
                raise self._error(f"{self._what}: more than its budget of bytes")
            cap = min(cap, self._bytes_left)
        return limit, cap, why

    def _auth_headers(self) -> dict[str, str]:
        if self._token:
            return {"X-Auth-Token": self._token}
        if self._basic:
            raw = f"{self._user}:{self._password}".encode()
            return {"Authorization": "Basic " + base64.b64encode(raw).decode()}
        return {}

    def raw(self, method: str, path: str, body: Any = None, *, auth: bool = True,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
        """(status, headers, parsed JSON or None); network and TLS trouble -> RedfishError."""
        hdrs = {"Accept": "application/json", "OData-Version": "4.0", **(headers or {})}
        if auth:
            hdrs.update(self._auth_headers())
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        limit, cap, late = self._limits(method, path)
        conn = self._connection(limit)
        watch = _Watchdog(conn, limit)
        try:
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            raw = resp.read(cap + 1)
            rh = {k.lower(): v for k, v in resp.getheaders()}
            status = resp.status
        except Exception as exc:  # noqa: BLE001  a BMC's broken answer is one line, never a trace
            if watch.stop():  # the watchdog's cut reads as any broken read
                raise self._error(late) from None
            if isinstance(exc, TimeoutError) and limit < self.timeout:
                # the socket's own timeout beat the watchdog to the same instant: the cut is
                # the whole read's deadline, not a BMC silent for its full timeout
                raise self._error(late) from None
            raise self._failed(exc) from None
        finally:
            watch.stop()
            conn.close()
        if watch.cut:  # cut as the answer ended: what came may be torn
            raise self._error(late)
        self.bytes_read += len(raw)
        if self._bytes_left is not None:
            self._bytes_left -= len(raw)
        if len(raw) > cap:
            if cap < MAX_BODY:
                raise self._error(f"{self._what}: more than its budget of bytes")
            raise self._error(f"{method} {path}: answer larger than {MAX_BODY} bytes")
        parsed: Any = None
        if raw.strip():
            try:
                parsed = parse(raw)
            except ValueError:
                parsed = None
        return status, rh, parsed

    def _failed(self, exc: Exception) -> RedfishError:
        """A transport failure in one line."""
        if isinstance(exc, ssl.SSLCertVerificationError):
            return self._error(f"TLS certificate not trusted ({exc.verify_message}); give "
                               "the site CA in rackready_bmc_ca_file")
        if isinstance(exc, ssl.SSLError):
            return self._error(f"TLS failed: {exc.reason or exc}")
        if isinstance(exc, TimeoutError):
            return self._error(f"unreachable: no answer within {self.timeout:g} s")
        if isinstance(exc, OSError):
            return self._error(f"unreachable: {exc.strerror or exc}")
        return self._error(f"broken HTTP answer: {type(exc).__name__}")

    def request(self, method: str, path: str, body: Any = None,
                ok: tuple[int, ...] = (200, 201, 202, 204)) -> tuple[int, dict[str, str], Any]:
        status, headers, parsed = self.raw(method, path, body)
        if status in (401, 403) and status not in ok:
            raise AuthError(f"{self.name}: authentication failed", status)
        if status not in ok:
            why = extended_info(parsed)
            raise self._error(f"{method} {path}: HTTP {status}" + (f": {why}" if why else ""),
                              status)
        return status, headers, parsed

    def get(self, path: str) -> dict[str, Any]:
        _, _, body = self.request("GET", path)
        if not isinstance(body, dict):
            raise self._error(f"GET {path}: not a JSON object")
        nxt = body.get("Members@odata.nextLink")
        if isinstance(nxt, str) and _same_page(nxt, path):  # whoever walks it, it never ends
            raise self._error(f"collection {path}: its next page is itself (a nextLink loop)")
        return body

    def patch(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        return self.request("PATCH", path, body)

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        return self.request("POST", path, body)

    # ------------------------------------------------------------------ sessions
    def login(self) -> None:
        """A Redfish session (SessionService); basic auth where the BMC offers none."""
        status, _, root = self.raw("GET", SERVICE_ROOT + "/", auth=False)
        if status != 200 or not isinstance(root, dict):
            raise self._error(f"no Redfish service at {SERVICE_ROOT} (HTTP {status})", status)
        self.root = root
        sessions = ((root.get("Links") or {}).get("Sessions") or {}).get("@odata.id")
        if sessions:
            creds = {"UserName": self._user, "Password": self._password}
            status, headers, body = self.raw("POST", sessions, creds, auth=False)
            if status in (200, 201, 204) and headers.get("x-auth-token"):
                self._token = headers["x-auth-token"]
                loc = headers.get("location") or (body or {}).get("@odata.id")
                self._session_uri = urlsplit(loc).path if loc else None
                self.auth_mode = "session"
                return
            if status in (400, 401, 403):
                raise AuthError(f"{self.name}: authentication failed", status)
        # No session service (or one that refuses sessions): basic auth, proven by one GET.
        self._basic = True
        self.auth_mode = "basic"
        probe = ((root.get("Systems") or {}).get("@odata.id")) or SERVICE_ROOT + "/Systems"
        status, _, _ = self.raw("GET", probe)
        if status in (401, 403):
            raise AuthError(f"{self.name}: authentication failed", status)

    def logout(self) -> None:
        if self._token and self._session_uri:
            with contextlib.suppress(RedfishError):  # it times out on the BMC anyway
                self.raw("DELETE", self._session_uri)
        self._token = None
        self._session_uri = None

    def __enter__(self) -> Client:
        self.login()
        return self

    def __exit__(self, *exc: object) -> None:
        self.logout()


def _same_page(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.path.rstrip("/"), pa.query) == (pb.path.rstrip("/"), pb.query)


class _Watchdog:
    """Cuts one connection when its time is up, in whatever phase it is (connect, TLS,
    headers, body): a socket timeout bounds one recv, and a BMC that trickles a byte
    every few seconds never trips it."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self._conn = conn
        self._fd = -1
        self._lock = threading.Lock()
        self._done = False
        self.cut = False
        create = conn._create_connection  # type: ignore[attr-defined]

        def tracked(*args: Any, **kwargs: Any) -> socket.socket:
            sock = create(*args, **kwargs)
            self._fd = sock.fileno()  # the TLS socket wraps this same descriptor
            return sock

        conn._create_connection = tracked  # type: ignore[attr-defined]
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._done or self._fd < 0:
                self.cut = not self._done
                return
            self.cut = True
            with contextlib.suppress(OSError):  # a duplicate: shutdown acts on the connection
                dup = socket.fromfd(self._fd, socket.AF_INET, socket.SOCK_STREAM)
                try:
                    dup.shutdown(socket.SHUT_RDWR)
                finally:
                    dup.close()

    def stop(self) -> bool:
        """Disarm (before the connection closes); whether it had cut the connection."""
        with self._lock:
            self._done = True
        self._timer.cancel()
        return self.cut


def link(resource: dict[str, Any], *keys: str) -> str | None:
    """The @odata.id reached through keys (e.g. link(root, 'Systems'))."""
    cur: Any = resource
    for k in keys:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(k)
    if isinstance(cur, dict):
        value = cur.get("@odata.id")
        return str(value) if value else None
    return None


def pages(client: Client, collection_uri: str | None, *,
          max_pages: int = MAX_PAGES, max_bytes: int = MAX_WALK_BYTES
          ) -> Iterator[dict[str, Any]]:
    """Each page of a collection, following Members@odata.nextLink: a link back to a page
    already read, more than max_pages pages or max_bytes bytes end the walk in one line."""
    seen: set[str] = set()
    start = client.bytes_read
    uri = collection_uri
    while uri:
        if uri in seen:
            raise client._error(f"collection {collection_uri}: its next page {uri} was read "
                                "already (a nextLink loop)")
        if len(seen) >= max_pages:
            raise client._error(f"collection {collection_uri}: more than {max_pages} pages")
        seen.add(uri)
        body = client.get(uri)
        if client.bytes_read - start > max_bytes:
            raise client._error(f"collection {collection_uri}: more than {max_bytes} bytes "
                                "of pages")
        yield body
        nxt = body.get("Members@odata.nextLink")
        uri = nxt if isinstance(nxt, str) and nxt else None


def members(client: Client, collection_uri: str | None, limit: int = 5000) -> list[str]:
    """Member URIs of a collection (at most limit, each at most MAX_URI long), following
    its pages within the bounds of pages()."""
    out: list[str] = []
    for body in pages(client, collection_uri):
        listed = body.get("Members")
        out += [m["@odata.id"] for m in listed if isinstance(m, dict)
                and isinstance(m.get("@odata.id"), str) and 0 < len(m["@odata.id"]) <= MAX_URI
                ] if isinstance(listed, list) else []
        if len(out) >= limit:
            break
    return out[:limit]
