"""Terminal summary."""

from __future__ import annotations

from pathlib import Path

from test_report_synthetic import healthy_and_faulty, result, write_node

from rackready.report.render.summary import terminal_summary


def test_summary_names_node_outcome_and_component(tmp_path: Path) -> None:
    run = healthy_and_faulty(tmp_path / "run")
    write_node(run, result("gpu03"), with_result=False)
    lines = terminal_summary(run).splitlines()
    assert lines[0].startswith("SIMULATED")
    assert "FAIL  (1 pass, 1 fail, 1 incomplete, 0 partial)" in lines[1]
    rows = {line.split()[0]: line for line in lines[3:] if line.strip() and line[0] != " "}
    assert rows["gpu01"].split()[1:] == ["PASS", "-"]
    named = "gemm_burnin/gemm.tflops on GPU 3 (serial 1653124042737 as the inventory lists)"
    assert named in rows["gpu02"]
    assert rows["gpu03"].split()[1] == "INCOMPLETE" and "did not finish" in rows["gpu03"]
