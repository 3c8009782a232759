"""HTML handoff documents (node and rack) rendered from report JSON only.

Jinja2 autoescapes every value; the only markup marked safe is the SVG from
svgplot, which escapes its own text.
"""

from __future__ import annotations

import statistics
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from rackready.report import naming
from rackready.report.svgplot import Bar, Series, bar_chart, fmt_bytes, line_chart

OUTCOME_ORDER = {"fail": 0, "not_applicable": 1, "pass": 2}

# Burn-in series worth a chart of their own: metric -> (title, y axis label).
BURNIN_METRICS = {
    "gemm.interval_tflops": ("GEMM throughput over the burn-in", "TFLOP/s"),
    "gemm.interval_power_w": ("Board power over the burn-in", "W"),
    "gemm.interval_sm_clock_mhz": ("SM clock over the burn-in", "MHz"),
}


def _env() -> Environment:
    env = Environment(loader=PackageLoader("rackready.report", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["value"] = naming.value_text
    env.filters["threshold"] = naming.threshold_text
    env.filters["labels"] = naming.labels_text
    return env


def _num(v: Any) -> float | None:
    try:
        return float(v) if not isinstance(v, bool) and v is not None else None
    except (TypeError, ValueError):
        return None


def _series_by(ms: list[dict[str, Any]], name: str, key: str, x: str) -> list[Series]:
    """Group measurements `name` into one line per label `key`, x from label `x`."""
    groups: dict[str, list[tuple[float, float]]] = {}
    for m in ms:
        if m["name"] != name:
            continue
        xv, yv = _num(m["labels"].get(x)), _num(m["value"])
        if xv is not None and yv is not None:
            groups.setdefault(m["labels"].get(key, "all"), []).append((xv, yv))
    prefix = "GPU " if key == "gpu" else ""
    order = sorted(groups, key=lambda g: (not g.isdigit(), int(g) if g.isdigit() else 0, g))
    return [Series(f"{prefix}{g}", sorted(groups[g])) for g in order]


def judged_per_gpu_metrics(doc: dict[str, Any]) -> list[str]:
    """Per-GPU scalar metrics the profile has an opinion on (bars are for judged numbers)."""
    judged = {v["metric"] for v in doc["verdicts"]} | {t["metric"] for t in doc["thresholds"]}
    return sorted({m["name"] for m in doc["measurements"]
                   if "gpu" in m["labels"] and not m["series"] and _num(m["value"]) is not None
                   and m["name"] in judged})


def node_plots(doc: dict[str, Any]) -> list[Markup]:
    ms = doc["measurements"]
    plots: list[str] = []
    busbw = _series_by(ms, "nccl.busbw", "op", "size_bytes")
    if busbw:
        unit = next(m["unit"] for m in ms if m["name"] == "nccl.busbw") or "GB/s"
        plots.append(line_chart(busbw, title="NCCL bus bandwidth vs message size",
                                x_label="message size (bytes)", y_label=f"busbw ({unit})",
                                log2_x=True, x_format=fmt_bytes))
    for metric, (title, unit) in BURNIN_METRICS.items():
        series = _series_by(ms, metric, "gpu", "t_s")
        if series:
            plots.append(line_chart(series, title=title, x_label="time (s)", y_label=unit))
    failing = {(v["metric"], v["labels"].get("gpu")) for v in doc["verdicts"]
               if v["outcome"] == "fail"}
    for metric in judged_per_gpu_metrics(doc):
        rows = [m for m in ms if m["name"] == metric and "gpu" in m["labels"] and not m["series"]]
        bars = [Bar(f"GPU {m['labels']['gpu']}", float(m["value"]),
                    (metric, m["labels"]["gpu"]) in failing) for m in rows]
        med = doc["fleet"]["medians"].get(metric, {}).get("median")
        plots.append(bar_chart(bars, title=f"{metric} per GPU", y_label=rows[0]["unit"],
                               reference=med,
                               reference_label=f"fleet median ({doc['fleet']['nodes']} nodes)"))
    loss = _series_by(ms, "fsdp.loss", "none", "step")
    if loss:
        curves = [Series("this run", loss[0].points)]
        if doc["golden_loss"]:
            curves.append(Series("golden", [(p["step"], p["loss"]) for p in doc["golden_loss"]],
                                 dashed=True))
        plots.append(line_chart(curves, title="FSDP training loss vs golden curve",
                                x_label="step", y_label="loss"))
    return [Markup(p) for p in plots if p]


def rack_plots(rack: dict[str, Any]) -> list[Markup]:
    plots = []
    failing = {(f["metric"], n["node"], f["labels"].get("gpu"))
               for n in rack["nodes"] for f in n["failures"]}
    for metric, rows in sorted(rack["fleet"].get("per_gpu", {}).items()):
        if len(rows) < 2:
            continue
        bars = [Bar(f"{r['node']}:{r['gpu']}", r["value"], (metric, r["node"], r["gpu"]) in failing)
                for r in rows]
        plots.append(bar_chart(bars, title=f"{metric} per GPU across the rack",
                               y_label=rows[0]["unit"],
                               reference=statistics.median(r["value"] for r in rows)))
    return [Markup(p) for p in plots if p]


def inventory_view(inv: dict[str, Any]) -> dict[str, Any]:
    """Split an inventory of unknown shape into key/value rows and tables."""
    scalars: list[tuple[str, Any]] = []
    tables: list[dict[str, Any]] = []

    def walk(prefix: str, obj: dict[str, Any]) -> None:
        for k, v in obj.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
                # {"0": {...}, "1": {...}} (GPUs by index): one table, the key as a column
                cols = ["id"]
                for row in v.values():
                    cols += [c for c in row if c not in cols]
                tables.append({"name": key, "columns": cols,
                               "rows": [[k2, *(row.get(c) for c in cols[1:])]
                                        for k2, row in v.items()]})
            elif isinstance(v, dict):
                if v:
                    walk(f"{key}.", v)
            elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                cols: list[str] = []
                for row in v:
                    cols += [c for c in row if c not in cols]
                tables.append({"name": key, "columns": cols,
                               "rows": [[row.get(c) for c in cols] for row in v]})
            else:
                scalars.append((key, v))

    walk("", inv)
    return {"scalars": scalars, "tables": tables}


def _sorted_verdicts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(doc["verdicts"], key=lambda v: (OUTCOME_ORDER.get(v["outcome"], 3),
                                                  v["check"], v["metric"]))


def render_node_html(doc: dict[str, Any]) -> str:
    verdicts = _sorted_verdicts(doc)
    failures = [v for v in verdicts if v["outcome"] == "fail"]
    judged = {(v["check"], v["metric"], tuple(sorted(v["labels"].items()))) for v in verdicts}
    unjudged = [m for m in doc["measurements"] if not m["series"]
                and (m["check"], m["name"], tuple(sorted(m["labels"].items()))) not in judged]
    series_counts: dict[str, int] = {}
    for m in doc["measurements"]:
        if m["series"]:
            series_counts[m["name"]] = series_counts.get(m["name"], 0) + 1
    return _env().get_template("node.html.j2").render(
        doc=doc, verdicts=verdicts, failures=failures, unjudged=unjudged,
        series_counts=series_counts, plots=node_plots(doc),
        inventory=inventory_view(doc["inventory"]),
        component=lambda labels: naming.component(labels, doc["inventory"]),
    )


def render_rack_html(rack: dict[str, Any], node_docs: list[dict[str, Any]]) -> str:
    inventories = {d["node"]: d["inventory"] for d in node_docs}
    return _env().get_template("rack.html.j2").render(
        doc=rack, plots=rack_plots(rack), node_docs=node_docs,
        component=lambda node, labels: naming.component(labels, inventories.get(node, {})),
    )
