"""The node report's figures by kind: one row per metric and unit, standing for every
judged verdict of it (the weakest, how many, the worst component).

Decided here once and carried in the report document ("figures_by_kind"); the
renderers only format it. The weakest row is a failing one if any (then one below
expected), else the one with the least room inside its limit: against a floor the
lowest, against a ceiling the highest, as a fraction of each row's own limit, so rows
under different limits (one per message size) compare. The group's outcome is the
worst of its rows. Its component is the judge's words for that row, copied.
"""

from __future__ import annotations

from typing import Any

# worst first; not_applicable rows are no figure (Appendix B counts them)
OUTCOME_ORDER = ("fail", "below_expected", "pass")
FLOOR_OPS = (">=", ">")
CEILING_OPS = ("<=", "<")


def direction(threshold: dict[str, Any] | None) -> str:
    """floor (higher is better), ceiling (lower is better) or match (==, in, ...)."""
    op = (threshold or {}).get("op")
    return "floor" if op in FLOOR_OPS else "ceiling" if op in CEILING_OPS else "match"


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def room(verdict: dict[str, Any]) -> float | None:
    """How far inside its limit a row is (negative: outside), relative to the limit; the
    plain difference against a limit of 0 (an error count under a ceiling of 0). None
    where there is no order: an equality, a value or limit that is not a number."""
    t = verdict.get("threshold") or {}
    value, limit = _number(verdict.get("value")), _number(t.get("value"))
    way = direction(t)
    if value is None or limit is None or way == "match":
        return None
    inside = value - limit if way == "floor" else limit - value
    return inside / abs(limit) if limit else inside


def _weakness(verdict: dict[str, Any]) -> tuple[int, int, float]:
    r = room(verdict)
    # rows without an order come after those with one: the first of them stands
    return (OUTCOME_ORDER.index(verdict["outcome"]), r is None, r if r is not None else 0.0)


def _varies(rows: list[dict[str, Any]]) -> list[str]:
    """The label keys whose values differ between rows (a GPU, a message size): what
    tells the weakest apart from the others, for the wording."""
    labels = [v.get("labels") or {} for v in rows]
    keys = {k for lb in labels for k in lb}
    return sorted(k for k in keys if len({lb.get(k) for lb in labels}) > 1)


def figures_by_kind(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The report's verdict rows (document._verdict_rows) grouped by metric and unit,
    in the order each kind first appears (the checks' order)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for v in verdicts:
        if v["outcome"] in OUTCOME_ORDER:
            groups.setdefault((v["metric"], v.get("unit") or ""), []).append(v)
    out = []
    for (metric, unit), rows in groups.items():
        weakest = min(rows, key=_weakness)  # the first of equals: min is stable
        out.append({
            "metric": metric, "unit": unit, "outcome": weakest["outcome"], "rows": len(rows),
            "counts": {k: sum(1 for v in rows if v["outcome"] == k) for k in OUTCOME_ORDER},
            "direction": direction(weakest.get("threshold")),
            "varies": _varies(rows),
            "weakest": {k: weakest.get(k) for k in ("check", "value", "labels", "threshold",
                                                     "component", "scope")},
        })
    return out
