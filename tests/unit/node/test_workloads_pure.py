"""Pure parts of the workloads: busbw factors, the nccl-tests parser on the real captures,
fio JSON, SDC blame, data, FLOP count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from validation.workloads import synthetic  # noqa: E402
from validation.workloads.busbw import busbw_factor, parse_nccl_tests  # noqa: E402
from validation.workloads.llama import SHAPES, count_params, flops_per_token  # noqa: E402
from validation.workloads.sdc import sdc_blame  # noqa: E402
from validation.workloads.storage import parse_fio_json  # noqa: E402
from validation.workloads.transfers import parse_cpulist  # noqa: E402

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "hgx-h200-2gpu"


def test_busbw_factors_are_nccl_tests():
    assert busbw_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    assert busbw_factor("all_gather", 2) == 0.5
    assert busbw_factor("alltoall", 4) == 0.75
    assert busbw_factor("sendrecv", 8) == 1.0
    with pytest.raises(ValueError):
        busbw_factor("allreduce", 2)


@pytest.mark.parametrize(
    "op", ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv"]
)
def test_parse_nccl_tests_real_capture(op):
    rows = parse_nccl_tests((FIX / f"nccl-tests-{op}.txt").read_text())
    # -b 1M -e 8G -f 4: 1M,4M,...,4G (7 sizes; 8G did not fit the sweep's last step)
    assert [r.size_bytes for r in rows][:2] == [1 << 20, 4 << 20]
    assert all(r.op == op for r in rows)
    for r in rows:  # the capture's busbw is algbw times nccl-tests' factor for 2 ranks
        assert r.oop_busbw == pytest.approx(r.oop_algbw * busbw_factor(op, 2), abs=0.02)
        assert r.oop_wrong == 0


def test_parse_nccl_tests_reference_number():
    rows = parse_nccl_tests((FIX / "nccl-tests-all_reduce.txt").read_text())
    big = next(r for r in rows if r.size_bytes == 4 << 30)
    assert big.oop_busbw == 348.68  # fixtures/README.md: 348.7 GB/s at 4 GiB
    assert big.ip_wrong == 0


def test_parse_nccl_tests_in_place_na_is_none():
    rows = parse_nccl_tests((FIX / "nccl-tests-sendrecv.txt").read_text())
    assert rows[0].ip_wrong is None  # "N/A": in-place not validated, not "0 wrong"


def test_fio_json_documented_fields():
    # fio's documented JSON (--output-format=json): jobs[].read/write.bw_bytes (B/s), bw (KiB/s).
    # No fio capture exists in the fixtures; this document follows fio's HOWTO field names.
    doc = {
        "fio version": "fio-3.33",
        "jobs": [
            {
                "jobname": "a",
                "read": {"bw_bytes": 2_000_000_000, "bw": 1953125},
                "write": {"bw_bytes": 0, "bw": 0},
            },
            {"jobname": "b", "read": {"bw": 1_000_000}, "write": {"bw_bytes": 500_000_000}},
        ],
    }
    got = parse_fio_json("note: both iodepth and numjobs set\n" + json.dumps(doc))
    assert got["read"] == pytest.approx((2_000_000_000 + 1_024_000_000) / 1e9)
    assert got["write"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        parse_fio_json('{"jobs": []}')


def test_sdc_blame_majority_names_the_odd_gpu():
    base = torch.arange(100, dtype=torch.int16)
    bad = base.clone()
    bad[[3, 50]] += 1
    assert sdc_blame([base, base.clone(), bad, base.clone()]) == {0: 0, 1: 0, 2: 2, 3: 0}
    assert sdc_blame([base, base.clone()]) == {0: 0, 1: 0}


def test_sdc_blame_two_gpus_tie_broken_by_repeat_stability():
    base = torch.arange(10, dtype=torch.int16)
    bad = base.clone()
    bad[0] = 99
    assert sdc_blame([base, bad], stable=[True, False]) == {0: 0, 1: 1}
    # nobody reproducible or both: neither can be cleared, both named
    assert sdc_blame([base, bad]) == {0: 1, 1: 1}


def test_synthetic_is_deterministic_and_learnable():
    x1, y1 = synthetic.batch(1, 5, 0, 2, 64, 256)
    x2, y2 = synthetic.batch(1, 5, 0, 2, 64, 256)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert not torch.equal(x1, synthetic.batch(1, 6, 0, 2, 64, 256)[0])
    assert torch.equal(x1[:, 1:], y1[:, :-1])  # targets are the next tokens
    p = synthetic.chain_prime(256)
    follows = ((5 * x1 + 17) % p == y1).float().mean().item()
    assert 0.8 < follows < 0.97  # the chain holds except at the ~10% resets
    assert int(x1.max()) < p


def test_param_count_and_flops_match_torchtitan_reference():
    n, emb = count_params(SHAPES["llama3-8b"])
    assert round(n / 1e9, 2) == 8.03  # fixtures README: 8.03B parameters
    # torchtitan's 8,491 tok/s/GPU at peak 989 TF is 49.7% MFU with this count
    mfu = 8491 * flops_per_token(SHAPES["llama3-8b"], 8192) / 989e12
    assert mfu == pytest.approx(0.497, abs=0.001)


def test_parse_cpulist():
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}


def test_a_long_burn_in_reaches_the_result_as_a_bounded_series_that_keeps_every_dip():
    """A 4 h burn-in has 14,400 intervals per GPU and dtype: 8 GPUs of them would pass the
    controller's count caps. The result carries at most 600 points per series, each the
    worst of its run of intervals; the full log stays an artifact."""
    from validation.workloads.gemm_burnin import SERIES_POINTS, series_points

    records = [{"t_s": float(t), "tflops": 660.0, "power_w": 690.0, "sm_mhz": 1400,
                "temp_c": 60} for t in range(4 * 3600)]
    records[5000].update(tflops=400.0, sm_mhz=990, power_w=700.0, temp_c=88)  # one bad second
    points = series_points(records)
    assert len(points) <= SERIES_POINTS and points[0]["t_s"] == 0.0
    assert min(p["tflops"] for p in points) == 400.0 and min(p["sm_mhz"] for p in points) == 990
    assert max(p["temp_c"] for p in points) == 88 and max(p["power_w"] for p in points) == 700.0
    assert sum(p["tflops"] == 400.0 for p in points) == 1
    assert series_points(records[:100]) == records[:100]  # short runs: every interval
