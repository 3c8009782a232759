"""Golden loss curves of the reference job, and step-by-step comparisons (pure, no torch).

One file per model shape, world size and dtype: validation/golden/<shape>.w<world>.<dtype>.json,
holding one curve per job config (the schedule's length makes a 16-step and a
30-step run two curves):

    {"shape": "llama3-8b", "world": 2, "dtype": "bf16", "tolerance": 0.05,
     "provenance": "...",
     "curves": [{"config": {"seq": 8192, "steps": 30, "seed": 1234, "batch": 1, ...},
                 "provenance": "...", "loss": {"1": 12.55, "2": ...}}]}

A run whose config matches no curve has no golden curve, said as such, never
compared. Every step of the curve is compared; the largest |loss - golden| is
the deviation, judged by the profile (fsdp.loss_deviation) against the file's
stated tolerance.

Nodes of a rack, same profile and seed, are also compared with each other,
step by step: each node's curve against the per-step median of the rack.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "golden"
# the job's arguments a curve depends on (everything else: speed only)
CONFIG_KEYS = ("seq", "steps", "seed", "batch", "lr", "warmup", "max_norm", "min_lr_factor")


class GoldenError(ValueError):
    """A golden file that cannot be used (malformed): one line."""


@dataclass(frozen=True)
class Golden:
    shape: str
    world: int
    dtype: str
    config: dict[str, Any]
    tolerance: float
    provenance: str
    loss: dict[int, float]
    path: str = ""


def golden_name(shape: str, world: int, dtype: str = "bf16") -> str:
    return f"{shape}.w{world}.{dtype}.json"


def parse_golden_file(data: Any, path: str = "") -> list[Golden]:
    """Every curve of one golden file."""
    try:
        shape, world, dtype = str(data["shape"]), int(data["world"]), str(data["dtype"])
        tol, prov = float(data["tolerance"]), str(data.get("provenance") or "")
        out = [Golden(shape, world, dtype, dict(c.get("config") or {}), tol,
                      str(c.get("provenance") or prov),
                      {int(k): float(v) for k, v in c["loss"].items()}, path)
               for c in data["curves"]]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise GoldenError(f"golden curve {path or '?'} is malformed: {e}") from None
    for g in out:
        if not g.loss or g.tolerance <= 0 or not g.provenance:
            raise GoldenError(f"golden curve {path or '?'} needs loss points, a tolerance > 0 "
                              "and a provenance")
    return out


def load_golden_file(shape: str, world: int, dtype: str = "bf16",
                     root: Path | None = None) -> list[Golden]:
    path = (root or GOLDEN_DIR) / golden_name(shape, world, dtype)
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise GoldenError(f"golden curve {path} unreadable: {e}") from None
    return parse_golden_file(data, str(path))


def load_golden(shape: str, world: int, config: dict[str, Any], dtype: str = "bf16",
                root: Path | None = None) -> Golden | None:
    """The curve for this shape, world size, dtype and job config; None where none is stored."""
    for g in load_golden_file(shape, world, dtype, root):
        if not config_mismatch(g, config):
            return g
    return None


def add_curve(curves: list[Golden], new: Golden) -> list[Golden]:
    """The file's curves with `new` replacing the one of the same config."""
    key = _config_key(new.config)
    return [g for g in curves if _config_key(g.config) != key] + [new]


def _config_key(config: dict[str, Any]) -> str:
    return json.dumps({k: _norm(v) for k, v in config.items()}, sort_keys=True)


def dump_golden_file(curves: list[Golden]) -> dict[str, Any]:
    g0 = curves[0]
    return {"shape": g0.shape, "world": g0.world, "dtype": g0.dtype,
            "tolerance": g0.tolerance, "provenance": g0.provenance,
            "curves": [{"config": g.config, "provenance": g.provenance,
                        "loss": {str(k): v for k, v in sorted(g.loss.items())}}
                       for g in sorted(curves, key=lambda g: json.dumps(g.config,
                                                                        sort_keys=True))]}


def config_mismatch(golden: Golden, config: dict[str, Any]) -> list[str]:
    """Which of the run's settings differ from the golden run's ('seq 8192 != golden 4096');
    a setting the golden run recorded and the run does not state is a difference too."""
    out = []
    for k in CONFIG_KEYS:
        if k not in golden.config:
            continue
        if k not in config or _norm(config[k]) != _norm(golden.config[k]):
            out.append(f"{k} {config.get(k, '?')} != golden {golden.config[k]}")
    return out


