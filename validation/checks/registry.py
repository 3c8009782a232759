"""The check registry: what each check needs, and the context it runs in.

A check is a function `fn(ctx) -> Iterable[Measurement]` registered with
@check. It measures and never decides: the judge compares its measurements
with the profile. A check that cannot run on this node raises CheckSkipped;
whether that fails the node is the judge's call (it does when the profile
requires what the check needs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from validation.model import Measurement

NEEDS = (
    "gpu", "nvswitch", "nvlink", "ib", "roce", "rdma", "nvme", "raid", "torch",
    "nccl-tests", "fio", "multi-gpu", "dcgm", "fabric-manager",
    "bmc",  # out of band: the controller reads the BMC (rackready/steps/oob.py), no node check
    # the whole physical host (its SMBIOS DIMM table, every memory
    # channel), not a VM slice of it: DIMM inventory and memory bandwidth
    "bare-metal",
)
LEVELS = ("quick", "standard", "burnin")

CheckFn = Callable[["Context"], Iterable[Measurement]]


class CheckSkipped(Exception):
    """The node lacks what the check needs; the message says what."""


class CommandFailed(RuntimeError):
    """A probe command exited non-zero or ran past its timeout."""


@dataclass(frozen=True)
class CheckSpec:
    name: str
    fn: CheckFn
    needs: tuple[str, ...]
    levels: tuple[str, ...]
    timeout_s: float
    title: str
    # the metrics it measures: a threshold on one of them that the check, having run, did
    # not emit fails the node as "not measured" (validation.judge), unless a probe fact
    # the profile names explains it
    emits: tuple[str, ...] = ()
    # needs of one metric beyond the check's own (health.delta's SXid counter needs an
    # NVSwitch): where the profile does not require them the metric is not applicable
    metric_needs: dict[str, tuple[str, ...]] = field(default_factory=dict)


_REGISTRY: dict[str, CheckSpec] = {}


def check(
    name: str,
    *,
    needs: tuple[str, ...] = (),
    levels: tuple[str, ...] = LEVELS,
    timeout_s: float = 120,
    title: str = "",
    emits: Iterable[str] = (),
    metric_needs: dict[str, tuple[str, ...]] | None = None,
) -> Callable[[CheckFn], CheckFn]:
    unknown = set(needs) - set(NEEDS)
    unknown |= {n for ns in (metric_needs or {}).values() for n in ns} - set(NEEDS)
    if unknown:
        raise ValueError(f"check {name}: unknown needs {sorted(unknown)}")
    emits = tuple(emits)
    _known_metrics(name, (*emits, *(metric_needs or {})))
    bad_levels = set(levels) - set(LEVELS)
    if bad_levels:
        raise ValueError(f"check {name}: unknown levels {sorted(bad_levels)}")

    def register(fn: CheckFn) -> CheckFn:
        if name in _REGISTRY and _REGISTRY[name].fn is not fn:
            raise ValueError(f"check {name} registered twice")
        doc = (fn.__doc__ or "").strip().splitlines()
        _REGISTRY[name] = CheckSpec(name, fn, tuple(needs), tuple(levels), float(timeout_s),
                                    title or (doc[0] if doc else name), emits,
                                    dict(metric_needs or {}))
        return fn

    return register


def _known_metrics(where: str, names: Iterable[str]) -> None:
    from validation import metrics  # the registry of names; imports nothing of the checks

    unknown = sorted(set(names) - set(metrics.METRICS))
    if unknown:
        raise ValueError(f"check {where}: emits unknown metrics {unknown}")


def family(prefix: str) -> tuple[str, ...]:
    """Every registered metric whose name starts with prefix (a workload's own metrics)."""
    from validation import metrics

    return tuple(n for n in metrics.METRICS if n.startswith(prefix))


def registered() -> dict[str, CheckSpec]:
    """The checks registered so far, in registration order (validation.checks.catalog
    imports every check module first: the registry itself imports none of them)."""
    return dict(_REGISTRY)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class Context:
    profile: Any  # validation.profile.Profile
    level: str
    sysroot: Path = Path("/")
    out: Path = Path(".")
    site: dict[str, Any] = field(default_factory=dict)
    # set by the runner: where events go and which check is running
    stream: list[TextIO] = field(default_factory=list)
    current_check: str = ""
    # probe outputs shared by several checks in one pass (nvidia-smi -q -x)
    cache: dict[str, Any] = field(default_factory=dict)
    # when the run began (UTC; the runner sets the run's own start, a resumed run its first
    # start): what a log logged since then happened during the run, earlier lines are history
    started: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    def emit(self, event: dict[str, Any]) -> None:
        line = json.dumps({"event": event.pop("event"), "ts": _now(), **event})
        for fh in self.stream:
            fh.write(line + "\n")
            fh.flush()

    def progress(self, fraction: float, eta_s: float | None, label: str = "") -> None:
        self.emit({"event": "progress", "check": self.current_check,
                   "fraction": max(0.0, min(1.0, float(fraction))), "eta_s": eta_s,
                   "label": label})

    @property
    def artifacts(self) -> Path:
        return self.out / "artifacts"

    def run(self, cmd: list[str], timeout_s: float = 60, artifact: str | None = None,
            ok_codes: tuple[int, ...] = (0,)) -> str:
        """Run a probe command and return its stdout; a missing tool skips the check."""
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                  check=False, env={**os.environ, "LC_ALL": "C"})
        except FileNotFoundError:
            raise CheckSkipped(f"{cmd[0]} not found on this node") from None
        except subprocess.TimeoutExpired:
            raise CommandFailed(f"{' '.join(cmd)} ran past {timeout_s:g} s") from None
        if artifact:
            self.artifacts.mkdir(parents=True, exist_ok=True)
            (self.artifacts / artifact).write_text(proc.stdout)
        if proc.returncode not in ok_codes:
            err = (proc.stderr or proc.stdout).strip().splitlines()
            raise CommandFailed(
                f"{' '.join(cmd)} exited {proc.returncode}: {err[-1] if err else 'no output'}"
            )
        return proc.stdout

    def once(self, key: str, make: Callable[[], Any]) -> Any:
        """Compute a probe result once per pass; failures are not cached."""
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]

    def path(self, path: str) -> Path:
        return self.sysroot / path.lstrip("/")

    def read(self, path: str) -> str:
        """Read a file under the sysroot; a missing file raises FileNotFoundError."""
        return self.path(path).read_text(errors="replace")

    def exists(self, path: str) -> bool:
        return self.path(path).exists()


def log(msg: str) -> None:
    print(msg, file=sys.stderr)
