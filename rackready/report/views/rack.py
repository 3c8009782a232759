"""What the templates show, derived from a report document (pure functions, no rendering).

Nothing here decides an outcome: the verdict shown is doc["outcome"] and the
rows are the judge's verdicts as given. Views only group, count and compare.
"""

from __future__ import annotations

from typing import Any

from rackready.report import naming
from rackready.report.views.figures import Figure, HLine, Panel, per_gpu_figure
from rackready.report.views.page import OUTCOMES


def node_line(entry: dict[str, Any], doc: dict[str, Any] | None) -> str:
    """The one-line reason next to a node in the rack table."""
    for src in (entry, doc or {}):
        if src.get("outcome_reason"):
            return naming.clean(src["outcome_reason"])
    if entry.get("report") is None and doc is None:
        probs = entry.get("problems") or []
        return naming.clean(probs[0]) if probs else "never reported"
    fails = entry.get("failures") or []
    if fails:
        parts = list(dict.fromkeys(f["check"] for f in fails))
        return f"{len(fails)} failing verdict{'s' * (len(fails) != 1)}: {', '.join(parts)}"
    if entry.get("problems"):
        return naming.clean(entry["problems"][0])
    if entry.get("outcome") == "PASS" and doc is not None:
        n = sum(1 for v in doc.get("verdicts", []) if v.get("outcome") == "pass")
        return f"all {n} judged verdicts passed"
    return ""


def rack_rows(rack: dict[str, Any], node_docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    docs = {d["node"]: d for d in node_docs}
    order = {k: i for i, k in enumerate(("FAIL", "INCOMPLETE", "PARTIAL", "PASS"))}
    rows = []
    for e in rack.get("nodes", []):
        d = docs.get(e["node"]) if e.get("report") is not None else None
        rows.append({
            "node": e["node"], "outcome": e.get("outcome", "INCOMPLETE"),
            "reason": node_line(e, d), "profile": e.get("profile") or "—",
            "level": e.get("level") or "—", "report": e.get("report"),
            "html": f"node-{e['node']}.html" if e.get("report") else None,
            "sha": (e.get("report_sha256") or "")[:16],
            "simulated": e.get("simulated", False),
            "failures": [{**f, "component": f.get("component") or ""}
                         for f in e.get("failures") or []],
            "problems": [naming.clean(p) for p in e.get("problems") or []],
            "hostname": (d or {}).get("hostname"),
            "limits": naming.limits_line(e.get("limits")) if e.get("limits") else "",
        })
    rows.sort(key=lambda r: (order.get(r["outcome"], 1), r["node"]))
    return rows


def rack_step(rack: dict[str, Any]) -> list[dict[str, Any]]:
    """Per fabric: the all_reduce, the links (failing first) and who was left out."""
    out = []
    for g in rack.get("rack_checks") or []:
        ar = g.get("allreduce") or {}
        pairs = sorted(g.get("pairs") or [],
                       key=lambda p: (p["outcome"] != "fail", p["node_a"], p["node_b"],
                                      p["rail"]))
        limit = next((p["threshold"] for p in pairs if p.get("threshold")), None)
        out.append({
            "fabric": g["fabric"], "outcome": g["outcome"],
            "reason": naming.clean(g.get("outcome_reason") or ""),
            "members": ", ".join(g.get("members") or []) or "—",
            "left_out": [f"{e['node']}: {naming.clean(e['reason'])}"
                         for e in g.get("left_out") or []],
            "allreduce": (f"{ar['value']} {ar.get('unit', '')}, correct {ar.get('correct')}"
                          f" ({ar.get('outcome')})") if ar else "not measured",
            "limit": (f"{limit['op']} {limit['value']} {limit.get('unit', '')}" if limit
                      else "—"),
            "provenance": (limit or {}).get("provenance", ""),
            "simulated": any(p.get("simulated") for p in pairs),
            "pairs": [{**p, "link": f"{p['node_a']} {p['nic_a']} ↔ {p['node_b']} {p['nic_b']}",
                       "why": "; ".join(naming.clean(m) for m in p.get("messages") or [])}
                      for p in pairs],
            "suspects": [f"{s['node']} {s['nic']} (rail {s['rail']}: {s['why']})"
                         for s in g.get("suspects") or []],
            "problems": [naming.clean(p) for p in g.get("problems") or []],
        })
    return out


def rack_counts(rack: dict[str, Any]) -> list[tuple[str, int]]:
    outcomes = [e.get("outcome") for e in rack.get("nodes", [])]
    return [(k, outcomes.count(k)) for k in OUTCOMES if outcomes.count(k)]


def rack_figure(node_docs: list[dict[str, Any]]) -> Figure | None:
    """Per-GPU judged figures across every node that reported, one panel per variant."""
    if len(node_docs) < 2:
        return None
    merged: dict[tuple[str, str], list[tuple[str, float, bool, str]]] = {}
    for d in node_docs:
        fig = per_gpu_figure(d)
        if not fig:
            continue
        for p in fig.panels:
            for label, value, failing in p.bars:
                merged.setdefault((p.title, p.y_label), []).append(
                    (f"{d['node']}:{label.removeprefix('GPU ')}", value, failing,
                     p.hlines[0].label if p.hlines else ""))
            if p.hlines:
                merged.setdefault(("__floor__", p.title), []).append(
                    ("", p.hlines[0].value, False, p.hlines[0].label))
    panels = []
    for (title, unit), bars in merged.items():
        if title == "__floor__":
            continue
        p = Panel(title=title, y_label=unit, bars=[(b[0], b[1], b[2]) for b in bars])
        floors = merged.get(("__floor__", title)) or []
        if floors and len({f[1] for f in floors}) == 1:
            p.hlines.append(HLine(floors[0][1], floors[0][3], "floor"))
        vals = sorted(b[1] for b in bars)
        mid = len(vals) // 2
        median = vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2
        p.hlines.append(HLine(median, "rack median", "reference"))
        panels.append(p)
    if not panels:
        return None
    return Figure("rack", "Per-GPU results across the rack",
                  "Each bar is one GPU (node:index); the red dashed line is the profile's limit, "
                  "the grey dotted line the rack median. Failing GPUs are red.",
                  panels, ncols=1 if sum(len(p.bars) for p in panels) > 24 else 2,
                  panel_height=2.0)


def rack_reason(rack: dict[str, Any]) -> str:
    """One line under the rack's verdict: the judge's reason; a rack that passed says
    how many nodes it holds."""
    if rack.get("outcome_reason"):
        return naming.clean(rack["outcome_reason"])
    nodes = rack.get("nodes", [])
    return f"all {len(nodes)} nodes passed" if rack.get("outcome") == "PASS" else ""