def _norm(v: Any) -> Any:
    try:
        return round(float(v), 12)
    except (TypeError, ValueError):
        return str(v)


@dataclass(frozen=True)
class CurveComparison:
    deviation: float  # largest |loss - reference| over the compared steps (inf: a step missing)
    worst_step: int | None
    missing: list[int] = field(default_factory=list)
    steps: int = 0

    def within(self, tolerance: float) -> bool:
        return not self.missing and self.deviation <= tolerance


def compare_curve(curve: dict[int, float], reference: dict[int, float]) -> CurveComparison:
    """Step by step over every step of the reference."""
    missing = sorted(s for s in reference if s not in curve)
    if missing:
        return CurveComparison(float("inf"), missing[0], missing, len(reference))
    worst, dev = None, 0.0
    for s in sorted(reference):
        d = abs(curve[s] - reference[s])
        if worst is None or d > dev:
            worst, dev = s, d
    return CurveComparison(dev, worst, [], len(reference))


def compare_rack(curves: dict[str, dict[int, float]], tolerance: float
                 ) -> dict[str, CurveComparison]:
    """Each node's curve against the per-step median of all the nodes' curves.

    Steps every node ran are compared; a node missing a step the others ran
    deviates (inf). With two nodes the median is their mean, so a deviation
    names both: two cannot outvote each other."""
    if len(curves) < 2:
        return {}
    steps = set().union(*curves.values())
    common = {s for s in steps if sum(s in c for c in curves.values()) * 2 > len(curves)}
    median = {s: statistics.median(c[s] for c in curves.values() if s in c) for s in common}
    return {node: compare_curve(c, median) for node, c in curves.items()}


def loss_windows(losses: dict[int, float], window: int) -> list[tuple[int, float]]:
    """(last step, mean loss) per full window of `window` steps, in order."""
    steps = sorted(losses)
    out = []
    for i in range(0, len(steps) - window + 1, window):
        chunk = steps[i:i + window]
        out.append((chunk[-1], sum(losses[s] for s in chunk) / window))
    return out


def window_rise(windows: list[tuple[int, float]]) -> float | None:
    """Largest rise of a window's mean over the one before (< 0: every window fell)."""
    if len(windows) < 2:
        return None
    return max(b[1] - a[1] for a, b in zip(windows, windows[1:], strict=False))


def curve_from_measurements(ms: Any) -> dict[int, float]:
    """fsdp.loss measurements (objects or dicts with name/value/labels) -> {step: loss}."""
    out: dict[int, float] = {}
    for m in ms:
        name = m.get("name") if isinstance(m, dict) else getattr(m, "name", None)
        if name != "fsdp.loss":
            continue
        labels = (m.get("labels") if isinstance(m, dict) else m.labels) or {}
        value = m.get("value") if isinstance(m, dict) else m.value
        if value is None:
            continue
        try:
            out[int(labels["step"])] = float(value)
        except (KeyError, TypeError, ValueError):
            continue
    return out


def run_config(ms: Any) -> dict[str, Any]:
    """The job's config from its fsdp.run_config measurement (labels), {} where absent."""
    for m in ms:
        name = m.get("name") if isinstance(m, dict) else getattr(m, "name", None)
        if name == "fsdp.run_config":
            labels = (m.get("labels") if isinstance(m, dict) else m.labels) or {}
            return dict(labels)
    return {}


def golden_deviation(ms: Any, root: Path | None = None) -> tuple[float, dict[str, str]] | None:
    """(fsdp.loss_deviation value, labels) for a reference job's measurements against
    the stored golden curve of its shape, world size, dtype and config; None where no
    curve is stored for that (the check then reports no deviation, never a pass)."""
    cfg = run_config(ms)
    if not cfg.get("shape") or not cfg.get("world"):
        return None
    g = load_golden(str(cfg["shape"]), int(cfg["world"]), cfg, str(cfg.get("dtype", "bf16")),
                    root)
    if g is None:
        return None
    cmp = compare_curve(curve_from_measurements(ms), g.loss)
    labels = {"shape": g.shape, "world": str(g.world), "dtype": g.dtype,
              "steps": ",".join(str(s) for s in sorted(g.loss)),
              "golden": Path(g.path).name, "tolerance": str(g.tolerance)}
    if cmp.worst_step is not None:
        labels["worst_step"] = str(cmp.worst_step)
    return cmp.deviation, labels
