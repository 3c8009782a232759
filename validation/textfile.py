"""node_exporter textfile-collector metrics: what a run or the health gate measured on the
node, and what the controller decided about it.

One file per source in the collector's directory, `rackready-<source>.prom`, written
atomically (a temporary file in the same directory, then rename, so the collector never
reads half a file):

    run         the node's runner (`python -m validation run`): measurements only. The node
                never exports a verdict of its own: it judges itself only to say what it
                saw, and the controller's judgement is the acceptance.
    health      the Slurm health gate (`python -m validation health`): measurements and the
                gate's state, `rackready_health_state` (a local gate, never `rackready_ok`).
    controller  written by the controller after it judged (`invoke validate`, `--via slurm`
                too; rackready.steps.verdict_metrics): the outcome the reports carry.

Every series carries `source`, so the files never give one series twice and share every
HELP and TYPE line. All families are gauges:

    rackready_info{source, profile, level, node, simulated, nvidia_driver, cuda, python} 1
        (labels that stay from run to run: no run id, bundle hash or outcome)
    rackready_run_duration_seconds{source}            run, health: wall time
    rackready_run_timestamp_seconds{source}           when it finished or was judged
    rackready_check_status{source, check, status}     run, health: one series per status
                                                      (ok, skipped, error, timeout), 1 for
                                                      how the check ended, else 0
    rackready_check_duration_seconds{source, check}   run, health
    rackready_<metric>_<base unit>{source, check, <its labels>}  every numeric measurement
    rackready_<metric>_info{source, check, <its labels>, value}  every text measurement, 1
    rackready_health_state{source, state}             health: healthy, unhealthy, timed_out
    rackready_ok{source}                              controller: 1 only for PASS
    rackready_outcome{source, outcome}                controller: PASS, FAIL, INCOMPLETE,
                                                      PARTIAL, 1 for the decided one
    rackready_check_ok{source, check, component}      controller: 0 when a verdict of the
                                                      check on that part failed, else 1
    rackready_verdicts{source, outcome}               controller: verdicts by outcome
    rackready_values_refused{source}                  run, health: measurements left out,
                                                      only where there were some (REFUSED)

Series per node (tests/unit/node/test_textfile.py counts them on an 8-GPU burn-in):

    run          3 + 5 C + M
    health       6 + 5 C + M
    controller  11 + P

C: the checks in the result; M: the distinct (metric, labels) of its measurements, less the
points of a curve; P: the distinct (check, component) of the controller's verdicts. A
measurement labeled with its place on a curve (CURVE_LABELS: `t_s`, a burn-in interval;
`step`, a training step) is one point of a series over time: it stays in result.json and
the reports, and is left out here, so M is set by the node's parts (GPUs, links, NICs,
drives, DIMMs, GPU pairs) and the checks, never by how long the run was: a 4-hour burn-in
exports as many series as a 15-second one.

Metric names follow Prometheus' conventions: the suite's name with dots as underscores,
its unit converted to a base unit and named last (`_bytes`, `_seconds`, `_celsius`,
`_watts`, `_hertz`, `_bytes_per_second`, `_ratio`); a unit word the suite's name already
ends in is dropped first (`gpu.idle_power_dev_w` -> `rackready_gpu_idle_power_dev_watts`).
Label values are escaped as the exposition format says (backslash, double quote, newline).

A value no float64 holds (a 400-digit error count: a lie or a broken probe, never a
counter) is refused, never clamped into a plausible one: its series is left out and
`rackready_values_refused` counts it. A file that cannot be built or written is removed
(replace): a stale file from an earlier run would be read as the node's present state.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, get_args

from validation import metrics
from validation.model import CheckStatus, Outcome

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


REFUSED = "rackready_values_refused"


class Exposition:
    """Gauge families in the order first seen; one value per label set (the last)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.families: dict[str, tuple[str, dict[tuple[tuple[str, str], ...], float]]] = {}
        self.refused: list[str] = []  # "<metric> on <labels>": a value no float64 holds

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
        if self.refused:
            self.add(REFUSED, "measurements left out of this file: a value no float64 holds "
                     "(beyond any counter; result.json keeps it as measured)", {},
                     len(self.refused))
        lines = []
        for name, (help_text, series) in self.families.items():
            lines += [f"# HELP {name} {_help(help_text)}", f"# TYPE {name} gauge"]
            for labels, value in series.items():
                inner = ",".join(f'{k}="{escape(v)}"' for k, v in labels)
                lines.append(f"{name}{{{inner}}} {number(value)}")
        return "\n".join(lines) + "\n"


