"""The live progress board: readable lines when not on a terminal."""

from __future__ import annotations

import io

from rackready.progress import Board


def test_plain_stream_prints_one_line_per_finished_check_and_node():
    buf = io.StringIO()
    board = Board(["gpu01", "gpu02"], stream=buf)
    board.event("gpu01", {"event": "check_started", "check": "gpu_inventory"})
    board.event("gpu01", {"event": "progress", "check": "gemm", "fraction": 0.5, "eta_s": 12})
    board.event("gpu01", {"event": "check_finished", "check": "gpu_inventory",
                          "result": {"status": "ok", "duration_s": 0.25}})
    board.finish("gpu02", "UNREACHABLE", "gpu02: unreachable at 192.0.2.9")
    lines = buf.getvalue().splitlines()
    assert lines == [
        "gpu01  gpu_inventory ok (0.2s)",
        "gpu02  UNREACHABLE: gpu02: unreachable at 192.0.2.9",
    ]


def test_progress_line_has_bar_and_time_left():
    buf = io.StringIO()
    board = Board(["n1"], stream=buf)
    board.event("n1", {"event": "progress", "check": "gemm_burnin", "fraction": 0.25,
                       "eta_s": 90, "label": "gpu 0-7"})
    assert board.lines["n1"] == "gemm_burnin [#####...............]  25% 90s left gpu 0-7"
