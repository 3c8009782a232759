"""The burn-in's headroom to the driver's slowdown temperature (gemm.slowdown_margin_c):
emitted from NVML's slowdown threshold and the hottest interval, judged by the profile;
absent where NVML gives no threshold (never a made-up number)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from validation.judge import judge
from validation.model import CheckResult, Measurement
from validation.profile import load_profile
from validation.workloads.gemm_burnin import _report


class Sink:
    def __init__(self) -> None:
        self.out: list[tuple[str, Any, dict[str, Any]]] = []

    def emit(self, name: str, value: Any, unit: str, **labels: Any) -> None:
        self.out.append((name, value, labels))


def _records(temps: list[int]) -> list[dict[str, Any]]:
    return [{"dtype": "bf16", "segment": 0, "i": i, "t_s": float(i), "dur_s": 1.0,
             "tflops": 650.0, "steady": i > 0, "sdc_screens": 0, "sdc_repeat_bad": 0,
             "power_w": 690.0, "power_limit_w": 700.0, "reasons": 4, "sm_mhz": 1420,
             "temp_c": t} for i, t in enumerate(temps)]


def _margins(slowdown: float | None, temps: list[int]) -> list[tuple[Any, dict[str, Any]]]:
    sampler = SimpleNamespace(available=True, power_limit_w=700.0, slowdown_c=slowdown)
    sink = Sink()
    _report(sink, sampler, 0, "bf16", 16384, _records(temps))  # type: ignore[arg-type]
    return [(v, labels) for name, v, labels in sink.out if name == "gemm.slowdown_margin_c"]


def test_the_margin_is_the_slowdown_temperature_less_the_hottest_interval():
    assert _margins(85.0, [41, 58, 63, 61]) == [(22.0, {"gpu": 0, "dtype": "bf16"})]


def test_no_threshold_from_nvml_means_no_margin():
    assert _margins(None, [41, 58]) == []


def test_a_gpu_running_near_its_slowdown_fails_the_profile():
    def verdict(margin: float) -> str:
        check = CheckResult(check="gemm_burnin", status="ok", duration_s=1.0, measurements=(
            Measurement("gemm.slowdown_margin_c", margin, "C", {"gpu": "0", "dtype": "bf16"}),))
        (v,) = [v for v in judge([check], load_profile("xe9680-h200"))
                if v.metric == "gemm.slowdown_margin_c"]
        return v.outcome
    assert verdict(22.0) == "pass" and verdict(3.0) == "fail"
