"""The workers on real GPUs (marked gpu; run where torch sees at least 2 GPUs)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from validation.workloads.launch import run_workload  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs"),
]


def test_collectives_correct_on_gpu(tmp_path):
    ms, _ = run_workload("collectives", 2, ["--sizes", "64M", "--pair-size", "64M"], tmp_path, 300)
    assert all(m.value is True for m in ms if m.name == "nccl.correct")
    assert any(m.name == "nccl.busbw" and m.value > 50 for m in ms)


def test_burnin_sdc_clean_on_gpu(tmp_path):
    ms, _ = run_workload("gemm_burnin", 2, ["--duration-s", "10", "--ramp-s", "2"], tmp_path, 300)
    assert [m.value for m in ms if m.name == "gemm.sdc_mismatches"] == [0, 0]
