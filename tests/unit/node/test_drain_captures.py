"""validation.drain reads what real Slurm printed: `scontrol show node` captured from
Debian 12's slurmctld/slurmd 22.05.8 in a container (tests/fixtures/slurm/captured/,
bench/results/slurm-container-2026-12-02.md), the node drained by the health wrapper."""

from __future__ import annotations

from pathlib import Path

from validation.drain import parse_show_node

CAPTURED = Path(__file__).resolve().parents[2] / "fixtures/slurm/captured"


def test_captured_idle_node():
    s = parse_show_node((CAPTURED / "show-node-idle.txt").read_text())
    assert (s.state, s.reason, s.drained) == ("IDLE", "", False)


def test_captured_node_drained_by_the_health_wrapper():
    s = parse_show_node((CAPTURED / "show-node-drained-rackready.txt").read_text())
    assert s.state == "IDLE+DRAIN" and s.drained and s.ours
    assert s.reason == ("rackready: gpu.inventory node: skipped (required check gpu.inventory "
                        "could not run: nvidia-smi not found on this node)")  # [root@...] dropped
