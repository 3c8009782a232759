"""The figures of a node report (bus bandwidth, burn-in, per GPU, loss curve), as data
the plotter draws (rackready.report.render.plots)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rackready.report import naming
from rackready.report.views.page import _gpu_sort, _num, provenance_references


@dataclass
class Line:
    label: str
    points: list[tuple[float, float]]
    style: str = "measured"  # measured | floor | golden | reference | bench | resumed


@dataclass
class HLine:
    value: float
    label: str
    style: str = "floor"  # floor | reference | limit


@dataclass
class Panel:
    title: str
    y_label: str = ""
    x_label: str = ""
    x_bytes: bool = False
    lines: list[Line] = field(default_factory=list)
    hlines: list[HLine] = field(default_factory=list)
    bars: list[tuple[str, float, bool]] = field(default_factory=list)  # label, value, failing


@dataclass
class Figure:
    key: str
    title: str
    caption: str
    panels: list[Panel]
    ncols: int = 2
    panel_height: float = 2.0


def _thresholds(doc: dict[str, Any], metric: str) -> list[dict[str, Any]]:
    return [t for t in doc.get("thresholds", []) if t.get("metric") == metric]


def _limit_for(doc: dict[str, Any], metric: str, labels: dict[str, str]) -> dict[str, Any] | None:
    """The most specific profile limit whose labels all match."""
    best = None
    for t in _thresholds(doc, metric):
        tl = {str(k): str(v) for k, v in (t.get("labels") or {}).items()}
        if all(labels.get(k) == v for k, v in tl.items()) and (
                best is None or len(tl) > len(best.get("labels") or {})):
            best = t
    return best


def _size(v: Any) -> bool:
    """A message size the log axis can place: at least one byte (a label "0" or "-4096"
    stays in the tables, never in the figure)."""
    x = _num(v)
    return x is not None and x >= 1


def busbw_figure(doc: dict[str, Any]) -> Figure | None:
    ms = [m for m in doc.get("measurements", []) if m["name"] == "nccl.busbw"
          and _size(m["labels"].get("size_bytes")) and _num(m["value"]) is not None]
    if not ms:
        return None
    ops = list(dict.fromkeys(m["labels"].get("op", "all") for m in ms))
    unit = ms[0].get("unit") or "GB/s"
    panels = []
    for op in ops:
        # one line per mode (in place / out of place), never one zig-zag line
        modes = list(dict.fromkeys(m["labels"].get("mode", "") for m in ms
                                   if m["labels"].get("op", "all") == op))
        lines = [Line("measured" + (f" {mode.replace('_', ' ')}" if len(modes) > 1 else ""),
                      sorted((float(m["labels"]["size_bytes"]), float(m["value"]))
                             for m in ms if m["labels"].get("op", "all") == op
                             and m["labels"].get("mode", "") == mode))
                 for mode in modes]
        p = Panel(title=op, y_label=f"busbw ({unit})", x_label="message size", x_bytes=True,
                  lines=lines)
        sized, flat, provs = [], [], []
        for t in _thresholds(doc, "nccl.busbw"):
            tl = {str(k): str(v) for k, v in (t.get("labels") or {}).items()}
            if tl.get("op", op) != op or _num(t.get("value")) is None:
                continue
            provs.append(t.get("provenance") or "")
            if "size_bytes" in tl and _size(tl["size_bytes"]):
                sized.append((float(tl["size_bytes"]), float(t["value"])))
            elif set(tl) <= {"op"}:
                flat.append(float(t["value"]))
        if sized:
            p.lines.append(Line("profile floor at that size", sorted(sized), "floor"))
        for value in flat[:1]:
            p.hlines.append(HLine(value, "floor at every size", "floor"))
        found = [provenance_references(text, op) for text in provs]
        nccl = next((f["nccl-tests"] for f in found if "nccl-tests" in f), None)
        if nccl:
            p.lines.append(Line(f"{nccl[2]} reference", [nccl[:2]], "reference"))
        bench = sorted({f["bench"][:2] for f in found if "bench" in f})
        if bench:
            p.lines.append(Line("bench reference (torch)", bench, "bench"))
        panels.append(p)
    return Figure("busbw", "NCCL bus bandwidth vs message size",
                  "Measured bus bandwidth per collective, with the profile's floor at each "
                  "size and the reference numbers the floors were derived from (where the "
                  "profile quotes them).", panels, ncols=3 if len(panels) > 4 else 2,
                  panel_height=1.65)


BURNIN_ROWS = (("gemm.interval_tflops", "TFLOP/s", "GEMM throughput"),
               ("gemm.interval_power_w", "W", "board power"),
               ("gemm.interval_sm_clock_mhz", "MHz", "SM clock"))


def _constant(values: list[float]) -> bool:
    return len(set(values)) <= 1


def burnin_figure(doc: dict[str, Any]) -> Figure | None:
    ms = [m for m in doc.get("measurements", []) if m["name"].startswith("gemm.interval_")
          and _num(m["labels"].get("t_s")) is not None and _num(m["value"]) is not None]
    if not ms:
        return None
    dtypes = list(dict.fromkeys(m["labels"].get("dtype", "") for m in ms))
    limits = {str(m["labels"].get("gpu")): float(m["value"]) for m in doc["measurements"]
              if m["name"] == "gemm.power_limit_w" and _num(m["value"]) is not None}
    panels = []
    for metric, unit, title in BURNIN_ROWS:
        rows = [m for m in ms if m["name"] == metric]
        # A flat series tells nothing; show it only if it is the judged figure.
        if not rows or (_constant([float(m["value"]) for m in rows]) and not _judged(doc, metric)):
            continue
        for dtype in dtypes:
            sel = [m for m in rows if m["labels"].get("dtype", "") == dtype]
            if not sel:
                continue
            by_gpu: dict[str, list[tuple[float, float]]] = {}
            for m in sel:
                by_gpu.setdefault(m["labels"].get("gpu", "?"), []).append(
                    (float(m["labels"]["t_s"]), float(m["value"])))
            p = Panel(title=f"{title}, {dtype}" if dtype else title, y_label=unit,
                      x_label="time (s)",
                      lines=[Line(f"GPU {g}", sorted(by_gpu[g])) for g in
                             sorted(by_gpu, key=_gpu_sort)])
            if metric == "gemm.interval_tflops":
                t = _limit_for(doc, "gemm.tflops", {"dtype": dtype} if dtype else {})
                if t and _num(t.get("value")) is not None:
                    words = f"floor {naming.value_text(t['value'])} {t.get('unit', '')}"
                    p.hlines.append(HLine(float(t["value"]), words.rstrip(), "floor"))
            if metric == "gemm.interval_power_w" and limits and len(set(limits.values())) == 1:
                lim = next(iter(limits.values()))
                p.hlines.append(HLine(lim, f"power limit {lim:.0f} W", "limit"))
            panels.append(p)
    if not panels:
        return None
    return Figure("burnin", "GEMM burn-in over time",
                  "One line per GPU, one column per data type; sustained throughput is judged "
                  "against the floor, power and clock show whether the GPU held its limit.",
                  panels, ncols=max(1, min(len(dtypes), 3)), panel_height=1.45)


def _judged(doc: dict[str, Any], metric: str) -> bool:
    return any(v["metric"] == metric for v in doc.get("verdicts", []))


PER_GPU_ORDER = ("gemm.tflops", "hbm.bandwidth", "host.h2d_bandwidth", "host.d2h_bandwidth",
                 "host.bidir_bandwidth", "gemm.power_fraction")


def per_gpu_figure(doc: dict[str, Any]) -> Figure | None:
    """Judged per-GPU figures with a real floor, one panel per metric and variant."""
    panels_by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for v in doc.get("verdicts", []):
        labels = v.get("labels") or {}
        if ("gpu" not in labels or v.get("outcome") not in ("pass", "fail")
                or naming.margin(v.get("value"), v.get("threshold")) is None
                or not v["metric"].startswith(PER_GPU_ORDER)):
            continue
        panels_by.setdefault((v["metric"], naming.qualifier(labels)), []).append(v)
    if not panels_by:
        return None
    fleet = doc.get("fleet") or {}
    variants: dict[str, int] = {}
    for metric, _ in panels_by:
        variants[metric] = variants.get(metric, 0) + 1
    panels = []
    for (metric, qual), vs in sorted(panels_by.items(),
                                     key=lambda kv: (PER_GPU_ORDER.index(
                                         next(p for p in PER_GPU_ORDER
                                              if kv[0][0].startswith(p))), kv[0][1])):
        vs = sorted(vs, key=lambda v: _gpu_sort(v["labels"]["gpu"]))
        t = vs[0].get("threshold") or {}
        unit = vs[0].get("unit") or t.get("unit") or ""
        p = Panel(title=naming.metric_name(metric) + (f", {qual}" if qual else ""),
                  y_label=unit,
                  bars=[(f"GPU {v['labels']['gpu']}", float(v["value"]), v["outcome"] == "fail")
                        for v in vs])
        op = "floor" if t.get("op") in (">=", ">") else "ceiling"
        p.hlines.append(HLine(float(t["value"]), f"{op} {naming.value_text(t['value'])}", "floor"))
        med = (fleet.get("medians") or {}).get(metric)
        # The fleet median is per metric; it only means something for a single variant.
        if med and variants[metric] == 1 and fleet.get("nodes", 0) >= 2:
            p.hlines.append(HLine(float(med["median"]),
                                  f"fleet median ({fleet['nodes']} nodes)", "reference"))
        panels.append(p)
    return Figure("per_gpu", "Per-GPU results against their floors",
                  "Each bar is one GPU; the red dashed line is the profile's limit. "
                  "Failing GPUs are drawn in red.", panels,
                  ncols=min(3, len(panels)), panel_height=1.8)


def loss_figure(doc: dict[str, Any]) -> Figure | None:
    ms = [m for m in doc.get("measurements", []) if m["name"] == "fsdp.loss"
          and _num(m["labels"].get("step")) is not None and _num(m["value"]) is not None]
    if len(ms) < 2:
        return None
    keys = list(dict.fromkeys(naming.qualifier(
        {k: v for k, v in m["labels"].items() if k != "step"}) for m in ms))
    lines = []
    for k in keys:
        pts = sorted((float(m["labels"]["step"]), float(m["value"])) for m in ms
                     if naming.qualifier({a: b for a, b in m["labels"].items()
                                          if a != "step"}) == k)
        lines.append(Line(f"this run{f' ({k})' if len(keys) > 1 and k else ''}", pts))
    golden = [(float(p["step"]), float(p["loss"])) for p in doc.get("golden_loss") or []]
    if golden:
        lines.append(Line("golden curve", sorted(golden), "golden"))
    resumed = sorted((float(m["labels"]["step"]), float(m["value"]))
                     for m in doc["measurements"] if m["name"] == "fsdp.resumed_loss"
                     and _num(m["labels"].get("step")) is not None and _num(m["value"]) is not None)
    if resumed:
        lines.append(Line("after checkpoint resume", resumed, "resumed"))
    title = "Training loss" + (" vs golden curve" if golden else "")
    caption = ("Loss of the reference training job per step"
               + (", against the profile's golden curve" if golden else
                  "; the profile carries no golden curve for this shape")
               + ("; crosses mark the run resumed from its checkpoint." if resumed else "."))
    return Figure("loss", title, caption,
                  [Panel(title=title, y_label="loss", x_label="step", lines=lines)],
                  ncols=1, panel_height=2.2)


def _points(xs: list[Any], ys: list[Any]) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in zip(xs, ys, strict=False)
            if _num(x) is not None and _num(y) is not None]


def envelope_figure(doc: dict[str, Any]) -> Figure | None:
    """The chassis under the run's load, as the BMC read it (rackready.steps.envelope)."""
    env = (doc.get("bmc") or {}).get("envelope") or {}
    t = env.get("t_s") or []
    power = _points(t, env.get("power_w") or [])
    if not power:
        return None
    p_power = Panel("Chassis power", "W", "time in the run (s)",
                    lines=[Line("chassis draw", power)])
    capacity = _num(env.get("one_lost_capacity_w"))
    if capacity is not None:
        p_power.hlines.append(HLine(capacity, f"PSUs with one lost: {capacity:.0f} W",
                                    "limit"))
    panels = [p_power]
    temps = [Line(label, pts) for label, key in (("inlet", "inlet_c"), ("exhaust", "exhaust_c"))
             if (pts := _points(t, env.get(key) or []))]
    if temps:
        p_temp = Panel("Inlet and exhaust air", "C", "time in the run (s)", lines=temps)
        limit = _limit_for(doc, "bmc.inlet.peak_c", {})
        if limit and _num(limit.get("value")) is not None:
            p_temp.hlines.append(HLine(float(limit["value"]),
                                       f"inlet limit {naming.value_text(limit['value'])} C",
                                       "limit"))
        panels.append(p_temp)
    fans = _points(t, env.get("fan_lowest") or [])
    if fans:
        panels.append(Panel("Slowest fan", env.get("fan_units") or "", "time in the run (s)",
                            lines=[Line("slowest fan", fans)]))
    return Figure("envelope", "Power and thermal envelope (BMC)",
                  f"The chassis read through its BMC every {env.get('period_s') or '?'} s while "
                  "the node's suite ran: the draw against what the power supplies carry with "
                  "one of them lost, the air temperatures against the inlet limit, and the "
                  "slowest fan.", panels, ncols=min(3, len(panels)), panel_height=1.6)


def node_figures(doc: dict[str, Any]) -> list[Figure]:
    return [f for f in (busbw_figure(doc), burnin_figure(doc), envelope_figure(doc),
                        per_gpu_figure(doc), loss_figure(doc)) if f]
