"""roles/slurm_node without daemons: its templates rendered by Ansible's own templar the
way the template module renders them (trim_blocks), the munge key's handling (no_log on
every task that reads it, the base64 round trip of a binary key, the one-line refusals),
the health wrapper's exit codes run with a stand-in python, and the playbook's gate.

What real slurmd/slurmctld 22.05 and munge did with the same files:
bench/results/slurm-container-2026-12-02.md."""

from __future__ import annotations

import base64
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.common.text.converters import to_bytes
from ansible.parsing.dataloader import DataLoader
from ansible.template import AnsibleEnvironment, Templar

from rackready.site.paths import PROJECT_ROOT

ROOT = PROJECT_ROOT
ROLE = ROOT / "roles/slurm_node"
KEY_NAME = re.compile(r"(?<![\w])slurm_node_munge_key(?![\w])")


def load(rel: str):
    return yaml.safe_load((ROLE / rel).read_text())


def role_vars(**overrides) -> dict:
    """The role's defaults and vars, with the templated ones the tests need made plain."""
    v = {**load("defaults/main.yml"), **load("vars/main.yml")}
    v.update(slurm_node_name="gpu01", slurm_node_health_python="/opt/rackready/venv/bin/python",
             slurm_node_health_profile="xe9680-h200", slurm_node_health_site={},
             slurm_node_controller_host="ctl01", ansible_managed="Ansible managed",
             slurm_node_register_gpu_devices={"files": []})
    v.update(overrides)
    return v


def template(name: str, **variables) -> str:
    """A role template as the template module renders it (trim_blocks, AnsibleEnvironment)."""
    templar = Templar(loader=DataLoader(), variables=variables)
    templar = templar.copy_with_new_env(environment_class=AnsibleEnvironment,
                                        available_variables=variables)
    text = (ROLE / "templates" / name).read_text()
    return templar.do_template(text, preserve_trailing_newlines=True, escape_backslashes=False,
                               overrides={"trim_blocks": True, "lstrip_blocks": False})


def expr(value: str, **variables):
    return Templar(loader=DataLoader(), variables=variables).template(value)


def node(name: str, cpus=128, sockets=2, cores=32, threads=2, memory_mb=2063000, gpus=8,
         addr="") -> dict:
    return {"__slurm_node_self": {"name": name, "addr": addr, "cpus": cpus, "sockets": sockets,
                                  "cores": cores, "threads": threads, "memory_mb": memory_mb,
                                  "gpus": gpus}}


def lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def devices(n: int) -> dict:
    return {"files": [{"path": f"/dev/nvidia{i}"} for i in range(n)]}


# --- slurm.conf ---------------------------------------------------------------------

def rendered_conf(**overrides) -> list[str]:
    hostvars = {"gpu01": node("gpu01", addr="192.0.2.11"),
                "gpu02": node("gpu02", cpus=96, sockets=2, cores=48, threads=1, gpus=4)}
    v = role_vars(hostvars=hostvars, __slurm_node_nodes=["gpu01", "gpu02"], **overrides)
    return lines(template("slurm.conf.j2", **v))


def test_rendered_slurm_conf_names_every_node_with_its_hardware():
    conf = rendered_conf()
    assert "ClusterName=rackready" in conf and "SlurmctldHost=ctl01" in conf
    assert "GresTypes=gpu" in conf
    assert "ProctrackType=proctrack/cgroup" in conf
    assert "TaskPlugin=task/cgroup,task/affinity" in conf
    assert ("NodeName=gpu01 NodeAddr=192.0.2.11 CPUs=128 Boards=1 SocketsPerBoard=2 "
            "CoresPerSocket=32 ThreadsPerCore=2 RealMemory=2063000 Gres=gpu:8 "
            "State=UNKNOWN") in conf
    assert ("NodeName=gpu02 CPUs=96 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 "
            "ThreadsPerCore=1 RealMemory=2063000 Gres=gpu:4 State=UNKNOWN") in conf
    assert "PartitionName=gpu Nodes=gpu01,gpu02 Default=YES MaxTime=INFINITE State=UP" in conf


