"""lab.reboot_all: every node is power-cycled at the same time, and a node that does not
come back fails the call as its own reboot would."""

from __future__ import annotations

import threading

import pytest

from rackready.errors import EnvironmentProblem
from rackready_lab import lab


def test_the_nodes_reboot_together(monkeypatch):
    started: list[str] = []
    all_in = threading.Barrier(3, timeout=5)  # each reboot waits until all three began

    def reboot(name, bmc=True):
        started.append(name)
        all_in.wait()

    monkeypatch.setattr(lab, "reboot", reboot)
    lab.reboot_all(["a", "b", "c"])
    assert sorted(started) == ["a", "b", "c"]


def test_a_node_that_does_not_come_back_fails_the_call(monkeypatch):
    def reboot(name, bmc=True):
        if name == "b":
            raise EnvironmentProblem("b: SSH did not answer within 120s")

    monkeypatch.setattr(lab, "reboot", reboot)
    with pytest.raises(EnvironmentProblem, match="b: SSH"):
        lab.reboot_all(["a", "b"])
