"""The whole BMC path with a known password: the bios role through ansible-playbook
(delegated to the controller, no SSH), then `invoke validate`'s out-of-band step,
judgement and reports. Every written file and every captured output is grepped for
the password. Also: the role converges, a rerun changes nothing, a wrong password is
one line."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from rackready.decide.judge import judge_run
from rackready.report.cli import write_reports
from rackready.run.rundir import Plan, PlannedNode, RunDir
from rackready.site import inventory
from rackready.steps import oob, provision
from tests.unit.fake_redfish import FakeBMC, make_ca

PASSWORD = "Known-BMC-pw-7f3a9c"  # noqa: S105  the password every output is grepped for


def _inventory(folder: Path, bmc: FakeBMC, ca: Path) -> Path:
    folder.mkdir()
    hosts = {"all": {"children": {"xe9680": {"hosts": {"gpu01": {
        "ansible_host": "127.0.0.1", "rackready_bmc_address": bmc.address,
        "rackready_platform": "xe9680-h200", "rackready_profile": "xe9680-h200",
        "rackready_fabric": "ib"}}}}}}
    (folder / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (folder / "group_vars").mkdir()
    (folder / "group_vars" / "all.yml").write_text(yaml.safe_dump({
        "rackready_bmc_user": "{{ lookup('ansible.builtin.env', 'RACKREADY_BMC_USER', "
                              "default='root') }}",
        "rackready_bmc_password": "{{ lookup('ansible.builtin.env', 'RACKREADY_BMC_PASSWORD',"
                                  " default='') }}",
        "rackready_bmc_ca_file": str(ca), "bios_poll": 1, "bios_job_timeout": 30,
        # as in the lab's group_vars: the nodes' interpreter and become, which the
        # delegated BMC tasks must not use on the controller
        "ansible_python_interpreter": "/nonexistent/node/python3", "ansible_become": True}))
    return folder / "hosts.yml"


def _provision(inv: Path, state: Path, capsys) -> tuple[provision.RunResult, str]:
    r = provision.run_playbook(inv, "bios.yml", extravars={"bios_state_dir": str(state)},
                               quiet=False)
    lines: list[str] = []
    provision.report_run(r, out=lines.append)
    out = capsys.readouterr()
    text = out.out + out.err + "\n".join(lines) + (r.stdout_path.read_text()
                                                   if r.stdout_path else "")
    return r, text


def test_bios_role_and_validation_never_show_the_password(tmp_path, monkeypatch, capsys):
    certs = make_ca(tmp_path / "ca")
    bmc = FakeBMC(certs, "dell", password=PASSWORD)
    seen: list[str] = []
    try:
        monkeypatch.setenv("RACKREADY_BMC_PASSWORD", PASSWORD)
        inv = _inventory(tmp_path / "inv", bmc, certs[0])
        state = tmp_path / "state"
        # 1: converge (sends the differences, flags the reboot, never reboots)
        r1, text = _provision(inv, state, capsys)
        seen.append(text)
        assert r1.rc == 0 and r1.changed() == {"gpu01": 1}, text[-2000:]
        assert "REBOOT REQUIRED" in text
        assert bmc.pending()["SysProfile"] == "PerfOptimized"
        assert bmc.bios_attrs()["SysProfile"] != "PerfOptimized"
        # 2: rerun before the reboot: nothing changes
        r2, text = _provision(inv, state, capsys)
        seen.append(text)
        assert r2.rc == 0 and r2.changed() == {"gpu01": 0}, text[-2000:]
        bmc.reboot()
        record = json.loads((state / "gpu01.json").read_text())
        assert record["bmc_time"] == "2026-11-30T12:00:00+00:00"
        # 3: a wrong password: one line naming the BMC, the wrong password nowhere either
        monkeypatch.setenv("RACKREADY_BMC_PASSWORD", PASSWORD + "-wrong")
        r3, text = _provision(inv, state, capsys)
        seen.append(text)
        assert r3.rc != 0
        assert r3.failures["gpu01"].endswith(f"BMC {bmc.address} of gpu01: authentication "
                                             "failed"), r3.failures
        assert PASSWORD + "-wrong" not in text
        monkeypatch.setenv("RACKREADY_BMC_PASSWORD", PASSWORD)

        # 4: validate's out-of-band step, judgement and reports
        (node,) = inventory.load(str(inv))
        assert PASSWORD not in repr(node) and PASSWORD not in repr(node.bmc())
        bmc.add_log("Critical", "PSU 2 lost AC input", "2026-11-30T13:00:00+00:00")
        plan = Plan(run_id="r", inventory=str(inv), level="quick", only=None,
                    nodes=[PlannedNode("gpu01", "xe9680-h200", {"node": "gpu01"})])
        run = RunDir.create(None, str(tmp_path / "run"), plan)
        run.write_bmc("gpu01", oob.collect(node, baseline_dir=state, timeout=5))
        j = judge_run(run)["gpu01"]
        assert any(v["metric"] == "bmc.log.critical_new" and v["outcome"] == "fail"
                   for v in j["verdicts"])
        write_reports(run.path, "json,html,junit")
        html = (run.path / "report" / "node-gpu01.html").read_text()
        assert "PowerEdge XE9680" in html and "CN7792S" in html and "7.10.30.00" in html
        assert "Before handoff" in html and "PSU 2 lost AC input" in html
        out = capsys.readouterr()
        seen.append(out.out + out.err)
    finally:
        bmc.close()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) > 8
    leaks = [str(p) for p in written if PASSWORD.encode() in p.read_bytes()]
    assert leaks == []
    assert not [t for t in seen if PASSWORD in t]
    # the password did travel: the fake BMC saw it in the session logins
    assert any(m == "POST" and (b or {}).get("Password") == PASSWORD
               for m, _, b in bmc.requests)
