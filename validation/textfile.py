"""node_exporter textfile-collector metrics of a run or a health check.

One file per source in the collector's directory, `rackready-<source>.prom` (source: run,
health), written atomically (a temporary file in the same directory, then rename, so the
collector never reads half a file). Every series carries `source`, so the two files never
give one series twice and share every HELP and TYPE line. All families are gauges:

    rackready_info{source, profile, level, node, outcome, simulated, judged_by, ...} 1
    rackready_ok{source}                          1 PASS / healthy, 0 otherwise
    rackready_run_duration_seconds{source}        wall time of the run or the health check
    rackready_run_timestamp_seconds{source}       when it finished (unix time)
    rackready_check_ok{source, check, component}  0 when a verdict on that part failed
    rackready_check_status{source, check, status} 1 (ok, skipped, error, timeout)
    rackready_check_duration_seconds{source, check}
    rackready_verdicts{source, outcome}           verdicts by outcome
    rackready_<metric>_<base unit>{source, check, <its labels>}  every numeric measurement
    rackready_<metric>_info{source, check, <its labels>, value}  every text measurement

Metric names follow Prometheus' conventions: the suite's name with dots as underscores,
its unit converted to a base unit and named last (`_bytes`, `_seconds`, `_celsius`,
`_watts`, `_hertz`, `_bytes_per_second`, `_ratio`); a unit word the suite's name already
ends in is dropped first (`gpu.idle_power_dev_w` -> `rackready_gpu_idle_power_dev_watts`).
Label values are escaped as the exposition format says (backslash, double quote, newline).
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from validation import metrics
from validation.judge import component

PREFIX = "rackready_"
# suite unit -> (base-unit suffix, factor to it, words the suite's names may end in for it)
UNITS: dict[str, tuple[str, float, tuple[str, ...]]] = {
    "": ("", 1.0, ()),
    "count": ("", 1.0, ()),
    "%": ("_ratio", 0.01, ("_percent",)),
    "B": ("_bytes", 1.0, ("_bytes",)),
    "MiB": ("_bytes", float(1 << 20), ("_mib",)),
    "GiB": ("_bytes", float(1 << 30), ("_gib",)),
    "C": ("_celsius", 1.0, ("_c",)),
    "W": ("_watts", 1.0, ("_w",)),
    "s": ("_seconds", 1.0, ("_s",)),
    "h": ("_seconds", 3600.0, ("_hours",)),
    "MHz": ("_hertz", 1e6, ("_mhz",)),
    "MT/s": ("_transfers_per_second", 1e6, ("_mts",)),
    "GB/s": ("_bytes_per_second", 1e9, ("_gbps",)),
    "Gb/s": ("_bytes_per_second", 1e9 / 8, ("_gbps",)),
    "TFLOP/s": ("_flops_per_second", 1e12, ("_tflops",)),
    "FLOP": ("_flops", 1.0, ()),
    "tokens/s": ("_tokens_per_second", 1.0, ()),
    "lanes": ("_lanes", 1.0, ()),
    "dBm": ("_dbm", 1.0, ("_dbm",)),
}
# names that read badly after the rules above
RENAMED = {
    "nvme.percentage_used": "nvme_endurance_used",  # NVMe SMART "Percentage Used"
    "fsdp.tokens_per_s_per_gpu": "fsdp_per_gpu",
    "fsdp.flops_per_token": "fsdp_per_token",
    # a gauge may not end in _count (a histogram's or a summary's series)
    "gpu.count": "gpus", "nvswitch.count": "nvswitches", "nic.count": "nics",
    "nvme.count": "nvme_drives", "host.dimm_count": "host_dimms",
}
# the suffixes of other metric types; a name that ends in one gets "_value" after it
_RESERVED = ("_count", "_sum", "_bucket", "_total", "_info", "_created")
_NAME_BAD = re.compile(r"[^a-zA-Z0-9_]")


def metric_name(name: str, unit: str) -> tuple[str, float]:
    """(Prometheus name, factor from the suite's unit to the base unit)."""
    suffix, factor, words = UNITS.get(unit, ("", 1.0, ()))
    base = RENAMED.get(name) or _NAME_BAD.sub("_", name)
    for w in words:
        if base.endswith(w):
            base = base[: -len(w)]
            break
    if not suffix and base.endswith(_RESERVED):
        base += "_value"
    return PREFIX + base + suffix, factor


def label_name(key: str) -> str:
    out = _NAME_BAD.sub("_", key) or "label"
    out = "l_" + out if out[0].isdigit() or out.startswith("__") else out
    return out


def escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _help(text: str) -> str:
    return " ".join(text.replace("\\", "\\\\").split())


def number(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(float(v))


class Exposition:
    """Gauge families in the order first seen; one value per label set (the last)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.families: dict[str, tuple[str, dict[tuple[tuple[str, str], ...], float]]] = {}

    def add(self, name: str, help_text: str, labels: dict[str, Any], value: float) -> None:
        fam = self.families.setdefault(name, (help_text, {}))
        merged: dict[str, str] = {"source": self.source}
        for k, v in labels.items():
            key = label_name(k)
            while key in merged:  # a measurement's own label named like ours
                key = "m_" + key
            merged[key] = str(v)
        fam[1][tuple(merged.items())] = float(value)

    def text(self) -> str:
        lines = []
        for name, (help_text, series) in self.families.items():
            lines += [f"# HELP {name} {_help(help_text)}", f"# TYPE {name} gauge"]
            for labels, value in series.items():
                inner = ",".join(f'{k}="{escape(v)}"' for k, v in labels)
                lines.append(f"{name}{{{inner}}} {number(value)}")
        return "\n".join(lines) + "\n"


def _measurements(expo: Exposition, checks: Iterable[dict[str, Any]]) -> None:
    for c in checks:
        for meas in c.get("measurements") or ():
            value, name = meas.get("value"), str(meas.get("name", ""))
            reg = metrics.METRICS.get(name)
            unit = reg.unit if reg else str(meas.get("unit") or "")
            prom, factor = metric_name(name, unit)
            what = (reg.description if reg else "not in validation.metrics") \
                + f" (suite metric {name}" + (f", measured in {unit})" if unit else ")")
            labels = {"check": c["check"], **(meas.get("labels") or {})}
            if isinstance(value, (bool, int, float)):  # a bool is 0 or 1
                expo.add(prom, what, labels, float(value) * factor)
            elif value is not None:
                expo.add(f"{prom}_info", what + "; the value is the label value",
                         {**labels, "value": value}, 1)


def exposition(source: str, doc: dict[str, Any], duration_s: float, finished_unix: float,
               ok: bool, outcome: str) -> str:
    """The textfile of one run's or health check's result.json-shaped document."""
    expo = Exposition(source)
    inv = doc.get("inventory") or {}
    info = {"profile": doc.get("profile", ""), "level": doc.get("level", ""),
            "node": doc.get("node", ""), "outcome": outcome,
            "simulated": str(bool(doc.get("simulated"))).lower(),
            "judged_by": "node",
            "run_id": doc.get("run_id") or "",
            "nvidia_driver": inv.get("gpu_driver_version") or "",
            "cuda": inv.get("gpu_cuda_version") or "",
            "python": (doc.get("tool_versions") or {}).get("python") or "",
            "bundle_sha256": doc.get("bundle_sha256") or ""}
    info = {k: v for k, v in info.items() if v != ""}  # an empty label is no label
    expo.add("rackready_info", "what ran: profile, level, node, outcome, versions; judged by "
             "the node itself (advisory: the controller's judgement of a full run is the "
             "acceptance; the health check is a local gate)", info, 1)
    expo.add("rackready_ok", "1 when the run passed or the health check found the node "
             "healthy, else 0", {}, 1 if ok else 0)
    expo.add("rackready_run_duration_seconds", "wall time of the run or health check", {},
             duration_s)
    expo.add("rackready_run_timestamp_seconds", "when the run or health check finished, "
             "unix time", {}, finished_unix)
    verdicts = doc.get("verdicts") or []
    by_part: dict[tuple[str, str], bool] = {}
    for v in verdicts:
        if v.get("outcome") in ("pass", "fail", "below_expected"):
            key = (v["check"], component(v.get("labels") or {}))
            by_part[key] = by_part.get(key, True) and v["outcome"] != "fail"
    for c in doc.get("checks") or ():
        expo.add("rackready_check_status", "1 for how the check ended: ok, skipped, error "
                 "or timeout", {"check": c["check"], "status": c["status"]}, 1)
        expo.add("rackready_check_duration_seconds", "wall time of the check",
                 {"check": c["check"]}, float(c.get("duration_s") or 0.0))
        if c["status"] == "ok" and not any(k[0] == c["check"] for k in by_part):
            by_part[(c["check"], "node")] = True  # ran, and nothing of it is judged
    for (check, part), good in by_part.items():
        expo.add("rackready_check_ok", "0 when a verdict of the check on the component "
                 "failed, else 1", {"check": check, "component": part}, 1 if good else 0)
    counts: dict[str, int] = {o: 0 for o in ("pass", "fail", "below_expected",
                                             "not_applicable")}
    for v in verdicts:
        counts[str(v.get("outcome"))] = counts.get(str(v.get("outcome")), 0) + 1
    for outcome_name, n in counts.items():
        expo.add("rackready_verdicts", "verdicts of the judge by outcome",
                 {"outcome": outcome_name}, n)
    _measurements(expo, doc.get("checks") or ())
    return expo.text()


def write(directory: Path, source: str, text: str) -> Path:
    """Atomically replace DIR/rackready-<source>.prom; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"rackready-{source}.prom"
    fd, tmp = tempfile.mkstemp(prefix=f".rackready-{source}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # node_exporter often runs as its own user
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


ENV_DIR = "RACKREADY_TEXTFILE_DIR"


def run_dir(site: dict[str, Any] | None, given: str | Path | None = None) -> Path | None:
    """Where a run writes its textfile: --textfile-dir, else the site's
    `metrics: {textfile_dir: ...}` (rackready_validation_site), else $RACKREADY_TEXTFILE_DIR;
    None: nowhere."""
    conf = (site or {}).get("metrics") or {}
    chosen = given or (conf.get("textfile_dir") if isinstance(conf, dict) else None) \
        or os.environ.get(ENV_DIR)
    return Path(chosen) if chosen else None


def _unix(iso: str | None) -> float | None:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(iso)).timestamp()
    except (TypeError, ValueError):
        return None


def write_run(doc: dict[str, Any], directory: Path | None) -> Path | None:
    """The textfile of a finished (or interrupted) run's result.json; a directory that
    cannot be written is one line on stderr, never a failed run."""
    if directory is None:
        return None
    started, finished = _unix(doc.get("started")), _unix(doc.get("finished"))
    duration = finished - started if started is not None and finished is not None else 0.0
    outcome = str(doc.get("outcome", "INCOMPLETE"))
    text = exposition("run", doc, duration, finished or 0.0, outcome == "PASS", outcome)
    try:
        return write(directory, "run", text)
    except OSError as exc:
        import sys

        print(f"metrics not written to {directory}: {exc.strerror or exc}", file=sys.stderr)
        return None