# a label that places a measurement on a curve over time: one series per point would grow
# with the run (a 4-hour burn-in: 600 points per GPU, dtype and reading)
CURVE_LABELS = frozenset({"t_s", "step"})
STATUSES: tuple[str, ...] = get_args(CheckStatus)  # ok, skipped, error, timeout
VERDICT_OUTCOMES: tuple[str, ...] = get_args(Outcome)
# the controller's node outcomes (rackready.decide.records.NodeOutcome)
NODE_OUTCOMES = ("PASS", "FAIL", "INCOMPLETE", "PARTIAL")
HEALTH_STATES = ("healthy", "unhealthy", "timed_out")

_HELP_INFO = ("what ran and where: profile, level, node, versions (labels that stay the "
              "same from run to run)")
_HELP_DURATION = "wall time of the run or health check"
_HELP_TIMESTAMP = "when the run or health check finished, or the controller judged, unix time"


def _measurements(expo: Exposition, checks: Iterable[dict[str, Any]]) -> None:
    for c in checks:
        for meas in c.get("measurements") or ():
            labels_of = meas.get("labels") or {}
            if CURVE_LABELS & set(labels_of):
                continue  # a point of a curve: result.json and the reports hold it
            value, name = meas.get("value"), str(meas.get("name", ""))
            reg = metrics.METRICS.get(name)
            unit = reg.unit if reg else str(meas.get("unit") or "")
            prom, factor = metric_name(name, unit)
            what = (reg.description if reg else "not in validation.metrics") \
                + f" (suite metric {name}" + (f", measured in {unit})" if unit else ")")
            labels = {"check": c["check"], **labels_of}
            if isinstance(value, (bool, int, float)):  # a bool is 0 or 1
                scaled = _scaled(value, factor)
                if scaled is None:
                    expo.refused.append(f"{name} on {labels_of or 'node'}")
                else:
                    expo.add(prom, what, labels, scaled)
            elif value is not None:
                expo.add(f"{prom}_info", what + "; the value is the label value",
                         {**labels, "value": value}, 1)


def _scaled(value: float, factor: float) -> float | None:
    """value * factor as a float64; None where that is not a number a gauge can carry
    (an int beyond 1.8e308, or a finite value the unit turns infinite)."""
    try:
        scaled = float(value) * factor
    except OverflowError:
        return None
    return None if math.isinf(scaled) and not math.isinf(float(value)) else scaled


def _enum(expo: Exposition, name: str, help_text: str, key: str, states: Iterable[str],
          current: str, labels: dict[str, Any] | None = None) -> None:
    """node_exporter's way with a state: one series per state, 1 for the current one."""
    for state in dict.fromkeys([*states, current]):  # an unknown state is still shown
        expo.add(name, help_text, {**(labels or {}), key: state}, 1 if state == current else 0)


def _info(expo: Exposition, profile: str, level: str, node: str, simulated: bool | None,
          versions: dict[str, Any] | None = None) -> None:
    info = {"profile": profile, "level": level, "node": node,
            "simulated": "" if simulated is None else str(bool(simulated)).lower(),
            **(versions or {})}
    expo.add("rackready_info", _HELP_INFO,
             {k: v for k, v in info.items() if v not in ("", None)}, 1)  # empty: no label


def _node_side(source: str, doc: dict[str, Any], duration_s: float,
               finished_unix: float) -> Exposition:
    """What the node itself exports: its run's facts and measurements, no verdict."""
    expo = Exposition(source)
    inv = doc.get("inventory") or {}
    _info(expo, str(doc.get("profile") or ""), str(doc.get("level") or ""),
          str(doc.get("node") or ""), bool(doc.get("simulated")),
          {"nvidia_driver": inv.get("gpu_driver_version") or "",
           "cuda": inv.get("gpu_cuda_version") or "",
           "python": (doc.get("tool_versions") or {}).get("python") or ""})
    expo.add("rackready_run_duration_seconds", _HELP_DURATION, {}, duration_s)
    expo.add("rackready_run_timestamp_seconds", _HELP_TIMESTAMP, {}, finished_unix)
    return expo


def _checks(expo: Exposition, doc: dict[str, Any]) -> None:
    for c in doc.get("checks") or ():
        _enum(expo, "rackready_check_status", "how the check ended: 1 for its status (ok, "
              "skipped, error, timeout), 0 for the others", "status", STATUSES,
              str(c["status"]), {"check": c["check"]})
        expo.add("rackready_check_duration_seconds", "wall time of the check",
                 {"check": c["check"]}, float(c.get("duration_s") or 0.0))
    _measurements(expo, doc.get("checks") or ())


def run_exposition(doc: dict[str, Any], duration_s: float, finished_unix: float) -> str:
    """The textfile of a run's result.json: how each check ended and what it measured."""
    expo = _node_side("run", doc, duration_s, finished_unix)
    _checks(expo, doc)
    return expo.text()


