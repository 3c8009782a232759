"""bench/controller_scale.py: its core, one validate run over two fake SSH nodes, so the
program cannot rot (the full sizes are a benchmark, run by hand: docs/scale.md)."""

from __future__ import annotations

import importlib.util

from rackready.site.paths import PROJECT_ROOT

REPO = PROJECT_ROOT
spec = importlib.util.spec_from_file_location("controller_scale",
                                              REPO / "bench" / "controller_scale.py")
controller_scale = importlib.util.module_from_spec(spec)
spec.loader.exec_module(controller_scale)


def test_two_nodes_are_validated_and_measured(tmp_path):
    row = controller_scale.measure(2, tmp_path, only="gpu.inventory")
    # both replayed results were this run's own: judged, not refused
    assert "INCOMPLETE" not in row["outcomes"], row
    assert row["integrity_findings"] == 0
    assert row["wall_s"] > row["sessions_s"] > 0 and row["cpu_s"] > 0
    assert row["peak_fds"] > row["fds0"] and row["peak_threads"] >= 2
    assert row["fds_after"] <= row["fds0"]  # every session's sockets and files closed
    text = controller_scale.table([row])
    assert text.splitlines()[0].startswith("| nodes | wall s |") and " 2 |" in text
