"""Wall-time budgets per level (validation/budgets.yml) and the check timeouts derived from them.

A check's timeout is its share times a factor plus a margin, and never shorter than what
its workload plans to take (a planner registered by the workload's check, e.g. the burn-in's
duration, which a site may lengthen) plus the margin: one number decides both, so the check
is never abandoned while its workload is still on plan.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

PATH = Path(__file__).with_name("budgets.yml")

# check name -> seconds its workload plans to take in this context (level, site overrides)
_PLANNERS: dict[str, Callable[[Any], float]] = {}


def planner(check: str) -> Callable[[Callable[[Any], float]], Callable[[Any], float]]:
    def register(fn: Callable[[Any], float]) -> Callable[[Any], float]:
        _PLANNERS[check] = fn
        return fn

    return register


def planned_s(ctx: Any, check: str) -> float | None:
    fn = _PLANNERS.get(check)
    return None if fn is None else float(fn(ctx))


@lru_cache(maxsize=4)
def load(path: Path = PATH) -> dict[str, Any]:
    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict) or not isinstance(raw.get("levels"), dict):
        raise ValueError(f"{path}: needs a 'levels' mapping")
    return raw


def _by_gpus(value: Any, gpus: int) -> float:
    """A number, or {gpu count: number}: the first count >= gpus, else the largest."""
    if not isinstance(value, dict):
        return float(value)
    counts = sorted(int(k) for k in value)
    pick = next((c for c in counts if c >= gpus), counts[-1])
    return float(value[pick] if pick in value else value[str(pick)])


def level_budget_s(level: str, gpus: int, raw: dict[str, Any] | None = None) -> float:
    return _by_gpus((raw or load())["levels"][level]["budget_s"], gpus)


def share_s(level: str, check: str, gpus: int, raw: dict[str, Any] | None = None) -> float | None:
    checks = ((raw or load())["levels"].get(level) or {}).get("checks") or {}
    return None if check not in checks else _by_gpus(checks[check], gpus)


def timeout_s(level: str, check: str, gpus: int, planned: float | None = None,
              simulated: bool = False, raw: dict[str, Any] | None = None) -> float | None:
    """The check's timeout at this level and GPU count; None when the level gives it no
    share (a check run with --only outside its levels keeps its registered timeout)."""
    raw = raw or load()
    share = share_s(level, check, gpus, raw)
    if share is None:
        return None
    t = raw["timeout"]
    out = max(share * float(t["factor"]), planned or 0.0) + float(t["margin_s"])
    return out * (float(t.get("simulated_factor", 1)) if simulated else 1.0)


def problems(levels: dict[str, list[str]], gpu_counts: tuple[int, ...] = (2, 8),
             raw: dict[str, Any] | None = None) -> list[str]:
    """What is wrong with the budgets for these {level: [check names]}: a check without a
    share, a share for no such check, shares that add up to more than the level's budget."""
    raw = raw or load()
    out = []
    for level, names in levels.items():
        spec = raw["levels"].get(level)
        if spec is None:
            out.append(f"level {level}: no budget")
            continue
        shares = spec.get("checks") or {}
        out += [f"{level}: {n} has no share" for n in names if n not in shares]
        out += [f"{level}: share for unknown check {n}" for n in shares if n not in names]
        for g in gpu_counts:
            total = sum(_by_gpus(v, g) for v in shares.values())
            budget = level_budget_s(level, g, raw)
            if total > budget:
                out.append(f"{level} on {g} GPUs: shares add up to {total:g} s, "
                           f"over the budget of {budget:g} s")
    return out
