"""The Redfish client and the BIOS module against a fake BMC (tests/unit/fake_redfish.py)."""

from __future__ import annotations

import importlib.util
import socket

import pytest
import yaml

from rackready.redfish import bios
from rackready.redfish.client import AuthError, Client, RedfishError, extended_info
from rackready.site.paths import PROJECT_ROOT
from tests.unit.fake_redfish import FakeBMC, make_ca

ROOT = PROJECT_ROOT
PASSWORD = "s3cret-Bmc-Pa55"  # noqa: S105  a test password, grepped for in outputs


def _module():
    spec = importlib.util.spec_from_file_location("rackready_bios", ROOT / "library" /
                                                  "rackready_bios.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


MODULE = _module()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def dell(certs):
    bmc = FakeBMC(certs, "dell", password=PASSWORD)
    yield bmc
    bmc.close()


@pytest.fixture
def hpe(certs):
    bmc = FakeBMC(certs, "hpe", password=PASSWORD)
    yield bmc
    bmc.close()


def profile_attrs(name: str) -> tuple[dict, dict]:
    data = yaml.safe_load((ROOT / "roles/bios/profiles" / f"{name}.yml").read_text())
    return ({k: v["value"] for k, v in data["set"].items()},
            {k: v["value"] for k, v in (data.get("implied") or {}).items()})


def params(bmc: FakeBMC, certs, attrs=None, implied=None, **kw) -> dict:
    a, i = profile_attrs("xe9680" if bmc.vendor == "dell" else "dl380a")
    return {"address": bmc.address, "user": "root", "password": PASSWORD,
            "ca_file": str(certs[0]), "tls_insecure_skip_verify": False,
            "attributes": a if attrs is None else attrs, "implied": i if implied is None
            else implied, "profile": "xe9680", "node": "gpu01", "timeout": 5,
            "job_timeout": 30, "poll": 1, "reboot": False, "reboot_timeout": 60, **kw}


class FakeClock:
    """Sleeping advances time instantly: waits and timeouts without waiting."""

    def __init__(self) -> None:
        self.t = 0.0
        self.hooks: list = []

    def sleep(self, s: float) -> None:
        self.t += s
        for h in self.hooks:
            h(self.t)

    def __call__(self) -> float:
        return self.t


def run(p: dict, check: bool = False, clock: FakeClock | None = None) -> dict:
    clock = clock or FakeClock()
    return MODULE.run(p, check, sleep=clock.sleep, clock=clock)


# ---------------------------------------------------------------- client

def test_session_login_discovery_and_logout(dell, certs):
    with Client(dell.address, "root", PASSWORD, ca_file=str(certs[0])) as c:
        assert c.auth_mode == "session"
        st = bios.read_state(c)
        assert dell.tokens
    assert st.system == dell.system and st.settings_uri == dell.settings
    assert "OnReset" in st.apply_times
    assert not dell.tokens  # logged out
    # every resource reached was linked from the service root, none guessed
    gets = [p for m, p, _ in dell.requests if m == "GET"]
    assert gets[0] == "/redfish/v1/" and dell.bios in gets


def test_basic_auth_when_the_bmc_has_no_sessions(certs):
    bmc = FakeBMC(certs, "hpe", password=PASSWORD, sessions=False)
    try:
        with Client(bmc.address, "root", PASSWORD, ca_file=str(certs[0])) as c:
            assert c.auth_mode == "basic"
            assert bios.read_state(c).current["WorkloadProfile"]
    finally:
        bmc.close()


@pytest.mark.parametrize("sessions", [True, False])
def test_wrong_password_is_one_line_without_the_password(certs, sessions):
    bmc = FakeBMC(certs, "dell", password="the-right-one", sessions=sessions)
    try:
        with pytest.raises(AuthError) as exc, \
                Client(bmc.address, "root", PASSWORD, ca_file=str(certs[0]), node="gpu01"):
            pass
    finally:
        bmc.close()
    assert str(exc.value) == f"BMC {bmc.address} of gpu01: authentication failed"
    assert PASSWORD not in repr(exc.value)


def test_unreachable_bmc_is_one_line_naming_node():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(RedfishError) as exc:
        Client(f"127.0.0.1:{port}", "root", PASSWORD, node="gpu03", timeout=2).login()
    msg = str(exc.value)
    assert msg.startswith(f"BMC 127.0.0.1:{port} of gpu03: unreachable") and "\n" not in msg


def test_untrusted_certificate_is_refused(dell, tmp_path):
    other = make_ca(tmp_path / "other")
    with pytest.raises(RedfishError, match="TLS certificate not trusted.*rackready_bmc_ca_file"):
        Client(dell.address, "root", PASSWORD, ca_file=str(other[0])).login()
    # the loudly named escape hatch works, and only when asked for
    with Client(dell.address, "root", PASSWORD, insecure_skip_verify=True) as c:
        assert c.auth_mode == "session"


def test_extended_info_in_one_line():
    body = {"error": {"@Message.ExtendedInfo": [
        {"Message": "The property Foo is not in the list of valid properties.",
         "Resolution": "Remove the property."}, {"MessageId": "Base.1.0.X"}]}}
    assert extended_info(body) == ("The property Foo is not in the list of valid properties. "
                                   "(Remove the property.); Base.1.0.X")
    assert extended_info("nope") == ""


def test_redfish_error_scrubs_a_secret():
    assert "hunter2" not in str(RedfishError("bad hunter2 x", secret="hunter2"))


# ---------------------------------------------------------------- BIOS module

def test_dell_diff_apply_then_idempotent_until_reboot(dell, certs):
    r = run(params(dell, certs))
    want, _ = profile_attrs("xe9680")
    sent = {k: v for k, v in want.items() if k not in ("ProcVirtualization", "SubNumaCluster")}
    assert r["changed"] and r["reboot_required"] and r["applied"] == sent
    assert r["job"].startswith("JID_") and "REBOOT REQUIRED" in r["msg"]
    patches = [b for m, p, b in dell.requests if m == "PATCH"]
    assert patches == [{"Attributes": sent,
                        "@Redfish.SettingsApplyTime": {"ApplyTime": "OnReset"}}]
    assert dell.jobs[r["job"]]["JobState"] == "Scheduled"  # waited for the scheduling
    assert dell.bios_attrs()["SysProfile"] != "PerfOptimized"  # no silent reboot
    # second run before the reboot: nothing sent, still says a reboot is needed
    r2 = run(params(dell, certs))
    assert not r2["changed"] and r2["reboot_required"] and r2["applied"] == {}
    assert len([1 for m, *_ in dell.requests if m == "PATCH"]) == 1
    dell.reboot()
    r3 = run(params(dell, certs))
    assert not r3["changed"] and not r3["reboot_required"]
    assert "already as the profile says" in r3["msg"]


def test_drift_is_detected_and_corrected(dell, certs):
    run(params(dell, certs))
    dell.reboot()
    dell.bios_attrs()["SriovGlobalEnable"] = "Disabled"  # changed behind the role's back
    r = run(params(dell, certs))
    assert r["changed"] and r["applied"] == {"SriovGlobalEnable": "Enabled"}
    assert r["differences"] == [{"attribute": "SriovGlobalEnable", "current": "Disabled",
                                 "desired": "Enabled"}]


def test_check_mode_sends_nothing(dell, certs):
    r = run(params(dell, certs), check=True)
    assert r["changed"] and r["reboot_required"]
    assert not [p for m, p, _ in dell.requests
                if m == "PATCH" or (m == "POST" and "Session" not in p)]


def test_explicit_reboot_applies_and_waits(dell, certs):
    r = run(params(dell, certs, reboot=True))
    assert r["changed"] and not r["reboot_required"] and r["rebooted"] == "GracefulRestart"
    assert dell.bios_attrs()["SysProfile"] == "PerfOptimized"
    assert dell.jobs[r["job"]]["JobState"] == "Completed"


def test_pending_job_blocks_until_done(dell, certs):
    jid = dell.add_job("Running", "FirmwareUpdate")
    clock = FakeClock()
    clock.hooks.append(lambda t: dell.jobs[jid].update(JobState="Completed") if t >= 5 else None)
    r = run(params(dell, certs), clock=clock)
    assert r["changed"] and clock.t >= 5  # it waited, then applied
    # nothing was sent while the job ran
    first_patch = next(i for i, (m, *_) in enumerate(dell.requests) if m == "PATCH")
    assert first_patch > 0


def test_pending_job_timeout_names_the_job(dell, certs):
    jid = dell.add_job("Running", "FirmwareUpdate")
    with pytest.raises(RedfishError) as exc:
        run(params(dell, certs, job_timeout=20))
    assert jid in str(exc.value) and "still pending after 20 s" in str(exc.value)
    assert not [1 for m, *_ in dell.requests if m == "PATCH"]


def test_failed_job_is_one_line(dell, certs):
    dell.job_steps = ["Failed"]
    with pytest.raises(RedfishError, match=r"BMC job JID_\d+ .* failed"):
        run(params(dell, certs))


def test_unknown_attribute_names_it(dell, certs):
    attrs = {"SysProfile": "PerfOptimized", "NoSuchKnob": "On"}
    with pytest.raises(RedfishError) as exc:
        run(params(dell, certs, attrs=attrs))
    msg = str(exc.value)
    assert "'NoSuchKnob'" in msg and "SysProfile" not in msg and "\n" not in msg
    assert not [1 for m, *_ in dell.requests if m == "PATCH"]


def test_implied_setting_wrong_after_reboot_fails_naming_it(dell, certs):
    run(params(dell, certs))
    dell.reboot()
    dell.bios_attrs()["ProcC1E"] = "Enabled"
    with pytest.raises(RedfishError, match="ProcC1E is 'Enabled'"):
        run(params(dell, certs))


def test_hpe_pending_settings_applied_at_reboot(hpe, certs):
    r = run(params(hpe, certs))
    want, _ = profile_attrs("dl380a")
    assert r["changed"] and r["reboot_required"] and r["job"] == ""
    patch = [b for m, p, b in hpe.requests if m == "PATCH"]
    assert len(patch) == 1 and "@Redfish.SettingsApplyTime" not in patch[0]
    assert [p for m, p, b in hpe.requests if m == "PATCH"] == [hpe.settings]
    r2 = run(params(hpe, certs))
    assert not r2["changed"] and r2["reboot_required"]
    hpe.reboot()
    r3 = run(params(hpe, certs))
    assert not r3["changed"] and not r3["reboot_required"]
    assert all(hpe.bios_attrs()[k] == v for k, v in want.items())


def test_no_password_is_one_line(dell, certs):
    with pytest.raises(RedfishError, match="no BMC password"):
        run(params(dell, certs, password=""))


def test_profiles_carry_provenance_for_every_attribute():
    for name in ("xe9680", "dl380a"):
        data = yaml.safe_load((ROOT / "roles/bios/profiles" / f"{name}.yml").read_text())
        for section in ("set", "implied"):
            for attr, entry in (data.get(section) or {}).items():
                assert entry.get("value") not in (None, ""), (name, attr)
                assert len(str(entry.get("provenance", ""))) > 20, (name, attr)
