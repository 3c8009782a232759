"""A small Redfish service for the unit tests: HTTPS with its own CA, sessions and
basic auth, a Dell iDRAC9-like or HPE iLO 6-like tree, BIOS pending settings, jobs,
chassis health and logs. Independent of the lab's service (rackready_lab/redfish).

Only what the client follows is here, reached by links from /redfish/v1, with the
vendor facts the client relies on (Dell: PATCH Bios/Settings OnReset -> JID_ job in
Managers/iDRAC.Embedded.1/Jobs; HPE: Bios/settings applied at reboot).
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
import ssl
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

R = "/redfish/v1"


def make_ca(folder: Path, host: str = "127.0.0.1") -> tuple[Path, Path, Path]:
    """(ca.pem, server.pem, server.key): a lab-style CA and a server certificate for host."""
    import ipaddress

    now = dt.datetime.now(dt.timezone.utc)
    start, end = now - dt.timedelta(days=1), now + dt.timedelta(days=30)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test BMC CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(host))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


def _ref(path: str) -> dict[str, str]:
    return {"@odata.id": path}


def _coll(path: str, members: list[str]) -> dict[str, Any]:
    return {"@odata.id": path, "Members": [_ref(m) for m in members],
            "Members@odata.count": len(members)}


def _ok() -> dict[str, str]:
    return {"State": "Enabled", "Health": "OK"}


DELL_BIOS = {"SysProfile": "PerfPerWattOptimizedDapc", "MmioAbove4Gb": "Disabled",
             "MemoryMappedIOH": "12TB", "ProcVirtualization": "Enabled",
             "SriovGlobalEnable": "Disabled", "SubNumaCluster": "Disabled",
             "ProcCStates": "Enabled", "ProcC1E": "Enabled", "PcieAspmL1": "Enabled",
             "LogicalProc": "Enabled"}
# What Dell's BIOS derives from SysProfile PerfOptimized at the reboot.
DELL_IMPLIED = {"PerfOptimized": {"ProcCStates": "Disabled", "ProcC1E": "Disabled",
                                  "PcieAspmL1": "Disabled"}}
HPE_BIOS = {"WorkloadProfile": "GeneralPowerEfficientCompute",
            "PowerRegulator": "DynamicPowerSavings",
            "MinProcIdlePower": "C6", "MinProcIdlePkgState": "C6Retention",
            "EnergyPerfBias": "BalancedPerf", "CollabPowerControl": "Enabled",
            "ProcVirtualization": "Enabled", "IntelProcVtd": "Enabled", "Sriov": "Enabled",
            "SubNumaClustering": "Disabled"}


class FakeBMC:
    """One BMC. `vendor` is "dell" or "hpe". Mutate `.res` (resources by path) for faults.
    A hostile BMC: `.raw[path]` answers a GET with those exact bytes (NaN, 1e999: what
    json.dumps never writes), `.trickle[path]` sends that answer a byte every so many
    seconds (headers and body), `.delay_s` holds every answer that long."""

    def __init__(self, certs: tuple[Path, Path, Path] | None, vendor: str = "dell",
                 user: str = "root", password: str = "calvin", sessions: bool = True) -> None:
        self.vendor = vendor
        self.user, self.password = user, password
        self.sessions_enabled = sessions
        self.tokens: dict[str, str] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.lock = threading.Lock()
        self.res: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        # a job's state advances one step per GET through this list (New -> Scheduled)
        self.job_steps = ["Scheduled"]
        self.clock = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)
        self.raw: dict[str, bytes] = {}
        self.trickle: dict[str, float] = {}
        self.delay_s = 0.0
        self._build()
        handler = type("H", (_Handler,), {"bmc": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if certs is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(certs[1]), str(certs[2]))
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------------ tree
    def _build(self) -> None:
        dell = self.vendor == "dell"
        sysid = "System.Embedded.1" if dell else "1"
        mgrid = "iDRAC.Embedded.1" if dell else "1"
        chid = "System.Embedded.1" if dell else "1"
        self.system = f"{R}/Systems/{sysid}"
        self.manager = f"{R}/Managers/{mgrid}"
        self.chassis = f"{R}/Chassis/{chid}"
        self.bios = f"{self.system}/Bios"
        self.settings = f"{self.bios}/Settings" if dell else f"{self.bios}/settings"
        root = {"@odata.id": f"{R}/", "RedfishVersion": "1.17.0",
                "Systems": _ref(f"{R}/Systems"), "Chassis": _ref(f"{R}/Chassis"),
                "Managers": _ref(f"{R}/Managers"), "UpdateService": _ref(f"{R}/UpdateService"),
                "TaskService": _ref(f"{R}/TaskService"),
                "SessionService": _ref(f"{R}/SessionService"), "Links": {}}
        if self.sessions_enabled:
            root["Links"]["Sessions"] = _ref(f"{R}/SessionService/Sessions")
        self.res[f"{R}/"] = root
        self.res[f"{R}/Systems"] = _coll(f"{R}/Systems", [self.system])
        self.res[self.system] = {
            "@odata.id": self.system, "Id": sysid, "Manufacturer": "Dell Inc." if dell else "HPE",
            "Model": "PowerEdge XE9680" if dell else "ProLiant DL380a Gen11",
            "SerialNumber": "CN7792S" if dell else "MXQ1234567", "SKU": "7XYZ123" if dell else "",
            "BiosVersion": "2.3.5" if dell else "U58 v1.50", "PowerState": "On",
            "Bios": _ref(self.bios), "LogServices": _ref(f"{self.system}/LogServices"),
            "Oem": {"Dell" if dell else "Hpe": {"PowerOnHours": 12}},
            "Actions": {"#ComputerSystem.Reset": {
                "target": f"{self.system}/Actions/ComputerSystem.Reset",
                "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulRestart",
                                                      "ForceRestart"]}}}
        attrs = dict(DELL_BIOS if dell else HPE_BIOS)
        self.res[self.bios] = {
            "@odata.id": self.bios, "Attributes": attrs,
            "@Redfish.Settings": {"SettingsObject": _ref(self.settings),
                                  **({"SupportedApplyTimes": ["Immediate", "OnReset",
                                                              "AtMaintenanceWindowStart"]}
                                     if dell else {})}}
        # Dell's Settings holds only pending changes; HPE's a full copy
        self.res[self.settings] = {"@odata.id": self.settings,
                                   "Attributes": {} if dell else dict(attrs)}
        self.res[f"{R}/Managers"] = _coll(f"{R}/Managers", [self.manager])
        logs = f"{self.manager}/LogServices"
        self.res[self.manager] = {"@odata.id": self.manager, "Id": mgrid,
                                  "Model": "14G Monolithic" if dell else "iLO 6",
                                  "FirmwareVersion": "7.10.30.00" if dell else "1.55",
                                  "DateTime": self.clock.isoformat(),
                                  "LogServices": _ref(logs)}
        sel = f"{logs}/Sel" if dell else f"{logs}/IEL"
        self.res[logs] = _coll(logs, [sel])
        self.res[sel] = {"@odata.id": sel, "Id": "Sel" if dell else "IEL",
                         "Entries": _ref(f"{sel}/Entries")}
        self.sel_entries = f"{sel}/Entries"
        self.res[self.sel_entries] = _coll(self.sel_entries, [])
        self.res[self.sel_entries]["Members"] = [
            {"Id": "1", "Created": "2026-11-01T08:00:00+00:00", "Severity": "Critical",
             "Message": "The system board fail-safe voltage is outside of range (factory)",
             "SensorType": "Voltage", "MessageId": "VLT0204"},
            {"Id": "2", "Created": "2026-11-29T10:00:00+00:00", "Severity": "OK",
             "Message": "Log cleared.", "SensorType": "Event Logging", "MessageId": "SEL9901"}]
        self.res[f"{self.system}/LogServices"] = _coll(f"{self.system}/LogServices", [])
        if dell:
            self.jobs_uri = f"{self.manager}/Jobs"
            self.res[self.jobs_uri] = _coll(self.jobs_uri, [])
        self.res[f"{R}/TaskService"] = {"@odata.id": f"{R}/TaskService",
                                        "Tasks": _ref(f"{R}/TaskService/Tasks")}
        self.res[f"{R}/TaskService/Tasks"] = _coll(f"{R}/TaskService/Tasks", [])
        # chassis: Dell with legacy Power/Thermal, HPE with the newer subsystems + Sensors
        self.res[f"{R}/Chassis"] = _coll(f"{R}/Chassis", [self.chassis])
        ch = {"@odata.id": self.chassis, "Id": chid, "ChassisType": "RackMount",
              "Model": self.res[self.system]["Model"],
              "SerialNumber": self.res[self.system]["SerialNumber"], "PartNumber": "0ABC12"}
        self.res[self.chassis] = ch
        if dell:
            ch["Power"] = _ref(f"{self.chassis}/Power")
            ch["Thermal"] = _ref(f"{self.chassis}/Thermal")
            self.res[f"{self.chassis}/Power"] = {
                "PowerSupplies": [{"MemberId": f"PSU.Slot.{i}", "Name": f"PS{i} Status",
                                   "Model": "PWR SPLY,2800W,RDNT,LTON",
                                   "SerialNumber": f"CNLOD00{i}", "FirmwareVersion": "00.1B.53",
                                   "Status": _ok()} for i in range(1, 7)],
                "Redundancy": [{"Name": "System Board PS Redundancy", "Mode": "N+m",
                                "Status": _ok()}],
                "Voltages": [{"MemberId": "V1", "Name": "System Board 12V", "ReadingVolts": 12.1,
                              "LowerThresholdCritical": 10.8, "UpperThresholdCritical": 13.2,
                              "Status": _ok()}]}
            self.res[f"{self.chassis}/Thermal"] = {
                "Fans": [{"MemberId": f"Fan.Embedded.{i}", "Name": f"System Board Fan{i}",
                          "Status": _ok()} for i in range(1, 7)],
                "Temperatures": [{"MemberId": "Inlet", "Name": "System Board Inlet Temp",
                                  "ReadingCelsius": 24, "UpperThresholdCritical": 47,
                                  "Status": _ok()},
                                 {"MemberId": "CPU1", "Name": "CPU1 Temp", "ReadingCelsius": 55,
                                  "UpperThresholdCritical": 98, "Status": _ok()}]}
        else:
            ps, ts, sensors = (f"{self.chassis}/PowerSubsystem",
                               f"{self.chassis}/ThermalSubsystem", f"{self.chassis}/Sensors")
            ch.update(PowerSubsystem=_ref(ps), ThermalSubsystem=_ref(ts), Sensors=_ref(sensors))
            psus = [f"{ps}/PowerSupplies/{i}" for i in (1, 2, 3, 4)]
            self.res[ps] = {"PowerSupplies": _ref(f"{ps}/PowerSupplies"),
                            "PowerSupplyRedundancy": [{"RedundancyType": "Failover",
                                                       "Status": _ok()}]}
            self.res[f"{ps}/PowerSupplies"] = _coll(f"{ps}/PowerSupplies", psus)
            for i, p in enumerate(psus, 1):
                self.res[p] = {"Id": str(i), "Name": f"Power Supply {i}",
                               "Model": "P44712-B21", "SerialNumber": f"5WBXT0{i}",
                               "FirmwareVersion": "1.00", "Status": _ok()}
            fans = [f"{ts}/Fans/{i}" for i in range(1, 5)]
            self.res[ts] = {"Fans": _ref(f"{ts}/Fans")}
            self.res[f"{ts}/Fans"] = _coll(f"{ts}/Fans", fans)
            for i, f in enumerate(fans, 1):
                self.res[f] = {"Id": str(i), "Name": f"Fan {i}", "Status": _ok()}
            sl = [f"{sensors}/Inlet", f"{sensors}/P12V"]
            self.res[sensors] = _coll(sensors, sl)
            self.res[sl[0]] = {"Id": "Inlet", "Name": "01-Inlet Ambient",
                               "ReadingType": "Temperature", "Reading": 23,
                               "Thresholds": {"UpperCritical": {"Reading": 42}},
                               "Status": _ok()}
            self.res[sl[1]] = {"Id": "P12V", "Name": "12V Rail", "ReadingType": "Voltage",
                               "Reading": 12.0, "Thresholds": {"UpperCritical": {"Reading": 13.0},
                                                               "LowerCritical": {"Reading": 11.0}},
                               "Status": _ok()}
        fw = f"{R}/UpdateService/FirmwareInventory"
        self.res[f"{R}/UpdateService"] = {"FirmwareInventory": _ref(fw)}
        items = ([("Installed-159-2.3.5", "BIOS", "2.3.5"),
                  ("Installed-25227-7.10.30.00", "Integrated Dell Remote Access Controller",
                   "7.10.30.00"),
                  ("Installed-27763-1.2.6", "System CPLD", "1.2.6"),
                  ("Installed-HGX", "HGX H200 Baseboard", "1.5.0"),
                  ("Installed-GPU0", "GPU SXM 1 VBIOS", "96.00.9F.00.01"),
                  ("Installed-NIC1", "Mellanox ConnectX-7 Single Port VPI NDR OSFP", "28.39.1002"),
                  ("Previous-159-2.1.0", "BIOS", "2.1.0")] if dell else
                 [("1", "System ROM", "U58 v1.50"), ("2", "iLO 6", "1.55"),
                  ("3", "System Programmable Logic Device", "0x31"),
                  ("4", "NVIDIA H200 NVL GPU 1", "96.00.A5.00.01")])
        uris = [f"{fw}/{i}" for i, _, _ in items]
        self.res[fw] = _coll(fw, uris)
        for (ident, name, ver), uri in zip(items, uris, strict=True):
            self.res[uri] = {"Id": ident, "Name": name, "Version": ver, "Status": _ok()}

    # ------------------------------------------------------------------ behaviour
    def add_job(self, state: str = "Running", kind: str = "FirmwareUpdate") -> str:
        jid = f"JID_{uuid.uuid4().int % 10**12:012d}"
        uri = f"{self.jobs_uri}/{jid}"
        self.res[uri] = {"@odata.id": uri, "Id": jid, "Name": f"{kind} job",
                         "JobState": state, "JobType": kind, "Message": ""}
        self.res[self.jobs_uri]["Members"].append(_ref(uri))
        self.jobs[jid] = self.res[uri]
        return jid

    def add_log(self, severity: str, message: str, created: str,
                sensor: str = "Power Supply") -> None:
        members = self.res[self.sel_entries]["Members"]
        members.append({"Id": str(len(members) + 1), "Created": created, "Severity": severity,
                        "Message": message, "SensorType": sensor, "MessageId": "PSU0003"})

    def bios_attrs(self) -> dict[str, Any]:
        return self.res[self.bios]["Attributes"]

    def pending(self) -> dict[str, Any]:
        cur = self.bios_attrs()
        return {k: v for k, v in self.res[self.settings]["Attributes"].items()
                if cur.get(k) != v}

    def reboot(self) -> None:
        """A power cycle: pending BIOS settings take effect, BIOS jobs complete."""
        attrs = self.bios_attrs()
        attrs.update(self.pending())
        attrs.update(DELL_IMPLIED.get(attrs.get("SysProfile", ""), {})
                     if self.vendor == "dell" else {})
        if self.vendor == "dell":
            self.res[self.settings]["Attributes"] = {}
            for job in self.jobs.values():
                if job["JobType"] == "BIOSConfiguration" and job["JobState"] in (
                        "Scheduled", "New", "Running"):
                    job["JobState"] = "Completed"

    def error(self, status: int, message: str, msgid: str = "Base.1.12.GeneralError"
              ) -> tuple[int, dict[str, Any], dict[str, str]]:
        return status, {"error": {"code": msgid, "message": "See @Message.ExtendedInfo",
                                  "@Message.ExtendedInfo": [{"MessageId": msgid,
                                                             "Message": message}]}}, {}

    def handle(self, method: str, path: str, headers: Any, body: Any
               ) -> tuple[int, dict[str, Any] | None, dict[str, str]]:
        path = path.split("?")[0]
        if path == R:
            path = f"{R}/"
        with self.lock:
            self.requests.append((method, path, body))
            if method == "POST" and path == f"{R}/SessionService/Sessions":
                if not self.sessions_enabled:
                    return self.error(405, "Sessions are not supported")
                if (body or {}).get("UserName") != self.user or \
                        (body or {}).get("Password") != self.password:
                    return self.error(401, "The authentication credentials included with this "
                                           "request are missing or invalid.",
                                      "Base.1.12.NoValidSession")
                token = uuid.uuid4().hex
                sid = uuid.uuid4().hex[:8]
                self.tokens[token] = sid
                loc = f"{R}/SessionService/Sessions/{sid}"
                return 201, {"@odata.id": loc, "Id": sid}, {"X-Auth-Token": token,
                                                             "Location": loc}
            if path != f"{R}/" and not self._authorised(headers):
                return self.error(401, "The authentication credentials included with this "
                                       "request are missing or invalid.")
            if method == "DELETE" and path.startswith(f"{R}/SessionService/Sessions/"):
                sid = path.rsplit("/", 1)[-1]
                self.tokens = {t: s for t, s in self.tokens.items() if s != sid}
                return 204, None, {}
            if method == "GET":
                res = self.res.get(path)
                if res is None:
                    return self.error(404, f"The resource at the URI {path} was not found.",
                                      "Base.1.12.ResourceMissingAtURI")
                job = next((j for j in self.jobs.values() if j.get("@odata.id") == path), None)
                if job is not None and job["JobState"] == "New" and self.job_steps:
                    job["JobState"] = self.job_steps[0]
                return 200, copy.deepcopy(res), {}
            if method == "PATCH" and path == self.settings:
                return self._patch_bios(body or {})
            if method == "POST" and path == f"{self.system}/Actions/ComputerSystem.Reset":
                self.reboot()
                return 204, None, {}
            return self.error(405, f"{method} is not allowed on {path}")

    def _authorised(self, headers: Any) -> bool:
        token = headers.get("X-Auth-Token")
        if token:
            return token in self.tokens
        auth = headers.get("Authorization") or ""
        if auth.startswith("Basic "):
            user, _, pw = base64.b64decode(auth[6:]).decode().partition(":")
            return user == self.user and pw == self.password
        return False

    def _patch_bios(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | None, dict]:
        attrs = body.get("Attributes") or {}
        unknown = [k for k in attrs if k not in self.bios_attrs()]
        if unknown:
            return self.error(400, f"The property {unknown[0]} is not in the list of valid "
                                   "properties for the resource.",
                              "Base.1.12.PropertyUnknown")
        if self.vendor == "dell":
            busy = [j for j in self.jobs.values()
                    if j["JobType"] == "BIOSConfiguration" and j["JobState"] in
                    ("New", "Scheduled", "Running")]
            if busy:
                return self.error(400, "Pending configuration values are already committed, "
                                       "unable to perform another set operation.",
                                  "IDRAC.2.8.SYS011")
            apply = (body.get("@Redfish.SettingsApplyTime") or {}).get("ApplyTime")
            if apply != "OnReset":
                return self.error(400, "ApplyTime OnReset expected by this fake")
            self.res[self.settings]["Attributes"].update(attrs)
            jid = self.add_job("New", "BIOSConfiguration")
            return 202, None, {"Location": f"{self.jobs_uri}/{jid}"}
        self.res[self.settings]["Attributes"].update(attrs)
        return 200, {"error": {"@Message.ExtendedInfo": [
            {"MessageId": "iLO.2.15.SystemResetRequired"}]}}, {}


class _Handler(BaseHTTPRequestHandler):
    bmc: FakeBMC

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _do(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        status, payload, extra = self.bmc.handle(self.command, self.path, self.headers, body)
        data = json.dumps(payload).encode() if payload is not None else b""
        time.sleep(self.bmc.delay_s)
        path = self.path.split("?")[0]
        if self.command == "GET" and status == 200 and path in self.bmc.raw:
            data = self.bmc.raw[path]
        if self.command == "GET" and path in self.bmc.trickle:
            self._trickle(data, self.bmc.trickle[path])
            return
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _trickle(self, data: bytes, every_s: float) -> None:
        """The whole answer a byte at a time: each arrives well within any socket timeout."""
        answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(data)) + data
        try:
            for i in range(len(answer)):
                self.wfile.write(answer[i:i + 1])
                self.wfile.flush()
                time.sleep(every_s)
        except OSError:  # the client gave up: what a trickle is for
            pass
        self.close_connection = True

    do_GET = do_POST = do_PATCH = do_DELETE = _do