def test_a_topology_that_does_not_multiply_to_the_cpus_gives_cpus_only():
    hostvars = {"vm1": node("vm1", cpus=6, sockets=1, cores=4, threads=2, gpus=0)}
    conf = lines(template("slurm.conf.j2", **role_vars(hostvars=hostvars,
                                                          __slurm_node_nodes=["vm1"])))
    assert "NodeName=vm1 CPUs=6 RealMemory=2063000 State=UNKNOWN" in conf  # no Gres either


def test_rendered_slurm_conf_wires_the_health_check():
    conf = rendered_conf()
    assert "HealthCheckProgram=/usr/local/sbin/rackready-health" in conf
    assert "HealthCheckInterval=300" in conf
    assert "HealthCheckNodeState=IDLE,CYCLE" in conf
    assert not [ln for ln in conf if ln.startswith(("Prolog=", "PrologFlags="))]
    prolog = rendered_conf(slurm_node_health_prolog=True, slurm_node_health_interval_s=60)
    assert "Prolog=/usr/local/sbin/rackready-health" in prolog
    assert "PrologFlags=Alloc" in prolog and "HealthCheckInterval=60" in prolog
    # "false" as -e gives it is a string: still off
    off = rendered_conf(slurm_node_health_enabled="false")
    assert not [ln for ln in off if ln.startswith(("HealthCheck", "Prolog"))]


def test_the_container_override_and_extra_lines():
    conf = rendered_conf(slurm_node_proctrack_type="proctrack/linuxproc",
                         slurm_node_task_plugin="task/affinity",
                         slurm_node_slurm_conf_extra=["MpiDefault=none"])
    assert "ProctrackType=proctrack/linuxproc" in conf and "TaskPlugin=task/affinity" in conf
    assert "MpiDefault=none" in conf


# --- gres.conf ----------------------------------------------------------------------

@pytest.mark.parametrize("count,found,expected", [
    (8, 8, ["AutoDetect=off", "Name=gpu File=/dev/nvidia[0-7]"]),
    (8, 0, ["AutoDetect=off", "Name=gpu Count=8"]),  # no device files (Slurm 22.05 drops these)
    (8, 7, ["AutoDetect=off", "Name=gpu Count=8"]),  # one missing: never a File= that lies
    (1, 1, ["AutoDetect=off", "Name=gpu File=/dev/nvidia0"]),
    (4, 8, ["AutoDetect=off", "Name=gpu File=/dev/nvidia[0-3]"]),
    (0, 0, ["AutoDetect=off"]),
])
def test_gres_conf_names_device_files_only_when_all_exist(count, found, expected):
    v = role_vars(slurm_node_gpu_count=count, slurm_node_register_gpu_devices=devices(found))
    assert lines(template("gres.conf.j2", **v)) == expected


def test_gres_conf_autodetect_when_asked():
    v = role_vars(slurm_node_gres_autodetect="nvml", slurm_node_register_gpu_devices=devices(8))
    assert lines(template("gres.conf.j2", **v))[0] == "AutoDetect=nvml"


# --- cgroup.conf --------------------------------------------------------------------

def test_cgroup_conf_constrains_devices_on_bare_metal():
    assert lines(template("cgroup.conf.j2", **role_vars())) == [
        "CgroupPlugin=autodetect", "ConstrainCores=yes", "ConstrainDevices=yes",
        "ConstrainRAMSpace=yes", "ConstrainSwapSpace=yes"]


def test_an_empty_cgroup_conf_removes_the_file():
    tasks = load("tasks/main.yml")
    remove = next(t for t in tasks if t["name"] == "Remove cgroup.conf (no cgroup plugin)")
    assert remove["ansible.builtin.file"]["state"] == "absent"
    assert remove["when"] == "slurm_node_cgroup_conf | length == 0"


