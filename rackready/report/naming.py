"""Words for what failed: a verdict's labels turned into the component a technician acts on."""

from __future__ import annotations

from typing import Any

# Label keys that name hardware, in the order a technician looks for them.
COMPONENT_KEYS = ("gpu", "nvswitch", "nic", "hca", "port", "link", "nvme", "disk", "device")


def gpu_serial(inventory: dict[str, Any], gpu: str) -> str | None:
    """Serial of GPU `gpu` from inventory["gpus"]: a dict keyed by index (the node
    suite's shape) or a list of entries matched on "index", else position."""
    gpus = inventory.get("gpus")
    if isinstance(gpus, dict):
        entry = gpus.get(gpu)
        return str(entry["serial"]) if isinstance(entry, dict) and entry.get("serial") else None
    if not isinstance(gpus, list):
        return None
    for pos, g in enumerate(gpus):
        if isinstance(g, dict) and str(g.get("index", pos)) == gpu and g.get("serial"):
            return str(g["serial"])
    return None


def component(labels: dict[str, str], inventory: dict[str, Any] | None = None) -> str:
    """'GPU 3 (serial 1654…)', 'port mlx5_0/1', or '' when the verdict is node-wide."""
    parts = []
    for key in COMPONENT_KEYS:
        if key in labels:
            name = "GPU" if key == "gpu" else key
            parts.append(f"{name} {labels[key]}")
    if not parts:
        return ""
    serial = labels.get("serial")
    if serial is None and "gpu" in labels and inventory:
        serial = gpu_serial(inventory, labels["gpu"])
    return " ".join(parts) + (f" (serial {serial})" if serial else "")


def labels_text(labels: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def threshold_text(t: dict[str, Any] | None) -> str:
    if not t:
        return "no threshold"
    op = {">=": "≥", "<=": "≤", "!=": "≠"}.get(t["op"], t["op"])
    unit = f" {t['unit']}" if t.get("unit") else ""
    return f"{op} {value_text(t['value'])}{unit}"


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
