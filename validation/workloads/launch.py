"""Start workers under torchrun and read their JSON lines back (no torch import here).

Two ways in: run_workload starts one torchrun for one workload (the CLI path and the
fallback); WorkerGroup starts one torchrun of validation.workloads.group for a whole
validation run and hands it workloads in turn (its docstring holds the file protocol).
Both register their session with validation.procs, so a check that times out kills it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from validation import launch_read, procs
from validation.model import Measurement
from validation.workloads.common_env import nvls_env


class WorkloadFailed(RuntimeError):
    """The workers exited non-zero or ran past their time."""


class WorkloadTimedOut(WorkloadFailed):
    """The workers ran past their deadline and were killed with their whole session."""


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
    launch_map: Path | None = None,
    nccl_env: dict[str, str] | None = None,
) -> tuple[list[Measurement], Path]:
    """Run `module` on nproc processes writing into out; returns its measurements and log.

    nvls: NVLink multicast for NCCL, set explicitly (validation.workloads.common_env);
    launch_map: the node's map (pcie.launch_map's artifact): each rank binds to its GPU,
    NIC and CPUs (validation.workloads.binding); nccl_env: NCCL's fabric settings
    (common_env.roce_env: NCCL_IB_TC, NCCL_IB_GID_INDEX on RoCE), written into the log."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / f"{module}.log"
    env = _env(nvls, launch_map, nccl_env)
    cmd = torchrun_cmd(module, nproc, [*args, "--out", str(out)], rdzv)
    t0 = time.monotonic()
    with log.open("w") as fh:
        fh.write(env_line(nccl_env))
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        procs.register(proc.pid, module)
        try:
            while proc.poll() is None:
                el = time.monotonic() - t0
                if el > timeout_s:
                    procs.kill_group(proc.pid)
                    proc.wait()
                    raise WorkloadTimedOut(f"{module} ran past {timeout_s:g} s (log {log.name})")
                if progress and expect_s > 0:
                    progress(min(0.99, el / expect_s), max(0.0, expect_s - el))
                time.sleep(1.0)
        except BaseException:
            if proc.poll() is None:
                procs.kill_group(proc.pid)
            raise
        finally:
            procs.unregister(proc.pid)
    if proc.returncode != 0:
        raise WorkloadFailed(f"{module} exited {proc.returncode}: {_why(log)}")
    return read_measurements(out, module), log


def env_line(nccl_env: dict[str, str] | None) -> str:
    """The log's record of the NCCL fabric settings the workload was given."""
    return "# nccl env: " + (" ".join(f"{k}={v}" for k, v in sorted((nccl_env or {}).items()))
                             or "(none set)") + "\n"


