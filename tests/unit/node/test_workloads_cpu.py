"""The real workers on CPU (gloo), 2 processes, tiny sizes: what CI runs of the GPU workloads."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.integration


from rackready.site.paths import PROJECT_ROOT  # noqa: E402
from validation.workloads.launch import WorkloadFailed, run_workload  # noqa: E402


def _run(module: str, tmp: Path, *args: str) -> dict[str, list]:
    ms, _ = run_workload(module, 2, ["--device", "cpu", *args], tmp, timeout_s=120)
    out: dict[str, list] = {}
    for m in ms:
        out.setdefault(m.name, []).append(m)
    return out


def test_collectives_correct_and_timed(tmp_path):
    got = _run(
        "collectives",
        tmp_path,
        "--sizes",
        "64K",
        "--iters",
        "2",
        "--repeats",
        "1",
        "--pair-size",
        "64K",
    )
    ops = {m.labels["op"] for m in got["nccl.busbw"]}
    assert ops == {
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "alltoall",
        "broadcast",
        "sendrecv",
    }
    assert all(m.value is True for m in got["nccl.correct"])
    assert all(m.value > 0 for m in got["nccl.busbw"])
    assert {(m.labels["src"], m.labels["dst"]) for m in got["nccl.pair_busbw"]} == {
        ("0", "1"),
        ("1", "0"),
    }


def test_collectives_catch_a_wrong_result(tmp_path):
    # fault injected in code: rank 1's result gets one element off by one
    got = _run(
        "collectives",
        tmp_path,
        "--sizes",
        "64K",
        "--iters",
        "1",
        "--repeats",
        "1",
        "--pair-size",
        "0",
        "--ops",
        "all_reduce,alltoall",
        "--fault-rank",
        "1",
    )
    assert [m.value for m in got["nccl.correct"]] == [False, False]


def test_gemm_burnin_sdc_names_the_faulty_gpu(tmp_path):
    got = _run(
        "gemm_burnin",
        tmp_path,
        "--duration-s",
        "2",
        "--side",
        "128",
        "--interval-s",
        "0.5",
        "--ramp-s",
        "0.5",
        "--sdc-every-s",
        "0.5",
        "--fault-rank",
        "1",
    )
    sdc = {m.labels["gpu"]: m.value for m in got["gemm.sdc_mismatches"]}
    assert sdc["0"] == 0 and sdc["1"] > 0
    assert {m.labels["gpu"] for m in got["gemm.tflops"]} == {"0", "1"}
    assert all(m.value > 0 for m in got["gemm.interval_tflops"])


def test_gemm_burnin_clean_run_has_no_mismatch(tmp_path):
    got = _run(
        "gemm_burnin",
        tmp_path,
        "--duration-s",
        "1",
        "--side",
        "128",
        "--interval-s",
        "0.5",
        "--sdc-every-s",
        "0.5",
    )
    assert [m.value for m in got["gemm.sdc_mismatches"]] == [0, 0]


def test_hbm_pattern_names_the_faulty_gpu(tmp_path):
    got = _run("hbm", tmp_path, "--bits", "0:64:16", "--random-passes", "1", "--fault-rank", "0")
    errs = {m.labels["gpu"]: m.value for m in got["hbm.pattern_errors"]}
    assert errs["0"] > 0 and errs["1"] == 0
    assert all(m.value > 0 for m in got["hbm.bandwidth"])


def test_transfers_every_gpu_and_pair(tmp_path):
    got = _run("transfers", tmp_path)
    for k in ("host.h2d_bandwidth", "host.d2h_bandwidth", "host.bidir_bandwidth"):
        assert {m.labels["gpu"] for m in got[k]} == {"0", "1"}
    assert len(got["p2p.bandwidth"]) == 2


def test_bad_flag_is_one_line_and_nonzero(tmp_path):
    with pytest.raises(WorkloadFailed, match="error: bad --sizes 'lots'"):
        run_workload(
            "collectives", 1, ["--device", "cpu", "--sizes", "lots"], tmp_path, timeout_s=60
        )
    # torchrun reports the child's exit with its own traceback; the worker itself prints none
    assert "[rank0]: Traceback" not in (tmp_path / "collectives.log").read_text()


NO_NUMPY = importlib.util.find_spec("numpy") is None
NUMPY_REASON = ("torch.distributed.checkpoint needs numpy (object collectives); "
                "not in the venv")


def _fsdp_roundtrip(tmp: Path) -> dict[str, list]:
    """The checkpoint round-trip run: 10 steps, saved at step 5 and resumed from it."""
    return _run("fsdp_train", tmp / "o", "--shape", "tiny", "--seq", "128", "--batch", "2",
                "--steps", "10", "--ckpt-step", "5", "--ckpt-dir", str(tmp / "ck"),
                "--lr", "3e-3", "--peak-tflops", "1")


@pytest.fixture(scope="module")
def fsdp_roundtrip(tmp_path_factory) -> tuple[dict[str, list], Path]:
    """One round-trip run for the module (the round-trip test and the same-seed test's
    first run): (measurements, its checkpoint folder)."""
    if NO_NUMPY:
        pytest.skip(NUMPY_REASON)
    tmp = tmp_path_factory.mktemp("fsdp-roundtrip")
    return _fsdp_roundtrip(tmp), tmp / "ck"


@pytest.mark.skipif(NO_NUMPY, reason=NUMPY_REASON)
def test_fsdp_checkpoint_roundtrip_bitwise_and_loss_falls(fsdp_roundtrip):
    got, ckpt = fsdp_roundtrip
    loss = {int(m.labels["step"]): m.value for m in got["fsdp.loss"]}
    assert sorted(loss) == list(range(1, 11))
    assert loss[10] < loss[1] - 0.5  # the data is learnable: the curve must fall
    assert got["fsdp.ckpt_resume_max_abs_diff"][0].value == 0.0  # gloo on CPU is deterministic
    resumed = {int(m.labels["step"]): m.value for m in got["fsdp.resumed_loss"]}
    assert resumed == {s: loss[s] for s in range(6, 11)}
    assert got["fsdp.mfu"][0].value > 0
    assert not ckpt.exists() or not any(ckpt.iterdir())


@pytest.mark.skipif(NO_NUMPY, reason="see the round-trip test")
def test_fsdp_same_seed_same_curve(tmp_path, fsdp_roundtrip):
    # a second run of the round-trip's configuration, in its own folders
    a, _ = fsdp_roundtrip
    b = _fsdp_roundtrip(tmp_path)
    assert len(a["fsdp.loss"]) == 10
    assert [m.value for m in a["fsdp.loss"]] == [m.value for m in b["fsdp.loss"]]


def test_a_workload_ends_by_exit_process_with_its_output_flushed():
    """Workloads end through exit_process (os._exit, no interpreter teardown, where torch's
    static destructors aborted one lab rank in twenty after a finished job): what they
    printed still arrives, and the exit code is theirs."""
    import subprocess
    import sys

    repo = PROJECT_ROOT
    code = ("import sys; from validation.workloads.common import exit_process; "
            "print('out', end=''); print('err', end='', file=sys.stderr); exit_process(3)")
    p = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True,
                       timeout=120, check=False)
    assert (p.returncode, p.stdout, p.stderr) == (3, "out", "err")
    for name in ("collectives", "fsdp_train", "gemm_burnin", "hbm", "transfers", "rack_nccl"):
        text = (repo / "validation" / "workloads" / f"{name}.py").read_text()
        assert "exit_process(run_main(main))" in text, name
