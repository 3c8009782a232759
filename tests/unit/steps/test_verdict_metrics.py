"""The controller's verdict into a node's textfile directory (rackready.steps.verdict_metrics)
through the in-process SSH node (tests/unit/fake_node.py): written where the site's
`metrics: {textfile_dir}` says, atomically, clean for promtool; a node that cannot be
written is one line."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fake_node import FakeNode

from rackready.errors import UserError
from rackready.remote.put import put_file
from rackready.remote.session import SessionError
from rackready.run.rundir import Plan, PlannedNode
from rackready.site.inventory import Node
from rackready.steps import verdict_metrics

ECC = {"check": "gpu.health", "metric": "gpu.ecc_uncorrected_volatile", "outcome": "fail",
       "value": 2, "unit": "", "labels": {"gpu": "3"}, "threshold": None, "message": "",
       "remediation": "", "spread": None, "scope": "node", "component": "GPU 3 (serial 1)"}


@pytest.fixture
def fake(tmp_path: Path):
    node = FakeNode(tmp_path / "node")
    yield node
    node.close()


def judgement(outcome: str, verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"node": "fake01", "by": "controller", "judged": "2026-12-05T08:00:00+00:00",
            "profile": "xe9680-h200-lab", "level": "quick", "verdicts": verdicts,
            "fleet_verdicts": [], "outcome": outcome, "outcome_reason": ""}


def plan_for(site: dict[str, Any]) -> Plan:
    return Plan(run_id="r1", inventory=None, level="quick", only=None,
                nodes=[PlannedNode("fake01", "xe9680-h200-lab", site, (), {})])


def promtool_clean(text: str) -> None:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool not installed: Debian package 'prometheus' "
                    "(`invoke test` installs it: rackready_lab.testenv.TEST_TOOLS)")
    proc = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_decided_outcome_lands_in_the_sites_textfile_dir(fake: FakeNode,
                                                               capsys: pytest.CaptureFixture[str]
                                                               ) -> None:
    folder = fake.root / "var" / "lib" / "node-exporter"  # made when missing
    plan = plan_for({"metrics": {"textfile_dir": str(folder)}})
    done = verdict_metrics.publish(plan, [fake.node], {"fake01": judgement("FAIL", [ECC])},
                                   connect=lambda n: fake.connect())
    target = folder / "rackready-controller.prom"
    assert done == {"fake01": f"verdict written to {target}"}
    assert capsys.readouterr().out == f"metrics: fake01: verdict written to {target}\n"
    text = target.read_text()
    promtool_clean(text)
    assert 'rackready_ok{source="controller"} 0' in text
    assert 'rackready_outcome{source="controller",outcome="FAIL"} 1' in text
    assert ('rackready_check_ok{source="controller",check="gpu.health",'
            'component="GPU 3 (serial 1)"} 0') in text
    assert 'simulated="true"' in text  # the lab profile, as the controller loads it
    assert [p.name for p in folder.iterdir()] == ["rackready-controller.prom"]  # renamed
    # a second run replaces it
    verdict_metrics.publish(plan, [fake.node], {"fake01": judgement("PASS", [])},
                            connect=lambda n: fake.connect())
    assert 'rackready_ok{source="controller"} 1' in target.read_text()


def test_a_node_without_a_textfile_dir_gets_nothing(fake: FakeNode) -> None:
    done = verdict_metrics.publish(plan_for({}), [fake.node],
                                   {"fake01": judgement("PASS", [])},
                                   connect=lambda n: fake.connect())
    assert done == {} and fake.commands == []


def test_an_unreachable_or_unwritable_node_is_one_line(fake: FakeNode, tmp_path: Path) -> None:
    def unreachable(node: Node) -> Any:
        raise UserError("fake01: unreachable at 127.0.0.1: timed out")

    plan = plan_for({"metrics": {"textfile_dir": str(fake.root / "prom")}})
    done = verdict_metrics.publish(plan, [fake.node], {"fake01": judgement("PASS", [])},
                                   connect=unreachable)
    assert done["fake01"].startswith("verdict not written to ") and "timed out" in \
        done["fake01"]
    blocker = fake.root / "file"
    blocker.write_text("")
    plan = plan_for({"metrics": {"textfile_dir": str(blocker / "sub")}})
    done = verdict_metrics.publish(plan, [fake.node], {"fake01": judgement("PASS", [])},
                                   connect=lambda n: fake.connect())
    assert done["fake01"].startswith(f"verdict not written to {blocker}/sub/"), done
    assert "\n" not in done["fake01"] and "creating" in done["fake01"]


def test_put_file_refuses_a_relative_path_and_says_a_lost_node(fake: FakeNode) -> None:
    client = fake.connect()
    try:
        with pytest.raises(ValueError):
            put_file(client, b"x", "relative/file.prom", become=False)
    finally:
        client.close()
    client = fake.connect()
    fake.drop_connections()
    with pytest.raises(SessionError, match="connection lost|closed"):
        put_file(client, b"x", str(fake.root / "f.prom"), become=False)
    client.close()


def test_become_installs_through_sudo(fake: FakeNode, tmp_path: Path) -> None:
    """become: staged in /tmp as the login user, then `sudo -n install` (the fake node's
    sudo is a shim that runs the command as it is)."""
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "sudo").write_text('#!/bin/sh\n[ "$1" = -n ] && shift; [ "$1" = -- ] && shift\n'
                               'exec "$@"\n')
    (shim / "sudo").chmod(0o755)
    fake.env["PATH"] = f"{shim}:{fake.env['PATH']}"
    fake.allowed.append("/tmp/rackready.")
    node = dataclasses.replace(fake.node, become=True)
    plan = plan_for({"metrics": {"textfile_dir": str(fake.root / "prom")}})
    done = verdict_metrics.publish(plan, [node], {"fake01": judgement("PASS", [])},
                                   connect=lambda n: fake.connect())
    assert done["fake01"].startswith("verdict written"), done
    assert any(c.startswith("sudo -n -- sh -c") and "install -m 0644" in c
               for c in fake.commands)
    assert (fake.root / "prom" / "rackready-controller.prom").stat().st_mode & 0o777 == 0o644