def health_exposition(doc: dict[str, Any], duration_s: float, finished_unix: float,
                      state: str) -> str:
    """The textfile of a health check (validation.health.document) in its state."""
    expo = _node_side("health", doc, duration_s, finished_unix)
    _enum(expo, "rackready_health_state", "the node's own health gate (slurmd's "
          "HealthCheckProgram; a local gate, not an acceptance): 1 for its state (healthy, "
          "unhealthy: a verdict failed, timed_out: a check ran out of time and nothing "
          "failed), 0 for the others", "state", HEALTH_STATES, state)
    _checks(expo, doc)
    return expo.text()


def controller_exposition(*, node: str, profile: str, level: str, simulated: bool | None,
                          outcome: str, verdicts: Iterable[Mapping[str, object]],
                          judged_unix: float) -> str:
    """The textfile of the controller's judgement of one node: its outcome and verdicts as
    the reports carry them (each verdict with its `component` in words)."""
    expo = Exposition("controller")
    _info(expo, profile, level, node, simulated)
    expo.add("rackready_ok", "1 when the controller decided PASS, else 0 (only the "
             "controller's judgement is exported here)", {}, 1 if outcome == "PASS" else 0)
    expo.add("rackready_run_timestamp_seconds", _HELP_TIMESTAMP, {}, judged_unix)
    _enum(expo, "rackready_outcome", "the controller's outcome for the node: 1 for it, 0 "
          "for the others", "outcome", NODE_OUTCOMES, outcome)
    by_part: dict[tuple[str, str], bool] = {}
    counts = dict.fromkeys(VERDICT_OUTCOMES, 0)
    for v in verdicts:
        counts[str(v.get("outcome"))] = counts.get(str(v.get("outcome")), 0) + 1
        if v.get("outcome") in ("pass", "fail", "below_expected"):
            key = (str(v["check"]), str(v.get("component") or "node"))
            by_part[key] = by_part.get(key, True) and v["outcome"] != "fail"
    for (check, part), good in by_part.items():
        expo.add("rackready_check_ok", "0 when a verdict of the check on the component "
                 "failed, else 1", {"check": check, "component": part}, 1 if good else 0)
    for outcome_name, n in counts.items():
        expo.add("rackready_verdicts", "the controller's verdicts by outcome",
                 {"outcome": outcome_name}, n)
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


def replace(directory: Path, source: str, build: Callable[[], str]) -> str:
    """Write DIR/rackready-<source>.prom from build(), atomically; where it cannot be built
    or written, the old file is removed, so the collector never exports an earlier run's
    state as the present one. Returns "" or the one-line problem (never raises)."""
    try:
        text = build()
    except (ArithmeticError, ValueError, TypeError, KeyError) as exc:  # a value past a guard
        problem = f"metrics not built: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
    else:
        try:
            write(directory, source, text)
            return ""
        except OSError as exc:
            problem = f"metrics not written to {directory}: {exc.strerror or exc}"
    try:
        (directory / f"rackready-{source}.prom").unlink()
    except (FileNotFoundError, NotADirectoryError):
        return problem  # there was none
    except OSError as exc:
        return f"{problem}; the old file stays: {exc.strerror or exc}"
    return f"{problem}; the old file removed"


def refused_words(text: str) -> str:
    """How many values the textfile left out (its REFUSED series), or ""."""
    found = re.search(rf"^{REFUSED}{{[^}}]*}} (\d+)$", text, re.M)
    return f"{found[1]} value(s) no float64 holds left out of the metrics" if found else ""


ENV_DIR = "RACKREADY_TEXTFILE_DIR"


def site_dir(site: dict[str, Any] | None) -> str | None:
    """The site's `metrics: {textfile_dir: ...}` (an inventory's rackready_validation_site):
    the one setting the runner, the health gate and the controller all read."""
    conf = (site or {}).get("metrics") or {}
    found = conf.get("textfile_dir") if isinstance(conf, dict) else None
    return str(found) if found else None


def run_dir(site: dict[str, Any] | None, given: str | Path | None = None) -> Path | None:
    """Where a run or the health gate writes its textfile: --textfile-dir, else the site's
    setting (site_dir), else $RACKREADY_TEXTFILE_DIR; None: nowhere."""
    chosen = given or site_dir(site) or os.environ.get(ENV_DIR)
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
    problem = replace(directory, "run", lambda: run_exposition(doc, duration, finished or 0.0))
    if problem:
        import sys

        print(problem, file=sys.stderr)
        return None
    return directory / "rackready-run.prom"
