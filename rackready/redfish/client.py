"""A small Redfish client: TLS verified against a CA bundle, sessions with basic-auth fallback.

Stdlib only (http.client + ssl) so the BIOS module runs with ansible-core alone. Every
error is one line that names the BMC and never carries the password (RedfishError
scrubs it as a last guard; the messages are built without it in the first place).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import ssl
from typing import Any
from urllib.parse import urlsplit

SERVICE_ROOT = "/redfish/v1"
# Cap on one response body: a BMC's answer is a few hundred KiB at most.
MAX_BODY = 16 * 1024 * 1024


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

    def _connection(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout,
                                               context=self._ctx)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

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
        conn = self._connection()
        try:
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            raw = resp.read(MAX_BODY + 1)
            rh = {k.lower(): v for k, v in resp.getheaders()}
            status = resp.status
        except ssl.SSLCertVerificationError as exc:
            raise self._error(f"TLS certificate not trusted ({exc.verify_message}); give the "
                              "site CA in rackready_bmc_ca_file") from None
        except ssl.SSLError as exc:
            raise self._error(f"TLS failed: {exc.reason or exc}") from None
        except TimeoutError:
            raise self._error(f"unreachable: no answer within {self.timeout:g} s") from None
        except OSError as exc:
            raise self._error(f"unreachable: {exc.strerror or exc}") from None
        except http.client.HTTPException as exc:
            raise self._error(f"broken HTTP answer: {type(exc).__name__}") from None
        finally:
            conn.close()
        if len(raw) > MAX_BODY:
            raise self._error(f"{method} {path}: answer larger than {MAX_BODY} bytes")
        parsed: Any = None
        if raw.strip():
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
        return status, rh, parsed

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


def members(client: Client, collection_uri: str | None, limit: int = 5000) -> list[str]:
    """Member URIs of a collection, following Members@odata.nextLink pages."""
    out: list[str] = []
    uri = collection_uri
    while uri and len(out) < limit:
        body = client.get(uri)
        out += [m["@odata.id"] for m in body.get("Members") or []
                if isinstance(m, dict) and m.get("@odata.id")]
        uri = body.get("Members@odata.nextLink")
    return out[:limit]
