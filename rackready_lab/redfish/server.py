"""The lab BMC: an HTTPS Redfish service over one node's BMC state file.

Sessions (POST SessionService/Sessions -> X-Auth-Token + Location; DELETE logs
out) and HTTP basic auth; 401 on bad credentials, which are never logged or
echoed (a failed login is recorded as the BMCs do: user and address only).
While the state says `unreachable` (lab fault bmc-unreachable) the service
closes its listening socket, so connections are refused, and binds again once
healed.

Chassis Power and Thermal follow the node's load fraction u (envelope.py): the state's
load.override when set, else the `load` callable given, else what a LoadSampler measures
of the node's container (load.py) when a node is named, else 0. A watch thread lets the
under-load faults write their log entry when they trip, read or not.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from . import envelope, store
from . import resources as rf
from .base import ROOT, vendor_data
from .load import LoadSampler, node_pids

MAX_BODY = 1 << 20
POLL_S = 0.2
LOAD_PERIOD_S = 1.0  # how often the BMC measures the node's load
PUBLIC_GET = {"/redfish", ROOT, f"{ROOT}/odata", f"{ROOT}/$metadata"}
SESSIONS = f"{ROOT}/SessionService/Sessions"
TASK_MONITORS = f"{ROOT}/TaskService/TaskMonitors"


def etag(body: dict[str, Any]) -> str:
    return 'W/"' + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16] \
        + '"'


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that broke off (failed TLS handshake, reset): one line, no traceback
        sys.stderr.write(f"{client_address[0]} error {sys.exc_info()[1]!r}\n")


class BmcService:
    """One BMC: call serve() in a thread or process; stop() ends it."""

    def __init__(self, state_path: Path, host: str, port: int, certfile: Path, keyfile: Path,
                 user: str, password: str, on_reset: list[str] | None = None,
                 load: Callable[[], float] | None = None, node: str | None = None) -> None:
        """load: returns the node's load fraction u (tests); node: the lab node whose
        container's CPU time gives u when load is not given."""
        self.state_path = Path(state_path)
        self.host, self.port = host, port
        self.user, self._password = user, password
        self.on_reset = on_reset
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        self.ctx.load_cert_chain(certfile, keyfile)
        self.sessions: dict[str, dict[str, str]] = {}
        self.lock = threading.Lock()
        self.ready = threading.Event()  # set whenever the socket listens
        self._stop = threading.Event()
        self._flag_cache: tuple[int, bool] = (-1, False)
        self._load_fn = load
        self.sampler: LoadSampler | None = None
        if load is None and node:
            from rackready_lab.config import NodeSpec

            pidfile = NodeSpec(node, 0, "", "").dir / "nspawn.pid"
            self.sampler = LoadSampler(node_pids(pidfile), LOAD_PERIOD_S)
        self._armed_cache: tuple[int, bool] = (-1, False)

    # --- load ----------------------------------------------------------------------
    def measured_load(self) -> float:
        if self._load_fn is not None:
            return envelope.clamp(self._load_fn())
        return self.sampler.u if self.sampler is not None else 0.0

    def load(self, state: dict[str, Any]) -> float:
        """u as the BMC reports it: the state's override, else the measured load."""
        return rf.load_of(state, self.measured_load())

    def _armed(self) -> bool:
        """Whether the state holds an under-load fault yet to trip (the file is re-read
        only when it changed)."""
        try:
            mtime = os.stat(self.state_path).st_mtime_ns
        except FileNotFoundError:
            return False
        if mtime != self._armed_cache[0]:
            state = json.loads(self.state_path.read_text())
            armed = any(f["kind"] in envelope.UNDER_LOAD and not f.get("tripped")
                        for f in state.get("faults", []))
            self._armed_cache = (mtime, armed)
        return self._armed_cache[1]

    def _watch_load(self) -> None:
        while not self._stop.wait(LOAD_PERIOD_S):
            try:
                if self._armed():
                    with store.locked(self.state_path) as state:
                        envelope.observe(state, self.load(state))
            except (OSError, ValueError) as exc:
                sys.stderr.write(f"load watch: {exc!r}\n")

    # --- lifecycle ---------------------------------------------------------------
    def unreachable(self) -> bool:
        try:
            mtime = os.stat(self.state_path).st_mtime_ns
        except FileNotFoundError:
            return True
        if mtime != self._flag_cache[0]:
            flag = bool(json.loads(self.state_path.read_text()).get("unreachable"))
            self._flag_cache = (mtime, flag)
        return self._flag_cache[1]

    def _bind(self) -> ThreadingHTTPServer:
        service = self

        class Handler(RedfishHandler):
            bmc = service

        httpd = _Server((self.host, self.port), Handler, bind_and_activate=False)
        httpd.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        httpd.server_bind()
        httpd.server_activate()
        self.port = httpd.server_address[1]  # port 0: keep the one we got across rebinds
        httpd.socket = self.ctx.wrap_socket(httpd.socket, server_side=True,
                                            do_handshake_on_connect=False)
        return httpd

    def serve(self) -> None:
        if self.sampler is not None:
            self.sampler.start()
        threading.Thread(target=self._watch_load, name="bmc-load-watch", daemon=True).start()
        while not self._stop.is_set():
            if self.unreachable():
                self.ready.clear()
                self._stop.wait(POLL_S)
                continue
            httpd = self._bind()
            thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                      daemon=True)
            thread.start()
            self.ready.set()
            while not self._stop.is_set() and not self.unreachable():
                self._stop.wait(POLL_S)
            httpd.shutdown()
            httpd.server_close()
            thread.join()
            self.ready.clear()  # only once nothing listens: connections are refused
            with self.lock:
                self.sessions.clear()  # a BMC that went away forgets its sessions

    def stop(self) -> None:
        self._stop.set()
        if self.sampler is not None:
            self.sampler.stop()

    # --- authentication ---------------------------------------------------------
    def check(self, user: str, password: str) -> bool:
        ok_user = hmac.compare_digest(user.encode(), self.user.encode())
        ok_pw = hmac.compare_digest(password.encode(), self._password.encode())
        return ok_user and ok_pw

    def login(self, user: str) -> dict[str, str]:
        session = {"Id": secrets.token_hex(8), "UserName": user,
                   "token": secrets.token_urlsafe(24)}
        with self.lock:
            self.sessions[session["token"]] = session
        return session

    def session_list(self) -> list[dict[str, str]]:
        with self.lock:
            return [dict(s) for s in self.sessions.values()]

    def reset_host(self) -> None:
        """A reset the BMC performed: the lab power-cycles the node (detached)."""
        if self.on_reset:
            subprocess.Popen(self.on_reset, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)


