"""Run diff: a retest after an RMA of GPU 3 on gpu02."""

from __future__ import annotations

from pathlib import Path

from test_report_synthetic import inventory, result, write_run

from rackready.report.diff import compare_runs, diff_runs


def _before_after(tmp_path: Path) -> tuple[Path, Path]:
    a = write_run(tmp_path / "a", [result("gpu02", fault_gpu=3)])
    after = result("gpu02", inv=inventory(8, replaced={3: "1654000000001"}))
    after["run_id"] = "run-retest"
    return a, write_run(tmp_path / "b", [after])


def test_rma_retest_shows_outcome_verdict_measurement_and_serial(tmp_path: Path) -> None:
    a, b = _before_after(tmp_path)
    nd = compare_runs(a, b).nodes[0]
    assert nd.outcome == ("FAIL", "PASS")
    assert ("gemm_burnin/gemm.tflops[gpu=3]", "fail", "pass") in nd.verdict_changes
    assert len(nd.verdict_changes) == 1
    assert ("inventory.gpus[3].serial", "1653124042737", "1654000000001") in nd.identity_changes
    deltas = {k: (x, y) for k, x, y, _, _ in nd.measurement_deltas}
    # 540 -> 662*1.006 TFLOP/s; every other GPU is unchanged and stays out of the diff
    assert set(deltas) == {"gemm_burnin/gemm.tflops[gpu=3]"}
    assert deltas["gemm_burnin/gemm.tflops[gpu=3]"] == (540.0, 666.0)
    text = diff_runs(a, b)
    assert "node gpu02: FAIL -> PASS" in text and "(part replaced)" in text


def test_changes_within_noise_are_not_reported(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", [result("gpu01")])
    b = write_run(tmp_path / "b", [result("gpu01", tflops_scale=1.03)])  # +3% < 5% noise
    nd = compare_runs(a, b).nodes[0]
    assert not nd.changed
    assert "no changes beyond noise" in diff_runs(a, b)
    c = write_run(tmp_path / "c", [result("gpu01", tflops_scale=1.08)])  # +8% > 5%
    assert len(compare_runs(a, c).nodes[0].measurement_deltas) == 8
