# ruff: noqa: E501  (log lines keep their real width)
"""The Fabric Manager log: parser (validation/probes/fabricmanager_log.py) and the
fabric.manager_log check that judges what was logged since the run began.

Real captures: tests/fixtures/field/fabricmanager (README there: leptonai/gpud's testdata
log and the lines its matcher quotes; a journal from data-infra/data-infra/cube-studio issue 29).
The other variants (session banner, journal short-iso with and without the tags, a line
naming no port, CRITICAL entries, a year-less journal across New Year) are made from the
documented format (NVIDIA Fabric Manager user guide: LOG_FILE_NAME, LOG_USE_SYSLOG; the
entry shape of the captures), not captured.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from test_checks_gpu import make_ctx, run, run_as_runner

from validation.checks import fabric_manager_log as fml
from validation.judge import judge
from validation.probes.fabricmanager_log import log_file_name, parse_fm_log
from validation.probes.nvidia_smi import ParseError
from validation.runner import select_checks

FIELD = Path(__file__).resolve().parents[2] / "fixtures" / "field" / "fabricmanager"
NOW = datetime(2025, 10, 1, 12, 0, 0)


def test_gpud_testdata_log_multi_line_entries_and_a_non_fatal_error():
    """gpud's testdata log: two-line inband dumps and blank lines continue their entry (11
    entries, not 21 lines); the one ERROR entry is a non-fatal NVSwitch error on physical
    id 3 port 61 of the switch at 0000:86:00.0; the INFO entries are `other`."""
    es = parse_fm_log((FIELD / "gpud-testdata-excerpt.log").read_text(), NOW)
    assert len(es) == 11 and {e.kind for e in es[:-1]} == {"other"}
    e = es[-1]
    assert (e.kind, e.level, e.sxid, e.bus, e.physical_id, e.port, e.when) == (
        "nvswitch_nonfatal", "ERROR", 12028, "0000:86:00.0", 3, 61, datetime(2025, 2, 27, 15, 10, 2))
    assert es[0].text.startswith("Received an inband message")


def test_gpud_quoted_lines_fatal_nonfatal_other_errors_and_info():
    es = parse_fm_log((FIELD / "gpud-example-lines.log").read_text(), NOW)
    assert [(e.kind, e.sxid, e.port) for e in es] == [
        ("nvswitch_fatal", 20034, 33), ("nvswitch_nonfatal", 12028, 61),
        ("error", None, None), ("other", None, None)]
    assert es[2].text.startswith("failed to find the GPU handle") and es[2].is_error
    assert not es[3].is_error


def test_journal_syslog_form_takes_the_units_processes_and_this_year():
    """data-infra/cube-studio issue 29: the unit's journal without a year; the start
    script's lines are entries (untagged: `other`, never errors), systemd's line is not
    Fabric Manager's."""
    es = parse_fm_log((FIELD / "journal-cube-studio-issue-29.txt").read_text(), NOW)
    assert len(es) == 3 and {e.kind for e in es} == {"other"} and es[0].level == ""
    assert es[0].when == datetime(2025, 9, 18, 3, 19, 1)
    # read in January, September's lines are last year's, never in the future
    assert parse_fm_log((FIELD / "journal-cube-studio-issue-29.txt").read_text(),
                        datetime(2026, 1, 2))[0].when.year == 2025


DOCUMENTED = """\
[Mar 04 2024 10:15:01] [INFO] [tid 1234] Fabric Manager version 535.161.08 is running with the following configuration options
[Mar 04 2024 10:15:01] [INFO] [tid 1234] Logging level = 4
[Mar 04 2024 10:15:09] [INFO] [tid 1234] Successfully configured all the available GPUs and NVSwitches to route NVLink traffic.
[Mar 24 2024 10:15:02] [ERROR] [tid 1234] detected NVSwitch fatal error 12028 on fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3
[Mar 24 2024 10:15:03] [CRITICAL] [tid 1234] NVLink training failed for GPU physical id 2 link 5
[Mar 24 2024 10:15:04] [WARNING] [tid 1234] NVLink trunk link between NVSwitch 3 port 40 and port 41 is down
2024-03-24T10:16:00+0000 gpu01 nv-fabricmanager[1234]: [ERROR] [tid 1234] detected NVSwitch non-fatal error 19084 on fid 0 on NVSwitch pci bus id 00000000:87:00.0 physical id 4 port 12
2024-03-24T10:16:01+00:00 gpu01 nv-fabricmanager[1234]: detected NVSwitch fatal error 20034 on fid 0 on NVSwitch pci bus id 00000000:87:00.0 physical id 4 port 13
2024-03-24T10:16:02+0000 gpu01 systemd[1]: Started nvidia-fabricmanager.service - NVIDIA fabric manager service.
"""


