"""Start a worker under torchrun and read its JSON lines back (no torch import here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from validation.model import Measurement
from validation.workloads.common_env import nvls_env


class WorkloadFailed(RuntimeError):
    """The workers exited non-zero or ran past their time."""


def torchrun_cmd(
    module: str, nproc: int, args: list[str], rdzv: list[str] | None = None
) -> list[str]:
    """torchrun for one node (--standalone) unless rendezvous args are given."""
    head = [sys.executable, "-m", "torch.distributed.run"]
    head += rdzv if rdzv else ["--standalone"]
    return [*head, "--nproc-per-node", str(nproc), "-m", f"validation.workloads.{module}", *args]


def read_measurements(out: Path, name: str, artifact: str | None = None) -> list[Measurement]:
    """Every rank's <name>.rank*.jsonl as Measurements, rank order."""
    files = sorted(
        out.glob(f"{name}.rank*.jsonl"), key=lambda p: int(p.name.split(".rank")[1].split(".")[0])
    )
    ms = []
    for f in files:
        for line in f.read_text().splitlines():
            if line.strip():
                ms.append(Measurement.from_dict({**json.loads(line), "artifact": artifact}))
    return ms


def run_workload(
    module: str,
    nproc: int,
    args: list[str],
    out: Path,
    timeout_s: float,
    progress: Callable[[float, float], None] | None = None,
    expect_s: float = 0.0,
    rdzv: list[str] | None = None,
    nvls: bool = False,
) -> tuple[list[Measurement], Path]:
    """Run `module` on nproc processes writing into out; returns its measurements and log.

    nvls: NVLink multicast for NCCL, set explicitly (validation.workloads.common_env)."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / f"{module}.log"
    env = {**os.environ, **nvls_env(nvls), "PYTHONUNBUFFERED": "1"}
    root = str(Path(__file__).resolve().parents[2])  # the bundle root, so -m finds validation
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    cmd = torchrun_cmd(module, nproc, [*args, "--out", str(out)], rdzv)
    t0 = time.monotonic()
    with log.open("w") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            while proc.poll() is None:
                el = time.monotonic() - t0
                if el > timeout_s:
                    os.killpg(proc.pid, 9)
                    proc.wait()
                    raise WorkloadFailed(f"{module} ran past {timeout_s:g} s (log {log.name})")
                if progress and expect_s > 0:
                    progress(min(0.99, el / expect_s), max(0.0, expect_s - el))
                time.sleep(1.0)
        except BaseException:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
            raise
    if proc.returncode != 0:
        lines = log.read_text(errors="replace").splitlines()
        # the worker's own one-line error first, else the last exception line of a worker
        tail = [ln for ln in lines if ln.startswith("error:")] or [
            ln for ln in lines if "Error" in ln and "ChildFailedError" not in ln
        ]
        raise WorkloadFailed(
            f"{module} exited {proc.returncode}: {tail[-1].strip() if tail else 'see ' + log.name}"
        )
    return read_measurements(out, module), log
