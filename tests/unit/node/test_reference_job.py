"""The reference job as a detector: schedule, clipping, activation checkpointing, golden
curves and the rack's step-by-step comparison."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from validation.model import CheckResult, Measurement
from validation.profile import load_profile
from validation.workloads.golden import (
    GOLDEN_DIR,
    Golden,
    GoldenError,
    add_curve,
    compare_curve,
    compare_rack,
    dump_golden_file,
    golden_deviation,
    load_golden,
    load_golden_file,
    parse_golden_file,
)

torch = pytest.importorskip("torch")

from validation.workloads import fsdp_train  # noqa: E402
from validation.workloads.fsdp_train import lr_at, parse_ac  # noqa: E402
from validation.workloads.golden import loss_windows, window_rise  # noqa: E402


# --- schedule: torchtitan v0.2.2 linear warm-up, one stable step, linear decay to 0 ---
def test_schedule_values():
    # warm-up 5 of 16 steps, peak 1: step s (1-based) warms as s/5; decay over 11 steps
    got = [lr_at(s, 1.0, 5, 16) for s in range(1, 17)]
    assert got[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert got[5] == 1.0  # torchtitan's "virtual last step" keeps one stable step
    assert got[6:] == pytest.approx([1 - k / 11 for k in range(1, 11)])
    assert got[-1] > 0 and all(a >= b for a, b in zip(got[4:], got[5:], strict=False))
    assert lr_at(16, 1.0, 5, 16, min_factor=0.1) == pytest.approx(0.1 + 0.9 / 11)
    assert lr_at(3, 3e-4, 0, 10) == pytest.approx(3e-4 * (1 - 2 / 10))  # no warm-up


def test_ac_modes_parse_like_torchtitan():
    assert parse_ac("none", 4) == ["", "", "", ""]
    assert parse_ac("full", 2) == ["full", "full"]
    assert parse_ac("selective", 2) == parse_ac("selective:op", 2) == ["op", "op"]
    assert parse_ac("selective:2", 4) == parse_ac("every:2", 4) == ["full", "", "full", ""]
    for bad in ("some", "selective:0", "every:x"):
        with pytest.raises(fsdp_train.UsageError):
            parse_ac(bad, 4)


def test_loss_windows_and_rise():
    losses = {1: 5.0, 2: 4.0, 3: 3.0, 4: 3.5, 5: 2.0, 6: 2.2, 7: 9.0}
    assert loss_windows(losses, 2) == [(2, 4.5), (4, 3.25), (6, 2.1)]  # step 7: no full window
    assert window_rise(loss_windows(losses, 2)) == pytest.approx(-1.15)
    jump = {1: 12.55, 2: 2.92, 3: 3.04, 4: 8.39, 5: 3.87, 6: 3.54, 7: 2.87, 8: 11.73}
    assert window_rise(loss_windows(jump, 2)) > 0  # the diverging 8B curve is caught
    assert window_rise(loss_windows(losses, 10)) is None


def _job(tmp: Path, *args: str) -> dict[str, list[dict]]:
    """The real job in this process (a group of one on CPU, gloo)."""
    out = tmp / "o"
    rc = fsdp_train.main(["--device", "cpu", "--out", str(out), "--shape", "tiny", "--seq",
                          "64", "--steps", "4", *args])
    assert rc == 0
    got: dict[str, list[dict]] = {}
    for line in (out / "fsdp_train.rank0.jsonl").read_text().splitlines():
        r = json.loads(line)
        got.setdefault(r["name"], []).append(r)
    return got


def _curve(got: dict[str, list[dict]]) -> dict[int, float]:
    return {int(r["labels"]["step"]): r["value"] for r in got["fsdp.loss"]}


def test_clipping_is_active(tmp_path):
    free = _job(tmp_path / "a", "--max-norm", "0")
    clipped = _job(tmp_path / "b", "--max-norm", "0.01")
    norms = [r["value"] for r in free["fsdp.grad_norm"]]
    assert min(norms) > 0.01  # every step's norm is above the limit: clipping bites
    a, b = _curve(free), _curve(clipped)
    assert a[1] == b[1]  # same start
    # clipped gradients change AdamW's moments, so every later step differs; a limit
    # above every norm changes nothing
    assert all(b[s] != a[s] for s in (2, 3, 4))
    assert _curve(_job(tmp_path / "c", "--max-norm", "1e9")) == a
    cfg = clipped["fsdp.run_config"][0]["labels"]
    assert cfg["max_norm"] == "0.01" and cfg["lr"] == "0.003"


def test_activation_checkpointing_modes_give_the_same_loss(tmp_path):
    curves = {ac: _curve(_job(tmp_path / ac.replace(":", "_"), "--ac", ac))
              for ac in ("none", "full", "selective", "selective:2")}
    base = curves["none"]
    for ac, c in curves.items():
        assert compare_curve(c, base).deviation <= 1e-4, ac
    got = _job(tmp_path / "lab", "--ac", "selective")
    assert {r["labels"]["ac"] for r in got["fsdp.tokens_per_s_per_gpu"]} == {"selective"}


# --- the model's attention and the training loop's collector, as torchtitan's ---
def test_grouped_query_attention_reads_kv_heads_in_place_with_the_expanded_result():
    from validation.workloads.llama import attention

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 16, 8, generator=g)
    k, v = torch.randn(1, 2, 16, 8, generator=g), torch.randn(1, 2, 16, 8, generator=g)
    # query head i reads kv head i // 2 (Llama's grouping), as an explicit copy would
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), is_causal=True)
    assert torch.allclose(attention(q, k, v), want, atol=1e-6)
    # and not the other grouping (head i reads kv head i % 2): the test can fail
    other = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1), is_causal=True)
    assert not torch.allclose(attention(q, k, v), other, atol=1e-3)


def test_the_collector_runs_on_schedule_and_is_restored(monkeypatch):
    import gc

    calls = []
    monkeypatch.setattr(gc, "collect", lambda gen=2: calls.append(gen))
    assert gc.isenabled()
    with fsdp_train.scheduled_gc() as collect:
        assert not gc.isenabled()
        for step in range(1, 2 * fsdp_train.GC_EVERY + 1):
            collect(step)
    assert gc.isenabled()  # the worker group's next workload runs with it on
    assert calls == [1, 1, 1]  # once on entry, then at steps 50 and 100


# --- golden curves ---
def _g(loss: dict[int, float], steps: int = 4, tol: float = 0.01) -> Golden:
    return Golden("tiny", 2, "bf16", {"seq": "64", "steps": str(steps)}, tol, "test run", loss)


def test_golden_comparison_fails_on_a_perturbed_curve(tmp_path):
    g = _g({1: 5.5, 2: 5.4, 3: 5.3, 4: 5.2})
    (tmp_path / "tiny.w2.bf16.json").write_text(json.dumps(dump_golden_file([g])))
    assert load_golden("tiny", 2, {"seq": 64, "steps": 4}, root=tmp_path) is not None
    # another config (longer schedule) has no golden curve: never compared
    assert load_golden("tiny", 2, {"seq": 64, "steps": 8}, root=tmp_path) is None
    assert load_golden("tiny", 4, {"seq": 64, "steps": 4}, root=tmp_path) is None

    def ms(curve: dict[int, float]) -> list[Measurement]:
        cfg = Measurement("fsdp.run_config", True, "",
                          {"shape": "tiny", "world": "2", "dtype": "bf16", "seq": "64",
                           "steps": "4"})
        return [cfg, *(Measurement("fsdp.loss", v, "", {"step": str(s)})
                       for s, v in curve.items())]

    same = golden_deviation(ms({1: 5.5, 2: 5.401, 3: 5.3, 4: 5.2}), tmp_path)
    assert same is not None and same[0] == pytest.approx(0.001)
    bad = golden_deviation(ms({1: 5.5, 2: 5.4, 3: 5.35, 4: 5.2}), tmp_path)
    assert bad is not None and bad[0] == pytest.approx(0.05) and bad[1]["worst_step"] == "3"
    assert bad[0] > g.tolerance
    short = golden_deviation(ms({1: 5.5, 2: 5.4}), tmp_path)
    assert short is not None and math.isinf(short[0])  # a missing step is no pass


def test_golden_files_in_the_repository_are_well_formed():
    files = sorted(GOLDEN_DIR.glob("*.json"))
    assert files, "the CPU tiny shape's golden curves are generated here"
    for f in files:
        shape, world, dtype = f.name.removesuffix(".json").split(".")
        curves = load_golden_file(shape, int(world[1:]), dtype)
        assert curves and all(g.shape == shape and g.tolerance > 0 for g in curves)
        for g in curves:
            assert sorted(g.loss) == list(range(1, int(g.config["steps"]) + 1)), f
    # the profile's lab curve is the stored one, step for step
    tiny = load_profile("xe9680-h200-lab").inventory["fsdp_golden"]["tiny"]["loss"]
    g = load_golden("tiny", 2, {"seq": 128, "steps": 16, "seed": 1234, "batch": 1,
                                "lr": 3e-3, "warmup": 5, "max_norm": 1.0,
                                "min_lr_factor": 0.0})
    assert g is not None and all(g.loss[int(s)] == v for s, v in tiny.items())


def test_golden_file_errors_are_one_line():
    with pytest.raises(GoldenError, match="malformed"):
        parse_golden_file({"shape": "tiny"}, "x.json")
    with pytest.raises(GoldenError, match="tolerance"):
        parse_golden_file({"shape": "t", "world": 1, "dtype": "bf16", "tolerance": 0,
                           "provenance": "p", "curves": [{"loss": {"1": 1.0}}]})
    a, b = _g({1: 1.0}), _g({1: 2.0})
    assert [g.loss for g in add_curve([a], b)] == [{1: 2.0}]  # same config: replaced
    assert len(add_curve([a], _g({1: 3.0}, steps=8))) == 2


# --- the rack: same profile and seed, the same curve on every node ---
def _curves(bad_node: str | None, n: int = 4, off: float = 0.2) -> dict[str, dict[int, float]]:
    base = {s: 5.5 - 0.1 * s for s in range(1, 9)}
    out = {f"gpu0{i}": dict(base) for i in range(1, n + 1)}
    if bad_node:
        out[bad_node][6] += off
    return out


def test_rack_comparison_names_the_deviating_node():
    res = compare_rack(_curves("gpu03"), 0.05)
    assert [n for n, c in res.items() if not c.within(0.05)] == ["gpu03"]
    assert res["gpu03"].worst_step == 6 and res["gpu03"].deviation == pytest.approx(0.2)
    assert all(c.within(0.05) for c in compare_rack(_curves(None), 0.05).values())
    # two nodes cannot outvote each other: both are named
    two = compare_rack(_curves("gpu02", n=2), 0.05)
    assert all(not c.within(0.05) for c in two.values())
    assert compare_rack(_curves(None, n=1), 0.05) == {}


def test_controller_rack_verdicts_name_the_node():
    from rackready.decide.fleet import rack_curve_verdicts

    prof = load_profile("xe9680-h200")
    cfg = {"shape": "llama3-8b", "world": "8", "dtype": "bf16", "seq": "8192", "steps": "8",
           "seed": "1234"}

    def node(curve: dict[int, float], seed: str = "1234") -> list[CheckResult]:
        ms = (Measurement("fsdp.run_config", True, "", {**cfg, "seed": seed}),
              *(Measurement("fsdp.loss", v, "", {"step": str(s)}) for s, v in curve.items()))
        return [CheckResult("fsdp_reference", "ok", 1.0, ms)]

    curves = _curves("gpu02", n=3)
    group = {n: node(c) for n, c in curves.items()}
    group["gpu09"] = node(_curves(None, n=1)["gpu01"], seed="99")  # another seed: not compared
    out = rack_curve_verdicts(group, prof)
    fails = {n: v for n, vs in out.items() for v in vs if v["outcome"] == "fail"}
    assert list(fails) == ["gpu02"]
    assert "gpu02" in fails["gpu02"]["message"] and "step 6" in fails["gpu02"]["message"]
    assert fails["gpu02"]["threshold"]["value"] == 0.05  # the profile's golden tolerance
    assert "gpu09" not in out
    # each verdict meets the report schema's verdict: a bare limit once refused every
    # report of a run with two nodes of one profile
    from jsonschema import Draft202012Validator

    from rackready.report.schema import load_schema

    schema = {k: x for k, x in load_schema().items() if k != "oneOf"}
    verdict = Draft202012Validator({**schema, "$ref": "#/$defs/verdict"})
    for v in (v for vs in out.values() for v in vs):
        row = {**v, "labels": {k: str(x) for k, x in v["labels"].items()}}
        assert not [e.message for e in verdict.iter_errors(row)], row
        assert v["threshold"]["metric"] == "fsdp.loss_rack_deviation"
        assert v["threshold"]["provenance"].strip()


def test_one_cuda_rank_trains_as_torchtitan_does_on_one_device():
    # torchtitan shards nothing on one rank (no FSDP, the module under bf16 autocast);
    # more ranks, or the CPU, keep FSDP2
    from types import SimpleNamespace

    from validation.workloads.fsdp_train import single_device_amp

    def d(world, cuda):
        return SimpleNamespace(world=world, is_cuda=cuda)

    amp, fsdp = SimpleNamespace(one_device="amp"), SimpleNamespace(one_device="fsdp")
    assert single_device_amp(d(1, True), amp)  # type: ignore[arg-type]
    assert not single_device_amp(d(1, True), fsdp)  # type: ignore[arg-type]
    assert not single_device_amp(d(2, True), amp)  # type: ignore[arg-type]
    assert not single_device_amp(d(1, False), amp)  # type: ignore[arg-type]
    # the job's default is torchtitan's
    assert single_device_amp(d(1, True), SimpleNamespace())  # type: ignore[arg-type]


def test_the_fused_final_norm_computes_the_formula():
    # one CUDA rank runs the final norm through torch's fused kernel (what torchtitan's
    # nn.RMSNorm does): on fp32 input the same function and gradients as the formula
    from validation.workloads.llama import RMSNorm

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 16, 64, generator=g, requires_grad=True)
    norm = RMSNorm(64, 1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(64, generator=g) + 0.5)
    out = {}
    for fused in (False, True):
        norm.fused = fused
        x.grad = norm.weight.grad = None
        y = norm(x)
        (y * torch.arange(64.0)).sum().backward()
        assert x.grad is not None and norm.weight.grad is not None
        out[fused] = (y.detach(), x.grad.clone(), norm.weight.grad.clone())
    for a, b in zip(out[False], out[True], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert not RMSNorm(64, 1e-5).fused  # the formula unless the job asks (FSDP, the CPU)


def test_the_rotary_tables_are_made_once_per_length():
    # one tensor kept across steps (one large-pool block on CUDA, as torchtitan's
    # freqs_cis), holding exactly what rope_tables makes
    from validation.workloads.llama import SHAPES, Llama, rope_tables

    s = SHAPES["tiny"]
    model = Llama(s)
    cos, sin = model.rope(16, torch.device("cpu"))
    want = rope_tables(s.dim // s.n_heads, 16, s.rope_theta, torch.device("cpu"))
    assert torch.equal(cos, want[0]) and torch.equal(sin, want[1])
    again = model.rope(16, torch.device("cpu"))
    assert again[0].data_ptr() == cos.data_ptr() and again[1].data_ptr() == sin.data_ptr()
    assert cos.untyped_storage().data_ptr() == sin.untyped_storage().data_ptr()
    assert model.rope(8, torch.device("cpu"))[0].shape[0] == 8
