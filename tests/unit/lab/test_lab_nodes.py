"""A lab node's boot and shutdown (rackready_lab.nodes): a node that never answers SSH
fails with what ssh said and the console's last lines, on one line (a test run removes
the lab and its console log); a node that ends on its own while being stopped is
stopped, not an error."""

from __future__ import annotations

import subprocess

import pytest

from rackready.errors import EnvironmentProblem
from rackready_lab import nodes
from rackready_lab.config import NodeSpec


@pytest.fixture
def node(tmp_path, monkeypatch) -> NodeSpec:
    spec = NodeSpec("lab-gpu01", 1, "xe9680-h200", "roce")
    monkeypatch.setattr(NodeSpec, "dir", property(lambda self: tmp_path))
    monkeypatch.setattr(nodes, "pid_of", lambda n: 4242)
    monkeypatch.setattr(nodes, "_port_open", lambda host, port: True)
    monkeypatch.setattr(nodes.time, "sleep", lambda s: None)
    return spec


def _refused(node, command, check=True):
    return subprocess.CompletedProcess([], 255, "", "kex_exchange_identification: read: "
                                                    "Connection reset by peer\r\n")


def test_the_timeout_names_the_ssh_error_and_the_console_tail(node, tmp_path, monkeypatch):
    lines = [f"line {i}" for i in range(20)]
    (tmp_path / "console.log").write_bytes(
        ("\n".join(lines[:-1]) + "\n\x1b[0;1;31mFAILED\x1b[0m to start ssh.service\n").encode())
    monkeypatch.setattr(nodes, "ssh", _refused)
    with pytest.raises(EnvironmentProblem) as err:
        nodes.wait_for_ssh(node, timeout_s=0.05)
    message = str(err.value)
    assert "\n" not in message and "\x1b" not in message
    assert message.startswith("lab-gpu01: SSH did not answer within 0s (ssh: kex_exchange")
    assert message.endswith("line 17 | line 18 | FAILED to start ssh.service")
    assert "line 11 |" not in message  # only the last eight lines


def test_a_missing_console_log_is_said_and_an_answer_returns(node, monkeypatch):
    monkeypatch.setattr(nodes, "_port_open", lambda host, port: False)
    with pytest.raises(EnvironmentProblem, match=r"\(port 22 closed\); console: unreadable"):
        nodes.wait_for_ssh(node, timeout_s=0.05)
    monkeypatch.setattr(nodes, "_port_open", lambda host, port: True)
    monkeypatch.setattr(nodes, "ssh", lambda n, c, check=True:
                        subprocess.CompletedProcess([], 0, "", ""))
    nodes.wait_for_ssh(node, timeout_s=5)  # returns once ssh answers


def test_a_node_that_ends_between_the_check_and_the_signal_is_stopped(node, tmp_path,
                                                                       monkeypatch):
    (tmp_path / "nspawn.pid").write_text("4242")
    alive = iter([4242, None])  # running when looked at, gone right after
    monkeypatch.setattr(nodes, "pid_of", lambda n: next(alive, None))

    def gone(pid, sig):
        raise ProcessLookupError(3, "No such process")

    monkeypatch.setattr(nodes.os, "kill", gone)
    monkeypatch.setattr(nodes.os, "killpg", gone)
    nodes.stop(node)
    assert not (tmp_path / "nspawn.pid").exists()


MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:40 / /proc rw,relatime - proc proc rw
"""
CGROUP = "9:name=systemd:/\n4:memory:/sandbox/abc\n1:cpu:/\n0::/\n"


def test_each_node_boots_in_cgroups_of_its_own_under_the_controllers(tmp_path):
    """Two nodes booted at once under one cgroup raced on their units' cgroups (one removed
    /system.slice/<unit> as the other attached: systemd-user-sessions failed with
    219/CGROUP, /run/nologin kept SSH out): each node gets its own, in every hierarchy,
    under the controller's own path there (the sandbox's memory cgroup kept)."""
    root = tmp_path / "sys/fs/cgroup"
    mounts = tmp_path / "mountinfo"
    mounts.write_text(MOUNTINFO.replace("/sys/fs/cgroup", str(root)))
    for hier in ("cpu", "memory", "systemd", "unified"):
        (root / hier).mkdir(parents=True)
        (root / hier / "cgroup.procs").write_text("")
    mine = tmp_path / "cgroup"
    mine.write_text(CGROUP)
    got = nodes.own_cgroups("lab-gpu02", root, mine, mounts)
    assert got == [root / "systemd/rackready-lab-gpu02",
                   root / "memory/sandbox/abc/rackready-lab-gpu02",
                   root / "cpu/rackready-lab-gpu02", root / "unified/rackready-lab-gpu02"]
    assert nodes.own_cgroups("lab-gpu01", root, mine, mounts) != got


def test_the_cgroup_step_joins_then_becomes_the_command(tmp_path):
    """boot's wrapper writes its pid into each cgroup it can and execs the command (the pid
    nspawn.pid names stays the same); pid_of knows the wrapper as the node's nspawn."""
    joinable, refused = tmp_path / "a", tmp_path / "b"  # b: no such cgroup
    joinable.mkdir()
    out = subprocess.run(["sh", "-c", nodes._ENTER, f"{joinable} {refused}",
                          "sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    assert (joinable / "cgroup.procs").read_text().strip() == out.stdout.strip()
    assert out.stderr == ""
