"""NVML sampling in a thread beside a workload (optional: pynvml may be absent).

Samples power, SM clock, temperature and clock event reasons of one GPU.
On CPU, or without pynvml, Sampler.available is False and the caller says so
instead of emitting numbers it never read.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sample:
    t: float  # time.monotonic()
    power_w: float
    sm_mhz: int
    temp_c: int
    reasons: int  # clock event reasons bitmask (NVML)


@dataclass
class Sampler:
    gpu_uuid: str | None
    index: int
    period_s: float = 0.2
    samples: list[Sample] = field(default_factory=list)
    power_limit_w: float | None = None
    # the temperature at which the driver slows the GPU (NVML's slowdown threshold)
    slowdown_c: float | None = None
    available: bool = False
    why_unavailable: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _nvml: Any = None
    _h: Any = None

    def start(self) -> Sampler:
        try:
            import pynvml  # nvidia-ml-py

            pynvml.nvmlInit()
            h = None
            if self.gpu_uuid:
                try:
                    h = pynvml.nvmlDeviceGetHandleByUUID(self.gpu_uuid)
                except pynvml.NVMLError:
                    h = None
            if h is None:
                h = pynvml.nvmlDeviceGetHandleByIndex(self.index)
            self._nvml, self._h = pynvml, h
            self.power_limit_w = pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
            try:
                self.slowdown_c = float(pynvml.nvmlDeviceGetTemperatureThreshold(
                    h, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN))
            except Exception:  # not reported (or an older NVML): the margin is not measured
                self.slowdown_c = None
            self._read()  # fail here, not in the thread
        except Exception as e:  # no pynvml, no driver, no permission
            self.why_unavailable = f"NVML unavailable: {e}"
            return self
        self.available = True
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> Sample:
        n, h = self._nvml, self._h
        get_reasons = (
            getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or n.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        return Sample(
            t=time.monotonic(),
            power_w=n.nvmlDeviceGetPowerUsage(h) / 1000.0,
            sm_mhz=n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
            temp_c=n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
            reasons=int(get_reasons(h)),
        )

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.samples.append(self._read())
            except Exception:  # one failed read must not end the burn-in
                continue

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        return self.samples


def window(samples: list[Sample], t0: float, t1: float) -> list[Sample]:
    return [s for s in samples if t0 <= s.t < t1]


def gpu_uuid(index: int) -> str | None:
    """NVML-style UUID of a torch device, so the sampler watches the same GPU."""
    try:
        import torch

        u = str(torch.cuda.get_device_properties(index).uuid)
        return u if u.startswith("GPU-") else f"GPU-{u}"
    except Exception:
        return None
