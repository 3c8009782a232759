"""A long-lived worker group: started once under torchrun, it runs workloads in turn.

One process per GPU forms the process group (and CUDA context, NCCL communicator) once;
the controller (launch.WorkerGroup, in the runner) then hands it jobs through files in
--ctl, so a validation run pays torchrun's launch and NCCL's init once instead of per check:

    <ctl>/job-<seq>.json            {"seq", "module", "argv": [...], "log"} or {"seq", "stop": true}
                                    written atomically by the controller, read by every rank
    <ctl>/done-<seq>.rank<r>.json   {"status": "ok"|"error", "rc", "message", "pg_inits",
                                    "elapsed_s"} written atomically by each rank

Every rank polls for the next job itself (one node, one file system): no collective waits
while the controller runs other checks, so NCCL's idle timeout never fires between jobs.
Each rank calls the workload's own main(argv) in-process; common.init reuses the group and
common.finish leaves it standing. A workload that fails on a rank ends that rank (its done
file says why) and torchrun ends the rest: the controller starts a fresh group for the next
job. Deadlines are the controller's: it kills the group's session when one passes.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from validation.workloads import common

POLL_S = 0.05


def _write_json(path: Path, rec: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(rec))
    tmp.replace(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _next_job(ctl: Path, seq: int, controller: int) -> dict[str, Any] | None:
    """The job numbered seq, once it appears; None when the controller is gone."""
    path = ctl / f"job-{seq}.json"
    while not path.exists():
        if controller and not _alive(controller):
            return None
        time.sleep(POLL_S)
    return dict(json.loads(path.read_text()))


def _module(name: str) -> Any:
    # a bare name is one of ours; a dotted one is taken as given (tests' own workloads)
    return importlib.import_module(name if "." in name else f"validation.workloads.{name}")


class _Redirect:
    """fd 1 and 2 of this rank into the job's log for the job's length (appending: the
    ranks share it, as torchrun's workers share one log on the single-launch path)."""

    def __init__(self, log: str | None) -> None:
        self.log = log
        self.saved: list[int] = []

    def __enter__(self) -> None:
        if not self.log:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.saved = [os.dup(1), os.dup(2)]
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)

    def __exit__(self, *exc: object) -> None:
        if not self.saved:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in self.saved:
            os.close(fd)


def _run_job(job: dict[str, Any]) -> tuple[int, str]:
    """The workload's exit code and one line of why it failed ('' when it did not)."""
    try:
        return common.run_main(_module(str(job["module"])).main, [str(a) for a in job["argv"]]), ""
    except SystemExit as e:  # argparse's own exit on a bad flag
        return (e.code if isinstance(e.code, int) else 2), ""
    except Exception as e:
        import traceback

        traceback.print_exc()
        return 1, f"{type(e).__name__}: {e}"


def _between_jobs(affinity: set[int] | None, deterministic: bool) -> None:
    """What one workload leaves in the process and the next must not inherit."""
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()  # each job reports its own peak
    if affinity is not None:
        os.sched_setaffinity(0, affinity)  # transfers binds to its GPU's NUMA node
    torch.use_deterministic_algorithms(deterministic)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ctl", required=True, type=Path, help="job and done files")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--controller-pid", type=int, default=0, help="exit when this pid is gone")
    a = p.parse_args(argv)
    d = common.init(a.device)
    common.adopt_group()
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    deterministic = torch.are_deterministic_algorithms_enabled()
    environ = dict(os.environ)
    seq = 1
    while True:
        job = _next_job(a.ctl, seq, a.controller_pid)
        if job is None or job.get("stop"):
            break
        t0 = time.monotonic()
        with _Redirect(job.get("log")):
            rc, why = _run_job(job)
        os.environ.clear()
        os.environ.update(environ)  # a workload's setdefault stays its own
        _between_jobs(affinity, deterministic)
        _write_json(a.ctl / f"done-{seq}.rank{d.rank}.json", {
            "status": "ok" if rc == 0 else "error", "rc": rc, "message": why,
            "pg_inits": common.pg_inits, "elapsed_s": round(time.monotonic() - t0, 3)})
        if rc != 0:
            # peers may be stuck in a collective with this rank: end here, torchrun
            # ends them, and the controller starts a fresh group for the next job
            sys.stdout.flush()
            os._exit(1)
        seq += 1
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    common.exit_process(main())