class RedfishHandler(BaseHTTPRequestHandler):
    bmc: BmcService
    protocol_version = "HTTP/1.1"
    server_version = "rackready-lab-bmc"
    # headers and body go out in separate writes: without TCP_NODELAY each answer waits
    # ~40 ms for the client's delayed ACK
    disable_nagle_algorithm = True
    timeout = 30
    user = "-"

    def setup(self) -> None:
        self.request.settimeout(self.timeout)
        self.request.do_handshake()  # in this thread: a slow client blocks no one else
        super().setup()

    def handle(self) -> None:
        with contextlib.suppress(ssl.SSLError, ConnectionError, TimeoutError):
            super().handle()  # a client that went away mid-request

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # method, path, status and user only: never headers or bodies (credentials)
        sys.stderr.write(f"{self.address_string()} {self.user} \"{self.command} "
                         f"{self.path.split('?')[0]}\" {code}\n")

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        sys.stderr.write(f"{self.address_string()} error {format % args}\n")

    # --- plumbing -------------------------------------------------------------------
    def _send(self, status: int, body: dict[str, Any] | None,
              headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None or status == 204 else json.dumps(body, indent=1).encode()
        self.send_response(status)
        self.send_header("OData-Version", "4.0")
        self.send_header("Cache-Control", "no-cache")
        if data:
            self.send_header("Content-Type", "application/json;charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, err: rf.RedfishError) -> None:
        self._send(err.status, err.body(), err.headers)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise rf.RedfishError(413, f"{rf.BASE}.PayloadTooLarge", "The request payload is "
                                  "too large.")
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError:
            raise rf.RedfishError(400, f"{rf.BASE}.MalformedJSON", "The request body "
                                  "submitted was malformed JSON and could not be parsed by the "
                                  "receiving service.") from None

    def _authenticated(self) -> bool:
        token = self.headers.get("X-Auth-Token")
        if token:
            with self.bmc.lock:
                session = self.bmc.sessions.get(token)
            if session:
                self.user = session["UserName"]
                return True
            return False
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            try:
                user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            except ValueError:
                return False
            if self.bmc.check(user, password):
                self.user = user
                return True
            self._record_failed_login(user)
        return False

    def _record_failed_login(self, user: str) -> None:
        v = vendor_data(self._state_vendor())
        # the BMC's own log (iDRAC Lifecycle log, iLO event log), not the hardware event log
        log = [s["id"] for s in v["log_services"] if s["under"] == "manager"][-1]
        with store.locked(self.bmc.state_path) as state:
            rf.add_log(state, log, "Warning", "USR0031",
                       f"Unable to log in for {user[:64]} from {self.client_address[0]} "
                       "using REDFISH.")

    def _state_vendor(self) -> str:
        return json.loads(self.bmc.state_path.read_text())["vendor"]

    def _unauthorized(self) -> None:
        err = rf.RedfishError(401, f"{rf.BASE}.NoValidSession", "There is no valid session "
                              "established with the implementation.", [],
                              "Establish a session before attempting any operations.",
                              {"WWW-Authenticate": 'Basic realm="RedfishService"'})
        self._error(err)

    def _dispatch(self) -> None:
        if self.bmc.unreachable():
            self.close_connection = True  # a BMC that stopped answering
            return
        path = rf.normalize(self.path)
        try:
            if self.command == "POST" and path == SESSIONS:
                return self._login()
            if not (self.command in ("GET", "HEAD") and path in PUBLIC_GET) \
                    and not self._authenticated():
                return self._unauthorized()
            getattr(self, f"_do_{self.command}")(path)
        except rf.RedfishError as err:
            self._error(err)

    do_GET = do_HEAD = do_POST = do_PATCH = do_DELETE = do_PUT = _dispatch

    # --- methods --------------------------------------------------------------------
    def _do_GET(self, path: str) -> None:
        if path == "/redfish":
            return self._send(200, {"v1": f"{ROOT}/"})
        if path == f"{ROOT}/odata":
            return self._send(200, {"@odata.context": f"{ROOT}/$metadata", "value": [
                {"name": n, "kind": "Singleton", "url": f"{ROOT}/{n}"}
                for n in ("Systems", "Chassis", "Managers", "SessionService", "AccountService",
                          "UpdateService", "TaskService")]})
        with store.locked(self.bmc.state_path) as state:
            if path.startswith(TASK_MONITORS + "/"):
                status, body = rf.task_monitor(state, path)
                hdr = {"Location": path} if status == 202 else {}
                return self._send(status, body, hdr)
            u = self.bmc.load(state)
            envelope.observe(state, u)  # an under-load fault trips as the BMC reads
            body = rf.render(state, path, self.bmc.session_list(), self.bmc.user, u)
        self._send(200, body, {"ETag": etag(body)})

    _do_HEAD = _do_GET

    def _do_PATCH(self, path: str) -> None:
        body = self._body()
        with store.locked(self.bmc.state_path) as state:
            match = self.headers.get("If-Match")
            if match and match != "*" and match != etag(rf.render(
                    state, path, self.bmc.session_list(), self.bmc.user,
                    self.bmc.load(state))):
                raise rf.RedfishError(412, f"{rf.BASE}.PreconditionFailed", "The ETag "
                                      "supplied did not match the ETag required to change "
                                      "this resource.", [], "Try the operation again using "
                                      "the appropriate ETag.")
            status, out, headers, reset = rf.patch(state, path, body)
        if reset:
            self.bmc.reset_host()
        self._send(status, out, headers)

    def _do_POST(self, path: str) -> None:
        body = self._body()
        with store.locked(self.bmc.state_path) as state:
            status, out, headers, reset = rf.post(state, path, body)
        if reset:
            self.bmc.reset_host()
        self._send(status, out, headers)

    def _do_DELETE(self, path: str) -> None:
        if path.startswith(SESSIONS + "/"):
            sid = path.rsplit("/", 1)[1]
            with self.bmc.lock:
                token = next((t for t, s in self.bmc.sessions.items() if s["Id"] == sid), None)
                if token is None:
                    raise rf.not_found(path)
                del self.bmc.sessions[token]
            return self._send(200, rf.success())
        with store.locked(self.bmc.state_path) as state:
            status, out = rf.delete(state, path)
        self._send(status, out)

    def _do_PUT(self, path: str) -> None:
        raise rf.not_allowed("PUT", path)

    def _login(self) -> None:
        body = self._body()
        user = body.get("UserName") if isinstance(body, dict) else None
        password = body.get("Password") if isinstance(body, dict) else None
        if not isinstance(user, str) or not isinstance(password, str):
            raise rf.RedfishError(400, f"{rf.BASE}.PropertyMissing", "The properties UserName "
                                  "and Password are required to create a session.",
                                  ["UserName", "Password"], "Provide both and resubmit.")
        if not self.bmc.check(user, password):
            self._record_failed_login(user)
            return self._unauthorized()
        self.user = user
        session = self.bmc.login(user)
        location = f"{SESSIONS}/{session['Id']}"
        self._send(201, {"@odata.id": location, "@odata.type": "#Session.v1_6_0.Session",
                         "Id": session["Id"], "Name": "User Session", "UserName": user},
                   {"X-Auth-Token": session["token"], "Location": location})


