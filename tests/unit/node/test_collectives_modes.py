"""Collectives in place and out of place, as nccl-tests defines them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.integration


from validation.workloads.collectives import MODES, Coll, modes_for  # noqa: E402
from validation.workloads.common import Dist, UsageError  # noqa: E402
from validation.workloads.launch import run_workload  # noqa: E402


def _coll(op: str, mode: str, rank: int = 1, world: int = 4) -> Coll:
    return Coll(Dist(rank, world, rank, torch.device("cpu")), op, 1 << 16, mode)


def _ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


def test_in_place_buffers_alias_as_nccl_tests_defines():
    # all_gather: the rank sends from its own block of the output (sendInplaceOffset)
    ag = _coll("all_gather", "in_place")
    k = ag.numel // 4
    assert _ptr(ag.x) == _ptr(ag.y) + 1 * k * 2 and ag.x.numel() == k
    # reduce_scatter: the rank receives into its own block of the input (recvInplaceOffset)
    rs = _coll("reduce_scatter", "in_place")
    assert _ptr(rs.y) == _ptr(rs.x) + 1 * k * 2 and rs.y.numel() == k
    for op in ("alltoall", "sendrecv", "all_reduce", "broadcast"):
        c = _coll(op, "in_place")
        assert c.x is c.y, op
    for op in ("all_gather", "reduce_scatter", "alltoall", "sendrecv"):
        c = _coll(op, "out_of_place")
        lo, hi = sorted([(_ptr(c.x), c.x.numel()), (_ptr(c.y), c.y.numel())])
        assert lo[0] + lo[1] * 2 <= hi[0], op  # separate buffers


def test_modes_torch_has():
    assert modes_for("all_reduce", list(MODES)) == ["in_place"]
    assert modes_for("broadcast", list(MODES)) == ["in_place"]
    assert modes_for("all_gather", ["out_of_place"]) == ["out_of_place"]
    assert modes_for("alltoall", list(MODES)) == list(MODES)
    with pytest.raises(UsageError):
        _coll("all_reduce", "out_of_place")
    # nccl-tests leaves in-place alltoall and sendrecv unchecked: so do we
    assert not _coll("alltoall", "in_place").checkable
    assert _coll("all_gather", "in_place").checkable


def test_both_modes_measured_and_checked_on_gloo(tmp_path):
    ms, _ = run_workload("collectives", 2, ["--device", "cpu", "--sizes", "64K", "--iters", "2",
                                            "--repeats", "1", "--pair-size", "0"], tmp_path,
                         timeout_s=120)
    bus = {(m.labels["op"], m.labels["mode"]) for m in ms if m.name == "nccl.busbw"}
    assert bus == {("all_reduce", "in_place"), ("broadcast", "in_place"),
                   *((op, mode) for op in ("all_gather", "reduce_scatter", "alltoall",
                                           "sendrecv") for mode in MODES)}
    assert {m.labels["launch"] for m in ms if m.name == "nccl.busbw"} == {"eager"}
    # NCCL's allocator is the default; gloo on CPU has none, and the label says what ran
    assert {m.labels["alloc"] for m in ms if m.name == "nccl.busbw"} == {"torch"}
    correct = {(m.labels["op"], m.labels["mode"]): m.value for m in ms
               if m.name == "nccl.correct"}
    assert ("all_gather", "in_place") in correct and ("reduce_scatter", "in_place") in correct
    assert ("alltoall", "in_place") not in correct and ("sendrecv", "in_place") not in correct
    assert all(v is True for v in correct.values())


def test_in_place_wrong_result_is_caught(tmp_path):
    ms, _ = run_workload("collectives", 2, ["--device", "cpu", "--sizes", "64K", "--iters", "1",
                                            "--repeats", "1", "--pair-size", "0", "--ops",
                                            "all_gather,reduce_scatter", "--modes", "in_place",
                                            "--fault-rank", "1"], tmp_path, timeout_s=120)
    assert [m.value for m in ms if m.name == "nccl.correct"] == [False, False]


def test_bad_modes_are_a_usage_error(tmp_path):
    from validation.workloads.collectives import main

    with pytest.raises(UsageError, match="--modes"):
        main(["--device", "cpu", "--out", str(tmp_path), "--modes", "sideways"])


def test_allocator_falls_back_to_torch_without_a_nccl_pool():
    from validation.workloads.collectives import allocate, nccl_pool

    d = Dist(0, 1, 0, torch.device("cpu"))
    assert nccl_pool(d) is None
    c, used = allocate(d, "nccl", lambda: Coll(d, "all_gather", 1 << 12, "out_of_place"))
    assert used == "torch" and c.pool is None and c.y.numel() == c.numel


def test_the_timed_loop_queues_every_call_before_it_waits(monkeypatch):
    """nccl-tests' loop: calls back to back on one stream; a wait between two calls would
    time torch's cross-stream round trip too."""
    import validation.workloads.collectives as coll

    log = []

    class Work:
        def __init__(self, i: int) -> None:
            self.i = i

        def wait(self) -> None:
            log.append(("wait", self.i))

    def all_to_all_single(y, x, async_op=False):
        assert async_op  # queued, never a blocking call
        log.append(("launch", len(log)))
        return Work(len(log) - 1)

    monkeypatch.setattr(coll.dist, "all_to_all_single", all_to_all_single)
    c = _coll("alltoall", "out_of_place")
    c.queue(3)
    assert [k for k, _ in log] == ["launch"] * 3 + ["wait"] * 3
    log.clear()
    c()  # a plain call (the correctness check's) waits for itself
    assert [k for k, _ in log] == ["launch", "wait"]
