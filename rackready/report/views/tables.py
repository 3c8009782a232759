"""The verdict and measurement tables of a node report: failures, key figures, the
appendix of every check (pure functions of a report document)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rackready.report import naming
from rackready.report.views.page import References, _gpu_sort, _num

# Key figures: metric prefixes that measure performance, in the order a reader scans them.
KEY_PREFIXES = ("gemm.tflops", "gemm.power_fraction", "hbm.bandwidth", "nccl.busbw",
                "nccl.pair_busbw", "p2p.", "host.", "fsdp.", "storage.")


def failures(doc: dict[str, Any], refs: References,
             outcome: str = "fail") -> list[dict[str, Any]]:
    """The verdicts of one outcome (fail, or below_expected) as the report lists them."""
    out = []
    for v in doc.get("verdicts", []):
        if v.get("outcome") != outcome:
            continue
        out.append({
            "check": v["check"], "metric": v["metric"], "name": naming.metric_name(v["metric"]),
            "qualifier": naming.qualifier(v.get("labels") or {}),
            "component": v.get("component") or "", "fleet": v.get("scope") == "fleet",
            "measured": naming.value_text(v.get("value"), v.get("unit", "")),
            "required": naming.threshold_text(v.get("threshold")),
            "message": v.get("message", ""),
            "remediation": v.get("remediation") or "no hint recorded; escalate with this report",
            "ref": refs.cite(v.get("threshold")),
            "margin": (naming.margin(v.get("value"), v.get("threshold")) or (None, ""))[1],
        })
    return out


# Labels a verdict's component words already name (validation.judge.component): a key
# figure's place is those words, and only its other labels are added to them.
PART_KEYS = naming.DEVICE_KEYS | {
    "dimm", "edac", "empty_slots", "mce_at", "netdev", "bridge", "array", "token", "module",
    "priority", "dscp", "param", "psu", "fan", "sensor", "bios", "log", "entry", "cable",
    "node", "component", "item"}
# the details in brackets of those words (a serial, a PCI address)
BRACKETS = re.compile(r" \([^()]*\)")


def _is_key(metric: str) -> bool:
    return metric.startswith(KEY_PREFIXES)


def _how_many(kind: dict[str, Any]) -> str:
    """'32', '2 of 32 fail', '1 of 8 below expected'."""
    n, counts = kind["rows"], kind["counts"]
    if counts.get("fail"):
        return f"{counts['fail']} of {n} fail"
    if counts.get("below_expected"):
        return f"{counts['below_expected']} of {n} below expected"
    return str(n)


def key_figures(doc: dict[str, Any], refs: References) -> list[dict[str, Any]]:
    """The key kinds of figure (KEY_PREFIXES), one row per metric and unit as the document
    groups them (rackready.report.kinds): how many, the weakest and where, its margin.

    The weakest row, its component and the group's outcome are the document's; this
    only picks the kinds a reader scans first and words them.
    """
    rank = {p: i for i, p in enumerate(KEY_PREFIXES)}
    kinds = [k for k in doc.get("figures_by_kind") or [] if _is_key(k["metric"])]
    kinds.sort(key=lambda k: next(i for p, i in rank.items() if k["metric"].startswith(p)))
    rows = []
    for k in kinds:
        w = k["weakest"]
        t = w.get("threshold")
        margin = naming.margin(w.get("value"), t)
        labels = w.get("labels") or {}
        # the judge's words for the part less their details (page 1's identity and the
        # failures give them); a GPU pair (src, dst) is "node" in those words
        part = (naming.short_place(labels) if w.get("component") in ("", "node", None)
                else BRACKETS.sub("", w["component"]))
        variant = naming.qualifier({key: x for key, x in labels.items()
                                    if key in k["varies"] and key not in PART_KEYS})
        where = " · ".join(x for x in (part, variant) if x) or ("node" if k["rows"] > 1 else "")
        rows.append({
            "name": naming.metric_name(k["metric"]), "metric": k["metric"],
            "how_many": _how_many(k), "n": k["rows"], "where": where,
            "measured": naming.value_text(w.get("value"), k["unit"]),
            "limit": naming.threshold_text(t, mark=False),
            "tier": naming.tier_symbol(t),
            "margin": margin[1] if margin else "",
            "frac": margin[0] if margin else None,
            "outcome": k["outcome"], "ref": refs.cite(t),
        })
    return rows


@dataclass
class Row:
    outcome: str
    metric: str
    qualifier: str
    where: str
    measured: str
    limit: str
    ref: int | None
    count: int = 1


@dataclass
class CheckGroup:
    check: str
    status: str
    duration_s: float | None
    counts: dict[str, int]
    rows: list[Row] = field(default_factory=list)
    not_applicable: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""


def _where_many(rows: list[dict[str, Any]], inv: dict[str, Any]) -> str:
    """'GPU 0, 1 · 36 links' for rows collapsed across devices."""
    labels = [r.get("labels") or {} for r in rows]
    gpus_ = sorted({lb["gpu"] for lb in labels if "gpu" in lb}, key=_gpu_sort)
    parts = [f"GPU {', '.join(gpus_)}"] if gpus_ else []
    for key in ("link", "port", "nic", "nvme", "nvswitch", "src"):
        n = sum(1 for lb in labels if key in lb)
        if n:
            parts.append(f"{n} {'pairs' if key == 'src' else key + 's'}")
    if parts:
        return " · ".join(parts)
    # No device named: say what differs between the rows (e.g. the source of a reading).
    keys = sorted({k for lb in labels for k in lb if len({x.get(k) for x in labels}) > 1})
    return " · ".join(f"{k} {', '.join(sorted({x.get(k, '') for x in labels}))}"
                      for k in keys[:2]) or f"{len(rows)} rows"


def _value_range(rows: list[dict[str, Any]]) -> str:
    """'671.6 TFLOP/s', 'all 0', or '671.6–674.2 TFLOP/s' for rows of one metric."""
    unit = rows[0].get("unit", "")
    values = [r.get("value") for r in rows]
    if len(rows) == 1:
        return naming.value_text(values[0], unit)
    if len({repr(x) for x in values}) == 1:
        return "all " + naming.value_text(values[0], unit)
    nums = [_num(x) for x in values]
    if all(x is not None for x in nums):
        lo, hi = min(nums), max(nums)  # type: ignore[type-var]
        return f"{naming.value_text(lo)}–{naming.value_text(hi, unit)}"
    return f"{len({repr(x) for x in values})} values"


def _na_reason(v: dict[str, Any], checks: dict[str, dict[str, Any]]) -> str:
    """Why a row was not applicable, in one phrase that many rows can share."""
    c = checks.get(v["check"]) or {}
    if c.get("status") == "skipped" and c.get("message"):
        return naming.clean(c["message"])
    msg = naming.clean(v.get("message") or "")
    for prefix in (v["metric"], "not applicable:"):
        msg = msg.removeprefix(prefix).strip()
    return msg or "not applicable"


def appendix(doc: dict[str, Any], refs: References) -> dict[str, Any]:
    """Verdicts by check (identical passing rows collapsed), N/A rows as counts with reasons."""
    inv = doc.get("inventory") or {}
    checks = {c["check"]: c for c in doc.get("checks", [])}
    by_check: dict[str, list[dict[str, Any]]] = {}
    for v in doc.get("verdicts", []):
        by_check.setdefault(v["check"], []).append(v)
    names = [c for c in checks if c in by_check] + [c for c in by_check if c not in checks]
    groups: list[CheckGroup] = []
    na: dict[str, list[str]] = {}
    for name in names:
        vs = by_check[name]
        c = checks.get(name, {})
        counts = {k: sum(1 for v in vs if v["outcome"] == k)
                  for k in ("fail", "pass", "not_applicable")}
        g = CheckGroup(name, c.get("status", "judged"), c.get("duration_s"), counts,
                       message=naming.clean(c.get("message") or ""))
        merged: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for v in vs:
            if v["outcome"] == "not_applicable":
                na.setdefault(_na_reason(v, checks), []).append(
                    v["metric"] if name == "judge" or c.get("status") != "skipped" else name)
                continue
            labels = v.get("labels") or {}
            t = v.get("threshold")
            key: tuple[Any, ...] = (v["metric"], naming.qualifier(labels), v["outcome"],
                   naming.threshold_text(t), (t or {}).get("provenance"), v.get("scope"))
            # Failures stay one row each: every failing part is named.
            if v["outcome"] == "fail":
                key = (*key, id(v))
            merged.setdefault(key, []).append(v)
        for members in merged.values():
            v = members[0]
            labels = v.get("labels") or {}
            if v["outcome"] == "fail":
                where = v.get("component") or ""
            elif len(members) > 1:
                where = _where_many(members, inv)
            else:
                where = naming.short_place(labels)
            measured = _value_range(members)
            if v.get("spread") and len(members) == 1:
                sp = v["spread"]
                measured += (f" ({naming.value_text(sp.get('min'))}–"
                             f"{naming.value_text(sp.get('max'))}, "
                             f"n={naming.value_text(sp.get('n'))})")
            g.rows.append(Row(
                outcome=v["outcome"], metric=v["metric"] + (" (fleet)" if v.get("scope") == "fleet"
                                                            else ""),
                qualifier=naming.qualifier(labels), where=where or "node", measured=measured,
                limit=naming.threshold_text(v.get("threshold")),
                ref=refs.cite(v.get("threshold")), count=len(members)))
        g.rows.sort(key=lambda r: r.outcome != "fail")
        if g.rows or c:
            groups.append(g)
    # Checks that ran and produced nothing to judge still belong in the list.
    for name, c in checks.items():
        if name not in by_check:
            groups.append(CheckGroup(name, c.get("status", ""), c.get("duration_s"),
                                     {"fail": 0, "pass": 0, "not_applicable": 0},
                                     message=naming.clean(c.get("message") or "")))
    not_applicable = [{"reason": reason, "count": len(items),
                       "items": list(dict.fromkeys(items))}
                      for reason, items in sorted(na.items(), key=lambda kv: -len(kv[1]))]
    return {"groups": [g for g in groups if g.rows or g.status not in ("skipped",)],
            "not_applicable": not_applicable,
            "skipped": [g for g in groups if not g.rows and g.status == "skipped"]}


def unjudged(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Scalar measurements no verdict covers, collapsed like the verdict rows."""
    judged = {(v["check"], v["metric"], tuple(sorted((v.get("labels") or {}).items())))
              for v in doc.get("verdicts", [])}
    merged: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for m in doc.get("measurements", []):
        if m.get("series"):
            continue
        if (m["check"], m["name"], tuple(sorted(m["labels"].items()))) in judged:
            continue
        key = (m["check"], m["name"], naming.qualifier(m["labels"]))
        merged.setdefault(key, []).append(m)
    out = []
    inv = doc.get("inventory") or {}
    for (check, name, qual), ms in merged.items():
        out.append({"check": check, "metric": name, "qualifier": qual,
                    "where": (_where_many(ms, inv) if len(ms) > 1
                              else naming.short_place(ms[0]["labels"])) or "node",
                    "value": _value_range(ms)})
    return out


def series_counts(doc: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in doc.get("measurements", []):
        if m.get("series"):
            out[m["name"]] = out.get(m["name"], 0) + 1
    return out
