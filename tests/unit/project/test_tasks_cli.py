"""The command surface: a person's mistakes get one line and a non-zero exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rackready.site.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
# the `rackready` program (rackready.cli): tasks.py under rackready's exit codes
INVOKE = [sys.executable, "-m", "rackready.cli"]
pytestmark = pytest.mark.integration  # the command line as real processes


def invoke(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*INVOKE, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    err = proc.stderr.strip()
    assert "Traceback" not in proc.stderr + proc.stdout
    assert len(err.splitlines()) == 1, err
    return err


def test_every_task_is_listed_with_a_summary():
    out = invoke("--list").stdout
    for name in ("provision", "bundle", "validate", "report", "demo", "test", "lint", "lab.up",
                 "lab.down", "lab.status", "lab.fault", "lab.heal"):
        assert f"  {name} " in out


@pytest.mark.parametrize("task", ["provision", "bundle", "validate", "report", "lab.up",
                                  "lab.fault"])
def test_every_flag_has_help(task):
    out = invoke(task, "--help").stdout
    options = [line for line in out.splitlines() if line.strip().startswith("-")]
    assert options
    for line in options:
        # "-x STRING, --xx=STRING   help text": help text after the flag column
        assert len(line.strip().split(None, 2)) >= 2 and "  " in line.strip(), line


def test_unknown_inventory_is_one_line_exit_2():
    proc = invoke("provision", "--inventory", "no-such-rack")
    assert proc.returncode == 2
    assert "unknown inventory 'no-such-rack'" in one_line_error(proc)


def test_bad_level_is_one_line_exit_2():
    proc = invoke("validate", "--node", "gpu01", "--inventory", "rack1", "--level", "fast")
    assert proc.returncode == 2
    assert "--level" in one_line_error(proc)


def test_unknown_node_is_one_line_exit_2():
    proc = invoke("validate", "--node", "gpu99", "--inventory", "rack1")
    assert proc.returncode == 2
    assert "unknown node 'gpu99'" in one_line_error(proc)


def test_malformed_inventory_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "hosts.yml"
    bad.write_text("all:\n  children: [unclosed\n")
    proc = invoke("validate", "--node", "gpu01", "--inventory", str(bad))
    assert proc.returncode == 2
    assert "malformed inventory" in one_line_error(proc)


def test_host_without_profile_is_refused(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    gpu01:\n      ansible_host: 192.0.2.10\n")
    proc = invoke("validate", "--node", "gpu01", "--inventory", str(inv))
    assert proc.returncode == 2
    assert "no rackready_profile" in one_line_error(proc)


def test_unknown_flag_or_task_is_one_line_exit_2():
    for args, word in ((("provision", "--inventory", "rack1", "--colour"), "--colour"),
                       (("validate", "--nod", "gpu01"), "--nod"),
                       (("valdiate",), "valdiate")):
        proc = invoke(*args)
        assert proc.returncode == 2, (args, proc.returncode)
        assert word in one_line_error(proc)


def test_a_flag_without_its_value_is_one_line_exit_2():
    for args, word in ((("validate", "--node"), "node"), (("-c",), "collection")):
        proc = invoke(*args)
        assert proc.returncode == 2, (args, proc.returncode)
        assert word in one_line_error(proc)


def test_the_rackready_command_is_the_program_the_tests_run():
    import tomllib

    from rackready.cli import RackreadyProgram

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, attr = scripts["rackready"].split(":")
    assert (module, attr) == (INVOKE[-1], "program.run")
    assert isinstance(__import__(module, fromlist=["program"]).program, RackreadyProgram)


def test_invoke_runs_the_same_tasks():
    """`invoke` (the README's command) lists and runs tasks.py as the `rackready` program
    does; only a mistyped command line exits with invoke's own code there."""
    stock = [sys.executable, "-m", "invoke"]
    listed = subprocess.run([*stock, "--list"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0 and listed.stdout == invoke("--list").stdout
    proc = subprocess.run([*stock, "validate", "--node", "nosuchnode", "--inventory", "rack1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "nosuchnode" in one_line_error(proc)


def test_an_unknown_provisioning_tag_is_refused_before_ansible_runs():
    proc = invoke("provision", "--inventory", "rack1", "--tags", "driver,nosuchtag")
    assert proc.returncode == 2
    err = one_line_error(proc)
    assert "unknown tag(s) nosuchtag" in err and "driver" in err


def test_calibrate_needs_its_flags_and_known_good_nodes_of_one_profile():
    assert "--nodes is required" in one_line_error(invoke("calibrate", "--inventory", "rack1"))
    proc = invoke("calibrate", "--inventory", "rack1", "--nodes", "gpu01,gpu05")
    assert proc.returncode == 2
    assert "calibration needs at least 3 known-good nodes" in one_line_error(proc)


def test_bad_node_count_is_one_line_exit_2():
    proc = invoke("lab.up", "--nodes", "99")
    assert proc.returncode == 2
    assert "--nodes" in one_line_error(proc)


def test_bundle_needs_a_staging_host(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    gpu01:\n      ansible_host: 192.0.2.1\n")
    proc = invoke("bundle", "--inventory", str(inv))
    assert proc.returncode == 2
    assert "no host in group 'staging'" in one_line_error(proc)


def test_non_utf8_inventory_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "hosts.yml"
    bad.write_bytes(b"all:\n  hosts:\n    gpu01: {ansible_host: \xff\xfe}\n")
    proc = invoke("validate", "--node", "gpu01", "--inventory", str(bad))
    assert proc.returncode == 2
    assert "not UTF-8" in one_line_error(proc)


def test_out_naming_a_file_is_one_line_exit_2(tmp_path):
    out = tmp_path / "a-file"
    out.write_text("keep me\n")
    proc = invoke("validate", "--node", "gpu01", "--inventory", "rack1", "--out", str(out))
    assert proc.returncode == 2
    assert "not a directory" in one_line_error(proc)
    assert out.read_text() == "keep me\n"


def test_resume_of_a_torn_run_plan_is_one_line_exit_2(tmp_path):
    (tmp_path / "run.json").write_text('{"run_id": "x", "nodes": [')
    proc = invoke("validate", "--inventory", "rack1", "--resume", str(tmp_path))
    assert proc.returncode == 2
    assert "not a readable run plan" in one_line_error(proc)


def test_unknown_only_check_is_one_line_exit_2():
    proc = invoke("validate", "--node", "gpu01", "--inventory", "rack1", "--only", "gpu.magic")
    assert proc.returncode == 2
    assert "unknown check(s) gpu.magic" in one_line_error(proc)


def test_ci_runs_the_readme_test_command_and_it_covers_every_tier():
    """.ci/run runs the README's second command as written; that command runs every tier
    (lint included) in order and prints each tier's wall time."""
    import ast
    import re

    readme = (ROOT / "README.md").read_text()
    assert ".venv/bin/invoke test\n" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^\.venv/bin/invoke test$", ci, re.M)
    tree = ast.parse((ROOT / "tasks.py").read_text())
    tiers = next(ast.literal_eval(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 and any(getattr(t, "id", "") == "TEST_TIERS" for t in n.targets))
    assert list(tiers) == ["unit", "integration", "lab", "browser", "lint"]
    assert 'print(f"test: tier {tier}' in (ROOT / "tasks.py").read_text()