def test_documented_variants_banner_no_port_levels_and_journal_iso():
    """Made from the documented format, not captured: the session banner and its version,
    the configured line, a switch error naming no port, CRITICAL (an error) and WARNING (not),
    the journal's short-iso form with +0000 and +00:00 zones, tagged and untagged."""
    es = parse_fm_log(DOCUMENTED, NOW)
    assert [e.kind for e in es] == ["start", "other", "configured", "nvswitch_fatal", "error",
                                    "other", "nvswitch_nonfatal", "nvswitch_fatal"]
    assert es[0].version == "535.161.08"
    assert (es[3].physical_id, es[3].port, es[3].bus) == (3, None, "0000:86:00.0")
    utc = timezone.utc
    assert es[6].when == datetime(2024, 3, 24, 10, 16, tzinfo=utc) and es[6].level == "ERROR"
    assert (es[7].when, es[7].port, es[7].level) == (datetime(2024, 3, 24, 10, 16, 1, tzinfo=utc), 13, "")


@pytest.mark.parametrize("text", ["", "\n\n", "not a fabric manager log\nat all\n",
                                  "Nov 30 01:02:03 gpu01 kernel: [ 1.0] nvidia: loading\n",
                                  "[Feb 31 2025 10:00:00] [ERROR] impossible date\n"])
def test_a_log_with_no_entry_is_unparsed_never_no_errors(text):
    with pytest.raises(ParseError, match="unparsed fabric manager log"):
        parse_fm_log(text, NOW)


def test_fabricmanager_cfg_log_options():
    assert log_file_name("LOG_LEVEL=4\nLOG_FILE_NAME=/var/log/fm/custom.log\nLOG_USE_SYSLOG=0\n") == (
        "/var/log/fm/custom.log", False)
    assert log_file_name("#LOG_FILE_NAME=/x\nLOG_FILE_NAME=\nLOG_USE_SYSLOG=1\n") == (None, True)


# --- the check -----------------------------------------------------------------------

STARTED = datetime(2026, 12, 5, 10, 0, 0, 500000, tzinfo=timezone.utc)
SWITCHES = ["0000:86:00.0", "0000:87:00.0"]


def _stamp(delta_s: float) -> str:
    """A file timestamp delta_s after the run's start, in the node's local time (as FM)."""
    return f"{(STARTED + timedelta(seconds=delta_s)).astimezone():%b %d %Y %H:%M:%S}"


def _ctx(tmp_path, log: str | None, cfg: str | None = None):
    ctx = make_ctx(tmp_path)
    ctx.started = STARTED
    for i, bdf in enumerate(SWITCHES):
        d = ctx.path(f"/proc/driver/nvidia-nvswitch/devices/{bdf}")
        d.mkdir(parents=True)
        (d / "information").write_text(f"Model: \t\t NVIDIA NVSwitch\nDevice Minor: \t {i}\n"
                                       f"Bus Location: \t {bdf}\n")
    if log is not None:
        ctx.path(fml.FM_LOG).write_text(log)
    if cfg is not None:
        ctx.path(fml.FM_CONFIG).parent.mkdir(parents=True)
        ctx.path(fml.FM_CONFIG).write_text(cfg)
    return ctx


def _log(*errors: tuple[float, str]) -> str:
    head = (f"[{_stamp(-86400)}] [INFO] [tid 7] Fabric Manager version 580.95.05 is running with the following configuration options\n"
            f"[{_stamp(-86390)}] [INFO] [tid 7] Successfully configured all the available GPUs and NVSwitches to route NVLink traffic.\n")
    return head + "".join(f"[{_stamp(t)}] [ERROR] [tid 9] {msg}\n" for t, msg in errors)


FATAL_86_33 = "detected NVSwitch fatal error 20034 on fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33"
NONFATAL_87_61 = "detected NVSwitch non-fatal error 12028 on fid 0 on NVSwitch pci bus id 00000000:87:00.0 physical id 4 port 61"


def test_fatal_error_during_the_run_fails_naming_the_switch_and_port(tmp_path):
    # 0.2 s after the start, logged in the start's own second: the run's, not history
    ctx = _ctx(tmp_path, _log((-0.2, FATAL_86_33), (30, NONFATAL_87_61), (31, NONFATAL_87_61)))
    res = run("fabric.manager_log", ctx)
    bad = [v for v in judge([res], ctx.profile) if v.outcome == "fail"]
    assert {(v.metric, v.value) for v in bad} == {("fabricmanager.nvswitch_fatal", 1),
                                                  ("fabricmanager.nvswitch_nonfatal", 2)}
    fatal = next(v for v in bad if v.metric == "fabricmanager.nvswitch_fatal")
    assert "NVSwitch 0 (PCI 0000:86:00.0, physical id 3) port 33" in fatal.message
    assert "fabricmanager.log" in fatal.remediation
    nonfatal = next(v for v in bad if v.metric == "fabricmanager.nvswitch_nonfatal")
    assert "NVSwitch 1 (PCI 0000:87:00.0, physical id 4) port 61" in nonfatal.message
    # the switches with nothing logged are judged too (a zero each), never left out
    passed = {(v.metric, v.labels["bus_id"]) for v in judge([res], ctx.profile)
              if v.outcome == "pass" and v.metric.startswith("fabricmanager.nvswitch")}
    assert passed == {("fabricmanager.nvswitch_fatal", "0000:87:00.0"),
                      ("fabricmanager.nvswitch_nonfatal", "0000:86:00.0")}


