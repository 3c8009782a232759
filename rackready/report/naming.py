"""How a report writes what it shows: places, limits and their tiers, values, metric names.

The failing part in words (a verdict's "component") is the judge's, written by
rackready.decide.outcome and only copied here."""

from __future__ import annotations

import re
from typing import Any

# Label keys that name hardware, in the order a technician looks for them.
COMPONENT_KEYS = ("gpu", "nvswitch", "nic", "hca", "port", "link", "nvme", "disk", "device")


def short_place(labels: dict[str, str]) -> str:
    """'GPU 3', 'GPU 0 → 1', 'GPU 2 link 5', 'port mlx5_0/1': where, without serials."""
    if "src" in labels and "dst" in labels:
        return f"GPU {labels['src']}\u2192{labels['dst']}"
    return " ".join(f"{'GPU' if k == 'gpu' else k} {labels[k]}" for k in COMPONENT_KEYS
                    if k in labels)


def labels_text(labels: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def threshold_text(t: dict[str, Any] | None, mark: bool = True) -> str:
    """The limit in words; mark: with its tier (tier_mark), else the bare limit for a
    narrow column that shows the tier apart (tier_word)."""
    if not t:
        return "no threshold"
    op = {">=": "≥", "<=": "≤", "!=": "≠"}.get(t["op"], t["op"])
    unit = f" {t['unit']}" if t.get("unit") else ""
    return f"{op} {value_text(t['value'])}{unit}{tier_mark(t) if mark else ''}"


TIER_SYMBOLS = {"provisional": "†", "calibrated": "‡", "measured": "*"}


def tier_symbol(t: dict[str, Any] | None) -> str:
    """The tier as one symbol for a narrow table cell (the table's note says what each
    means); "" for a spec limit."""
    return TIER_SYMBOLS.get((t or {}).get("tier") or "spec", "")


def tier_mark(t: dict[str, Any] | None) -> str:
    """The limit's tier as every format shows it: nothing for a spec or health rule."""
    tier = (t or {}).get("tier") or "spec"
    if tier == "spec":
        return ""
    gross = (t or {}).get("gross")
    if tier == "provisional" and gross is not None:
        unit = f" {t['unit']}" if t and t.get("unit") else ""
        return f" [provisional; gross fault past {value_text(gross)}{unit}]"
    return f" [{tier}]"


def limits_line(limits: dict[str, Any] | None) -> str:
    """One line: how many verdicts rest on provisional limits, below expected, calibration."""
    lim = limits or {}
    text = (f"{lim.get('provisional', 0)} of {int(lim.get('judged') or 0)} judged verdicts "
            "rest on provisional limits")
    if lim.get("below_expected"):
        text += f", {lim['below_expected']} below expected"
    if lim.get("calibrated"):
        text += (f", {lim['calibrated']} on calibrated limits "
                 f"({lim.get('calibration') or 'site calibration'})")
    if lim.get("measured"):
        text += f", {lim['measured']} on measured limits"
    return text + (" (site strict: a provisional shortfall fails)"
                   if lim.get("provisional_limits") == "strict"
                   else " (they fail only gross faults)")


def value_text(v: Any, unit: str = "") -> str:
    if isinstance(v, bool) or v is None:
        s = str(v).lower() if v is not None else "—"
    elif isinstance(v, float):
        s = f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    elif isinstance(v, int):
        s = f"{v:,}" if abs(v) >= 10000 else str(v)
    elif isinstance(v, list | tuple):
        s = ", ".join(map(str, v))
    else:
        s = str(v)
    return f"{s} {unit}".rstrip() if unit and v is not None else s


# C0/C1 controls and bidi overrides: node-provided text must not reorder or hide what a
# reader sees. Tabs and line breaks become spaces (every field is shown on one line).
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SPACE = re.compile(r"[\t\n\r]+")

# Labels that say where (which device), as opposed to what was measured.
DEVICE_KEYS = frozenset({*COMPONENT_KEYS, "serial", "bus_id", "src", "dst", "rank", "numa",
                         "bound", "max", "pair", "path", "source", "failing", "patterns",
                         "screens"})

# Metric names a customer reads; anything else is shown as its name.
METRIC_NAMES = {
    "gemm.tflops": "GEMM throughput", "gemm.power_fraction": "Power held under load",
    "hbm.bandwidth": "HBM bandwidth", "nccl.busbw": "NCCL bus bandwidth",
    "nccl.pair_busbw": "NCCL pair bandwidth", "p2p.bandwidth": "GPU peer-to-peer copy",
    "host.h2d_bandwidth": "Host to GPU copy", "host.d2h_bandwidth": "GPU to host copy",
    "host.bidir_bandwidth": "Host/GPU copy, both ways",
    "fsdp.tokens_per_s_per_gpu": "Training throughput per GPU", "fsdp.mfu": "Training MFU",
    "fsdp.step_time_spread": "Step time spread across ranks",
    "fsdp.loss_deviation": "Loss vs golden curve",
    "fsdp.ckpt_write_gbps": "Checkpoint write", "fsdp.ckpt_read_gbps": "Checkpoint read",
    "fsdp.ckpt_resume_max_abs_diff": "Loss after checkpoint resume",
    "storage.fio_read": "RAID read", "storage.fio_write": "RAID write",
    "storage.ckpt_write": "Checkpoint write (RAID)", "storage.ckpt_read": "Checkpoint read (RAID)",
    "gpu.temperature": "GPU temperature (idle)",
}


def clean(text: Any) -> str:
    """str(text) without control characters, on one line."""
    return _CONTROL.sub("", _SPACE.sub(" ", str(text)))


def metric_name(metric: str) -> str:
    return METRIC_NAMES.get(metric, metric)


def fmt_bytes(v: float) -> str:
    """1048576 -> '1 MiB' (binary units, as message sizes are written)."""
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(v) >= div:
            q = v / div
            return f"{q:.0f} {unit}" if float(q).is_integer() else f"{q:.3g} {unit}"
    return f"{v:.0f} B"


# Labels that describe how a workload ran, the same for every row of a run: kept in the
# JSON, left out of the one-line description.
CONTEXT_KEYS = frozenset({"impl", "ranks", "world", "n", "ac", "compile", "seq", "steps"})


def qualifier(labels: dict[str, str]) -> str:
    """The labels that say which variant was measured ('bf16', 'all_reduce · 64 MiB')."""
    parts = []
    for k, v in sorted(labels.items(), key=lambda kv: (kv[0] != "op", kv[0])):
        if k in DEVICE_KEYS or k in CONTEXT_KEYS:
            continue
        if k == "size_bytes":
            try:
                parts.append(fmt_bytes(float(v)))
            except ValueError:
                parts.append(f"size {v}")
        elif k in ("dtype", "op", "shape", "token", "module"):
            parts.append(v)
        else:
            parts.append(f"{k} {v}")
    return " · ".join(parts)


def margin(value: Any, t: dict[str, Any] | None) -> tuple[float, str] | None:
    """(signed fraction, words) between a number and its floor or ceiling; positive = inside.

    None where a margin means nothing: no numeric limit, an equality, or a limit of 0
    (an error counter has no percentage to spare).
    """
    if not t or t.get("op") not in (">=", ">", "<=", "<"):
        return None
    if isinstance(value, bool) or isinstance(t.get("value"), bool):
        return None
    try:
        v, lim = float(value), float(t["value"])
    except (TypeError, ValueError):
        return None
    if lim == 0:
        return None
    if t["op"] in (">=", ">"):
        frac = (v - lim) / abs(lim)
        words = "above floor" if frac >= 0 else "below floor"
    else:
        frac = (lim - v) / abs(lim)
        words = "below ceiling" if frac >= 0 else "above ceiling"
    sign = "+" if frac >= 0 else "\u2212"
    return frac, f"{sign}{abs(frac) * 100:.1f} % {words}"