def _env(nvls: bool, launch_map: Path | None = None,
         nccl_env: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, **nvls_env(nvls), **(nccl_env or {}), "PYTHONUNBUFFERED": "1"}
    env.pop(launch_read.ENV, None)  # only the map this run measured, never an inherited one
    if launch_map is not None:
        env[launch_read.ENV] = str(launch_map)
    root = str(Path(__file__).resolve().parents[2])  # the bundle root, so -m finds validation
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def _why(log: Path) -> str:
    """The worker's own one-line error first, else the last exception line of a worker."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    tail = [ln for ln in lines if ln.startswith("error:")] or [
        ln for ln in lines if "Error" in ln and "ChildFailedError" not in ln
    ]
    return tail[-1].strip() if tail else "see " + log.name


class WorkerGroup:
    """One torchrun of validation.workloads.group, fed workloads in turn (its docstring has
    the protocol). A workload past its deadline kills the whole group's session; the group
    then stays dead and every later workload raises procs.NotRun naming the check that hung.
    A workload that fails ends the group too (its ranks may be out of step), but that is a
    failure, not a hang: the next workload starts a fresh group."""

    def __init__(self, nproc: int, device: str, workdir: Path, nvls: bool = False,
                 launch_map: Path | None = None, nccl_env: dict[str, str] | None = None
                 ) -> None:
        self.nproc, self.device, self.nvls = nproc, device, nvls
        self.nccl_env = dict(nccl_env or {})  # common_env.roce_env: set in every rank
        self.launch_map = launch_map  # each rank binds to it once, at the group's start
        self.workdir = workdir
        self.killed_after: str | None = None
        self.launches = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctl = workdir / "ctl"
        self._seq = 0
        self._log = workdir / "group.log"

    def matches(self, nproc: int, device: str, nvls: bool,
                nccl_env: dict[str, str] | None = None) -> bool:
        return (nproc, device, nvls, dict(nccl_env or {})) == (
            self.nproc, self.device, self.nvls, self.nccl_env)

    def _start(self) -> subprocess.Popen[bytes]:
        self.launches += 1
        self._ctl = self.workdir / f"ctl.{self.launches}"
        self._ctl.mkdir(parents=True, exist_ok=True)
        self._seq = 0
        cmd = torchrun_cmd("group", self.nproc, ["--ctl", str(self._ctl), "--device", self.device,
                                                 "--controller-pid", str(os.getpid())])
        fh = self._log.open("a")
        fh.write(env_line(self.nccl_env))
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                env=_env(self.nvls, self.launch_map, self.nccl_env),
                                start_new_session=True)
        fh.close()
        procs.register(proc.pid, "worker group", on_kill=self._killed)
        return proc

    def _killed(self, why: str) -> None:
        self.killed_after = why

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def run(
        self,
        module: str,
        args: list[str],
        out: Path,
        timeout_s: float,
        progress: Callable[[float, float], None] | None = None,
        expect_s: float = 0.0,
        label: str = "",
    ) -> tuple[list[Measurement], Path]:
        """As run_workload, in the group; `label` (the check) names a hang in later errors."""
        if self.killed_after:
            raise procs.NotRun(f"not run: worker group killed after {self.killed_after}")
        out.mkdir(parents=True, exist_ok=True)
        log = out / f"{module}.log"
        log.write_text(f"$ worker group job: {module} {' '.join([*args, '--out', str(out)])}\n")
        t0 = time.monotonic()
        if not self.alive():
            self._proc = self._start()
        proc = self._proc
        assert proc is not None
        self._seq += 1
        seq = self._seq
        job = {"seq": seq, "module": module, "argv": [*args, "--out", str(out)], "log": str(log)}
        tmp = self._ctl / f"job-{seq}.json.tmp"
        tmp.write_text(json.dumps(job))
        tmp.replace(self._ctl / f"job-{seq}.json")
        while True:
            done = self._done(seq)
            if len(done) == self.nproc or any(d.get("status") != "ok" for d in done):
                break
            if proc.poll() is not None:
                time.sleep(0.2)  # a rank's done file may land just after torchrun ends
                done = self._done(seq)
                break
            el = time.monotonic() - t0
            if el > timeout_s:
                self.kill(f"{label or module} timed out")
                raise WorkloadTimedOut(f"{module} ran past {timeout_s:g} s in the worker group; "
                                     f"the group was killed (log {log.name})")
            if progress and expect_s > 0:
                progress(min(0.99, el / expect_s), max(0.0, expect_s - el))
            time.sleep(0.1)
        bad = [d for d in done if d.get("status") != "ok"]
        if bad or len(done) < self.nproc:
            if proc.poll() is None:  # a failed rank exits; make sure the rest go too
                procs.kill_group(proc.pid)
            proc.wait()
            if bad:
                raise WorkloadFailed(f"{module} exited {bad[0].get('rc')} in the worker group: "
                                     f"{bad[0].get('message') or _why(log)}")
            raise WorkloadFailed(f"{module}: the worker group exited {proc.returncode} "
                                 f"({_why(log)}; group log {self._log})")
        return read_measurements(out, module), log

    def _done(self, seq: int) -> list[dict]:
        found = []
        for f in self._ctl.glob(f"done-{seq}.rank*.json"):
            try:
                found.append(json.loads(f.read_text()))
            except (OSError, ValueError):
                continue  # written by rename: only a vanished file gets here
        return found

    def pg_inits(self, seq: int | None = None) -> list[int]:
        """init_process_group calls per rank as of job seq (default the last): 1 each when
        the group formed once."""
        return [int(d.get("pg_inits", -1)) for d in self._done(seq or self._seq)]

    def kill(self, why: str) -> None:
        self.killed_after = why
        if self._proc is not None:
            procs.kill_group(self._proc.pid)
            self._proc.wait()

    def close(self, wait_s: float = 30.0) -> None:
        """Ask the group to stop; kill it if it does not go within wait_s."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            if proc is not None:
                procs.unregister(proc.pid)
            return
        self._seq += 1
        tmp = self._ctl / f"job-{self._seq}.json.tmp"
        tmp.write_text(json.dumps({"seq": self._seq, "stop": True}))
        tmp.replace(self._ctl / f"job-{self._seq}.json")
        try:
            proc.wait(wait_s)
            procs.unregister(proc.pid)
        except subprocess.TimeoutExpired:
            procs.kill_group(proc.pid)
            proc.wait()