def test_errors_before_the_run_began_are_history_reported_not_judged(tmp_path):
    ctx = _ctx(tmp_path, _log((-3600, FATAL_86_33), (-1.6, NONFATAL_87_61)))
    res = run("fabric.manager_log", ctx)
    verdicts = judge([res], ctx.profile)
    assert [v for v in verdicts if v.outcome == "fail"] == []
    hist = next(mm for mm in res.measurements if mm.name == "fabricmanager.log_history")
    assert hist.value == 2 and "non-fatal error 12028" in hist.labels["last"]
    assert hist.labels["version"] == "580.95.05"
    counts = {(mm.name, mm.labels["bus_id"]): mm.value for mm in res.measurements
              if mm.name.startswith("fabricmanager.nvswitch")}
    assert set(counts.values()) == {0} and len(counts) == 4


def test_other_error_entries_are_reported_unjudged(tmp_path):
    ctx = _ctx(tmp_path, _log((5, "failed to find the GPU handle 1 in the multicast team request setup 2.")))
    res = run("fabric.manager_log", ctx)
    other = next(mm for mm in res.measurements if mm.name == "fabricmanager.log_errors")
    assert other.value == 1 and other.labels["last"].startswith("failed to find the GPU handle")
    assert [v for v in judge([res], ctx.profile) if v.outcome == "fail"] == []


@pytest.mark.parametrize("text", ["", "garbage\x00\x01 not a log\n"])
def test_an_unparsed_log_errors_the_check_never_passes(tmp_path, text):
    ctx = _ctx(tmp_path, text)
    res = run_as_runner("fabric.manager_log", ctx)
    assert res.status == "error" and "unparsed fabric manager log" in res.message
    assert any(v.outcome == "fail" for v in judge([res], ctx.profile))


def test_a_missing_log_skips_and_a_required_skip_fails(tmp_path):
    ctx = _ctx(tmp_path, None)
    res = run_as_runner("fabric.manager_log", ctx)
    assert res.status == "skipped" and "fabricmanager.log missing" in res.message
    assert any(v.outcome == "fail" for v in judge([res], ctx.profile))


def test_log_file_name_from_the_config_and_the_journal_where_it_logs_to_syslog(tmp_path):
    ctx = _ctx(tmp_path, None, cfg="LOG_FILE_NAME=/var/log/fm/other.log\n")
    ctx.path("/var/log/fm").mkdir()
    ctx.path("/var/log/fm/other.log").write_text(_log((2, FATAL_86_33)))
    assert run("fabric.manager_log", ctx).measurements[0].value == 1
    ctx = _ctx(tmp_path / "s", None, cfg="LOG_USE_SYSLOG=1\n")
    res = run_as_runner("fabric.manager_log", ctx)  # a simulated root has no journal
    assert res.status == "skipped" and "LOG_USE_SYSLOG=1" in res.message


def test_a_large_log_is_read_from_its_tail_back_to_the_start(tmp_path, monkeypatch):
    monkeypatch.setattr(fml, "TAIL_BYTES", 4096)
    monkeypatch.setattr(fml, "TAIL_MAX_BYTES", 16384)
    old = "".join(f"[{_stamp(-7200 + i)}] [INFO] [tid 1] multicast group {i} is freed.\n" for i in range(400))
    ctx = _ctx(tmp_path, old + _log((3, FATAL_86_33)))
    res = run("fabric.manager_log", ctx)
    assert {mm.labels["bus_id"]: mm.value for mm in res.measurements
            if mm.name == "fabricmanager.nvswitch_fatal"} == {"0000:86:00.0": 1, "0000:87:00.0": 0}
    # more logged since the start than the cap: not all read, an error (never "no errors")
    flood = "".join(f"[{_stamp(1 + i // 100)}] [INFO] [tid 1] multicast group {i} is freed.\n" for i in range(800))
    ctx = _ctx(tmp_path / "f", old + flood)
    res = run_as_runner("fabric.manager_log", ctx)
    assert res.status == "error" and "logged since the run began" in res.message


def test_the_log_is_read_at_the_end_of_the_run_before_health_delta():
    names = [c.name for c in select_checks("quick", None)]
    assert names[-2:] == ["fabric.manager_log", "health.delta"]