# --- the munge key ------------------------------------------------------------------

def all_tasks() -> list[dict]:
    found = []

    def walk(items):
        for t in items or ():
            found.append(t)
            walk(t.get("block"))
            walk(t.get("rescue"))
            walk(t.get("always"))
    for f in sorted((ROLE / "tasks").glob("*.yml")):
        walk(yaml.safe_load(f.read_text()))
    walk(load("handlers/main.yml"))
    return found


def test_every_task_that_reads_the_key_has_no_log():
    readers = [t for t in all_tasks() if KEY_NAME.search(yaml.safe_dump(
        {k: v for k, v in t.items() if k != "name"}))]
    assert len(readers) >= 2  # the check and the copy
    assert [t["name"] for t in readers if t.get("no_log") is not True] == []
    spec = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())
    assert spec["argument_specs"]["main"]["options"]["slurm_node_munge_key"]["no_log"] is True


def key_problem(key: str, fmt: str = "base64") -> str:
    t = next(t for t in load("tasks/main.yml") if t["name"] == "Look at the munge key")
    return str(expr(t["ansible.builtin.set_fact"]["__slurm_node_munge_key_problem"],
                    slurm_node_munge_key=key, slurm_node_munge_key_format=fmt)).strip()


def test_a_missing_or_malformed_key_is_one_line_that_never_shows_it():
    assert "is empty" in key_problem("") and "never generates" in key_problem("")
    assert "not base64" in key_problem("not base64!!")
    assert "shorter than the 32 bytes" in key_problem(base64.b64encode(b"short").decode())
    assert "shorter than the 32 bytes" in key_problem("x" * 31, "raw")
    good = base64.b64encode(os.urandom(1024)).decode()
    assert key_problem(good) == "" and key_problem("\n".join([good[:76], good[76:]])) == ""
    assert key_problem("k" * 32, "raw") == ""
    for problem in (key_problem(""), key_problem("c2hvcnQ=")):
        assert "\n" not in problem and "c2hvcnQ" not in problem


def test_a_binary_key_round_trips_through_the_copy_content():
    """The copy action writes to_bytes(content): b64decode's surrogates give the bytes back."""
    raw = os.urandom(1024)
    t = next(t for t in load("tasks/main.yml") if t["name"] == "Write the site's munge key")
    wrapped = base64.encodebytes(raw).decode()  # 76-column lines, as `base64` prints
    content = expr(t["ansible.builtin.copy"]["content"], slurm_node_munge_key=wrapped,
                   slurm_node_munge_key_format="base64")
    assert to_bytes(content) == raw
    assert t["ansible.builtin.copy"]["mode"] == "0400"
    copy = t["ansible.builtin.copy"]
    assert (copy["owner"], copy["group"]) == ("munge", "munge")


# --- the health wrapper -------------------------------------------------------------

def wrapper(tmp_path: Path, line: str, rc: int, **overrides) -> Path:
    """The wrapper rendered with a stand-in python that records its arguments."""
    py = tmp_path / "python"
    py.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" > {tmp_path}/args\n"
                  f"printf '%s\\n' {line!r}\nexit {rc}\n")
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    v = role_vars(slurm_node_health_python=str(py), **overrides)
    script = tmp_path / "rackready-health"
    script.write_text(template("rackready-health.j2", **v))
    script.chmod(0o755)
    return script


def run(script: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([str(script)], capture_output=True, text=True, timeout=10,
                          env={"PATH": "/usr/bin:/bin", **env}, check=False)


@pytest.mark.parametrize("line,rc,expected", [
    ("healthy: 23 checks in 4.2 s (xe9680-h200; a local health gate, not an acceptance)", 0, 0),
    ("UNHEALTHY: gpu.count node: 7 GPUs; drained gpu01", 1, 0),  # the drain is the signal
    ("UNHEALTHY: gpu.count node: 7 GPUs; gpu01 already drained by someone else (x): left as it is",
     1, 0),
    ("UNHEALTHY: gpu.count node: 7 GPUs; not drained: drain of gpu01 failed: ...", 1, 1),
    ("UNHEALTHY: health.drain node: scontrol not found on PATH: ...", 1, 1),
    ("error: unknown profile", 2, 2),
])
def test_wrapper_exit_codes_as_health_check_program(tmp_path, line, rc, expected):
    p = run(wrapper(tmp_path, line, rc))
    assert p.returncode == expected
    assert line in p.stdout  # slurmd logs the output of a failed health check


def test_wrapper_as_prolog_stops_the_job_on_an_unhealthy_node(tmp_path):
    script = wrapper(tmp_path, "UNHEALTHY: gpu.count node: 7 GPUs; drained gpu01", 1)
    assert run(script, SLURM_JOB_ID="42").returncode == 1


def test_wrapper_arguments_and_node_name(tmp_path):
    script = wrapper(tmp_path, "healthy", 0, slurm_node_health_site={"fabric": "ib"},
                     slurm_node_health_textfile_dir="/var/lib/prometheus/node-exporter",
                     slurm_node_health_extra_args=["--without", "rdma"],
                     slurm_node_health_suite_dir=str(tmp_path))
    text = script.read_text()
    assert 'export SLURMD_NODENAME="${SLURMD_NODENAME:-gpu01}"' in text
    assert f"export PYTHONPATH={tmp_path}" in text
    assert run(script).returncode == 0
    assert (tmp_path / "args").read_text().split() == [
        "-m", "validation", "health", "--profile", "xe9680-h200", "--drain",
        "--site", "/etc/rackready/slurm-health-site.yml",
        "--textfile-dir", "/var/lib/prometheus/node-exporter", "--without", "rdma"]


def test_the_gates_textfile_dir_is_the_sites_own_setting(tmp_path):
    """One setting for the gate, the runs and the controller's verdict: the site's
    metrics.textfile_dir (rackready_validation_site, in the gate's --site settings)."""
    default = load("defaults/main.yml")["slurm_node_health_textfile_dir"]
    site = {"fabric": "ib", "metrics": {"textfile_dir": "/var/lib/prometheus/node-exporter"}}
    assert expr(default, slurm_node_health_site=site) == "/var/lib/prometheus/node-exporter"
    assert expr(default, slurm_node_health_site={"fabric": "ib"}) == ""
    script = wrapper(tmp_path, "healthy", 0, slurm_node_health_site=site,
                     slurm_node_health_textfile_dir=expr(default, slurm_node_health_site=site))
    assert run(script).returncode == 0
    assert "--textfile-dir /var/lib/prometheus/node-exporter" in (tmp_path / "args").read_text()


# --- the playbook -------------------------------------------------------------------

def test_playbook_runs_the_role_only_where_enabled_and_is_not_in_site():
    (play,) = yaml.safe_load((ROOT / "playbooks/slurm.yml").read_text())
    assert play["hosts"] == "all:!staging" and play["tags"] == ["slurm"]
    (role,) = play["roles"]
    assert role["role"] == "slurm_node"
    assert role["when"] == "slurm_node_enabled | default(false) | bool"
    assert load("defaults/main.yml")["slurm_node_enabled"] is False
    assert "slurm.yml" not in (ROOT / "playbooks/site.yml").read_text()


def test_node_group_default_is_every_host_but_staging():
    value = load("vars/main.yml")["__slurm_node_nodes"]
    groups = {"all": ["gpu01", "gpu02", "stage1"], "staging": ["stage1"], "rack": ["gpu02"]}
    for _ in range(5):  # the inventory's order, every time (a set would shuffle it)
        assert expr(value, groups=groups, slurm_node_group="") == ["gpu01", "gpu02"]
    assert expr(value, groups=groups, slurm_node_group="rack") == ["gpu02"]
