"""What the templates show, derived from a report document (pure functions, no rendering).

Nothing here decides an outcome: the verdict shown is doc["outcome"] and the
rows are the judge's verdicts as given. Views only group, count and compare.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rackready.report import naming

OUTCOMES = ("PASS", "FAIL", "PARTIAL", "INCOMPLETE")

BANNERS = {
    "PARTIAL": "PARTIAL \u2014 only part of the acceptance suite was run; not a full acceptance",
    "INCOMPLETE": "INCOMPLETE \u2014 the run did not finish; no verdict can pass",
}
SIM_BANNER = "SIMULATED \u2014 lab run on simulated hardware; not a hardware acceptance"

# Key figures: metric prefixes that measure performance, in the order a reader scans them.
KEY_PREFIXES = ("gemm.tflops", "gemm.power_fraction", "hbm.bandwidth", "nccl.busbw",
                "nccl.pair_busbw", "p2p.", "host.", "fsdp.", "storage.")


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _gpu_sort(g: str) -> tuple[bool, int, str]:
    return (not g.isdigit(), int(g) if g.isdigit() else 0, g)


def component_of(v: dict[str, Any], inventory: dict[str, Any]) -> str:
    """The failing part in words: the judge's own wording when it gave one."""
    return v.get("component") or naming.component(v.get("labels") or {}, inventory)


# ---------------------------------------------------------------- decision and identity

def banners(doc: dict[str, Any]) -> list[str]:
    """Lines repeated on every page: simulated hardware, partial or unfinished runs."""
    out = [SIM_BANNER] if doc.get("simulated") else []
    if doc.get("outcome") in BANNERS:
        out.append(BANNERS[doc["outcome"]])
    return out


def outcome_reason(doc: dict[str, Any]) -> str:
    """One line under the verdict: the judge's reason, else what the rows say."""
    if doc.get("outcome_reason"):
        return naming.clean(doc["outcome_reason"])
    outcome = doc.get("outcome")
    fails = [v for v in doc.get("verdicts", []) if v.get("outcome") == "fail"]
    if outcome == "PASS":
        return ""
    if outcome == "FAIL" and fails:
        checks = list(dict.fromkeys(v["check"] for v in fails))
        return f"{len(fails)} failing verdict{'s' * (len(fails) != 1)}: {', '.join(checks)}"
    problems = doc.get("problems") or []
    if problems:
        return naming.clean(problems[0])
    return {"INCOMPLETE": "the run did not finish", "PARTIAL": "only part of the suite ran"}.get(
        outcome, "")


def fmt_time(ts: str | None) -> str:
    if not ts:
        return "\u2014"
    try:
        t = datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
    except ValueError:
        return naming.clean(ts)
    offset = t.utcoffset()
    zone = "UTC" if offset is not None and not offset.total_seconds() else t.strftime("%z")
    return f"{t:%Y-%m-%d %H:%M:%S} {zone}".strip()


def duration(start: str | None, end: str | None) -> str:
    try:
        a = datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        b = datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except ValueError:
        return ""
    s = int((b - a).total_seconds())
    if s < 0:
        return ""
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h} h {m} min" if h else (f"{m} min {sec} s" if m else f"{sec} s")


def gpus(inventory: dict[str, Any]) -> list[dict[str, Any]]:
    """inventory["gpus"] as a list with an "index", whatever shape it came in."""
    raw = inventory.get("gpus")
    if isinstance(raw, dict):
        return [{"index": str(k), **v} for k, v in sorted(raw.items(),
                                                           key=lambda kv: _gpu_sort(str(kv[0])))
                if isinstance(v, dict)]
    if isinstance(raw, list):
        return [{**g, "index": str(g.get("index", i))} for i, g in enumerate(raw)
                if isinstance(g, dict)]
    return []


def _first(d: dict[str, Any], *keys: str) -> Any:
    return next((d[k] for k in keys if d.get(k) not in (None, "")), None)


def identity(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """Who and what was tested, as (label, text) pairs for page 1."""
    inv = doc.get("inventory") or {}
    rows: list[tuple[str, str]] = []
    node = str(doc.get("node", ""))
    host = doc.get("hostname")
    rows.append(("Node", node + (f" (host {host})" if host and host != node else "")))
    scope = doc.get("scope") or {}
    pl = f"{doc.get('profile') or '—'} · {doc.get('level') or '—'}"
    if scope.get("partial") and scope.get("only"):
        pl += f" · only {', '.join(map(str, scope['only']))}"
    rows.append(("Profile · level", pl))
    chassis = _first(inv, "chassis", "system_model", "product")
    if chassis:
        serial = _first(inv, "system_serial", "service_tag", "chassis_serial")
        rows.append(("System", f"{chassis}" + (f" (serial {serial})" if serial else "")))
    gl = gpus(inv)
    if gl:
        models = sorted({str(g.get("model") or g.get("name") or "GPU") for g in gl})
        mem = sorted({str(g["memory_total"]) for g in gl if g.get("memory_total")})
        text = f"{len(gl)} × {' / '.join(models)}" + (f", {mem[0]} MiB each" if len(mem) == 1
                                                       else "")
        rows.append(("GPUs", text))
        rows.append(("GPU serials", " · ".join(f"{g['index']}: {g.get('serial') or '?'}"
                                               for g in gl)))
        vb = sorted({str(g["vbios"]) for g in gl if g.get("vbios")})
        if vb:
            rows.append(("VBIOS", ", ".join(vb)))
    soft = [(name, _first(inv, *keys)) for name, keys in (
        ("driver", ("gpu_driver_version", "driver")), ("CUDA", ("gpu_cuda_version", "cuda")),
        ("NCCL", ("nccl_version", "nccl")), ("fabric manager", ("fabric_manager",)))]
    soft = [(n, v) for n, v in soft if v]
    if not soft and (doc.get("tool_versions") or {}).get("nvidia_driver"):
        soft = [("driver", doc["tool_versions"]["nvidia_driver"])]
    if soft:
        rows.append(("Software", " · ".join(f"{n} {v}" for n, v in soft)))
    rows += bmc_identity(doc)
    rows.append(("Run", str(doc.get("run_id", ""))))
    took = duration(doc.get("started"), doc.get("finished"))
    start, end = fmt_time(doc.get("started")), fmt_time(doc.get("finished"))
    if start[:10] == end[:10] and len(end) > 11:
        end = end[11:]  # same day: the time alone
    rows.append(("Started → finished", f"{start} → {end}" + (f" ({took})" if took else "")))
    judge = doc.get("judge") or {}
    if judge.get("by"):
        sha = judge.get("profile_sha256") or ""
        rows.append(("Judged by", f"{judge['by']} against {judge.get('profile') or '—'}"
                     + (f" (profile sha256 {sha[:12]}…)" if sha else "")))
    return [(k, naming.clean(v)) for k, v in rows]


# ---------------------------------------------------------------- out of band (issue 17)

# firmware components in the order a technician reads them
_FW_ORDER = ("bios", "bmc", "cpld", "hgx", "gpu", "nic", "drive", "psu", "other")
_FW_NAMES = {"bios": "BIOS", "bmc": "BMC", "cpld": "CPLD", "hgx": "HGX baseboard",
             "gpu": "GPU VBIOS", "nic": "NIC", "drive": "drive", "psu": "PSU",
             "other": "other"}


def bmc_identity(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """System identity and firmware as the BMC reported them (page 1)."""
    bmc = doc.get("bmc") or {}
    ident = bmc.get("identity") or {}
    if not ident:
        if bmc.get("problem"):
            return [("BMC", f"not read: {bmc['problem']}")]
        return []
    rows = []
    what = " ".join(x for x in (ident.get("manufacturer"), ident.get("model")) if x)
    extra = [f"serial {ident['serial']}" for _ in [0] if ident.get("serial")]
    if ident.get("service_tag"):
        extra.append(f"service tag {ident['service_tag']}")
    if ident.get("chassis_serial") and ident.get("chassis_serial") != ident.get("serial"):
        extra.append(f"chassis {ident.get('chassis_model') or ''} {ident['chassis_serial']}")
    rows.append(("System (BMC)", (what or "?") + (f" ({', '.join(extra)})" if extra else "")))
    by: dict[str, list[str]] = {}
    for fw in ident.get("firmware") or []:
        versions = by.setdefault(str(fw.get("component") or "other"), [])
        if fw.get("version") and str(fw["version"]) not in versions:
            versions.append(str(fw["version"]))
    parts = [f"{_FW_NAMES.get(c, c)} {' / '.join(by[c])}" for c in _FW_ORDER if by.get(c)]
    if parts:
        rows.append(("Firmware", " · ".join(parts)))
    psus = ident.get("psus") or []
    if psus:
        models = sorted({str(p.get("model") or "?") for p in psus})
        serials = ", ".join(str(p.get("serial") or "?") for p in psus)
        rows.append(("Power supplies", f"{len(psus)} × {' / '.join(models)} (serials {serials})"))
    if ident.get("power_on_hours") is not None:
        rows.append(("Power-on hours", f"{ident['power_on_hours']:g} h"))
    return rows


def bmc_view(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The appendix of BMC facts: every firmware item and the log before handoff."""
    bmc = doc.get("bmc")
    if not isinstance(bmc, dict):
        return None
    ident = bmc.get("identity") or {}
    c = naming.clean

    def row(d: dict[str, Any], *keys: str) -> tuple[str, ...]:
        return tuple(c(d.get(k, "")) for k in keys)

    return {
        "address": c(bmc.get("address") or ""), "problem": c(bmc.get("problem") or ""),
        "since": c(bmc.get("since") or ""), "since_source": c(bmc.get("since_source") or ""),
        "firmware": [(_FW_NAMES.get(str(f.get("component")), c(f.get("component"))),
                      *row(f, "name", "version")) for f in ident.get("firmware") or []],
        "psus": [row(p, "name", "model", "serial", "firmware") for p in ident.get("psus") or []],
        "log": [row(e, "created", "log", "severity", "message", "sensor")
                for e in bmc.get("log_excerpt") or []],
    }


# ---------------------------------------------------------------- provenance references

class References:
    """Each distinct provenance text once, numbered in the order rows cite it."""

    def __init__(self) -> None:
        self._num: dict[str, int] = {}

    def cite(self, t: dict[str, Any] | None) -> int | None:
        text = naming.clean((t or {}).get("provenance") or "").strip()
        if not text:
            return None
        return self._num.setdefault(text, len(self._num) + 1)

    def items(self) -> list[tuple[int, str]]:
        return [(n, text) for text, n in self._num.items()]


# ---------------------------------------------------------------- failures and key figures

def failures(doc: dict[str, Any], refs: References,
             outcome: str = "fail") -> list[dict[str, Any]]:
    """The verdicts of one outcome (fail, or below_expected) as the report lists them."""
    inv = doc.get("inventory") or {}
    out = []
    for v in doc.get("verdicts", []):
        if v.get("outcome") != outcome:
            continue
        out.append({
            "check": v["check"], "metric": v["metric"], "name": naming.metric_name(v["metric"]),
            "qualifier": naming.qualifier(v.get("labels") or {}),
            "component": component_of(v, inv), "fleet": v.get("scope") == "fleet",
            "measured": naming.value_text(v.get("value"), v.get("unit", "")),
            "required": naming.threshold_text(v.get("threshold")),
            "message": v.get("message", ""),
            "remediation": v.get("remediation") or "no hint recorded; escalate with this report",
            "ref": refs.cite(v.get("threshold")),
            "margin": (naming.margin(v.get("value"), v.get("threshold")) or (None, ""))[1],
        })
    return out


def _is_key(metric: str) -> bool:
    return metric.startswith(KEY_PREFIXES)


def key_figures(doc: dict[str, Any], refs: References) -> list[dict[str, Any]]:
    """One row per performance figure and variant: the weakest value against its limit.

    Rows group a metric's judged values by variant (dtype, collective); the one with
    the smallest margin stands for the group, so a reader sees how close the node came.
    """
    groups: dict[tuple[str, str], list[tuple[float, dict[str, Any]]]] = {}
    order: list[tuple[str, str]] = []
    for v in doc.get("verdicts", []):
        if v.get("outcome") not in ("pass", "fail", "below_expected") or \
                not _is_key(v["metric"]):
            continue
        m = naming.margin(v.get("value"), v.get("threshold"))
        if m is None:
            continue
        labels = v.get("labels") or {}
        variant = naming.qualifier({k: x for k, x in labels.items() if k != "size_bytes"})
        key = (v["metric"], variant)
        if key not in groups:
            order.append(key)
        groups.setdefault(key, []).append((m[0], v))
    rank = {p: i for i, p in enumerate(KEY_PREFIXES)}
    order.sort(key=lambda k: next(i for p, i in rank.items() if k[0].startswith(p)))
    rows = []
    for key in order:
        members = groups[key]
        frac, v = min(members, key=lambda fv: fv[0])
        labels = v.get("labels") or {}
        where = naming.short_place(labels)
        if "size_bytes" in labels:
            size = naming.qualifier({"size_bytes": labels["size_bytes"]})
            where = f"{where}, {size}" if where else size
        rows.append({
            "name": naming.metric_name(key[0]), "metric": key[0], "variant": key[1],
            "measured": naming.value_text(v.get("value"), v.get("unit", "")),
            "limit": naming.threshold_text(v.get("threshold"), mark=False),
            "tier": naming.tier_symbol(v.get("threshold")),
            "margin": naming.margin(v.get("value"), v.get("threshold"))[1],  # type: ignore[index]
            "frac": frac, "outcome": v["outcome"], "n": len(members),
            "where": where if len(members) > 1 else "",
            "ref": refs.cite(v.get("threshold")),
        })
    return rows


# ---------------------------------------------------------------- appendix

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
            key = (v["metric"], naming.qualifier(labels), v["outcome"],
                   naming.threshold_text(t), (t or {}).get("provenance"), v.get("scope"))
            # Failures stay one row each: every failing part is named.
            if v["outcome"] == "fail":
                key = (*key, id(v))
            merged.setdefault(key, []).append(v)
        for members in merged.values():
            v = members[0]
            labels = v.get("labels") or {}
            if v["outcome"] == "fail":
                where = component_of(v, inv)
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


def signoff(doc: dict[str, Any]) -> dict[str, Any]:
    s = doc.get("signoff") or {}
    return {"signed": bool(s.get("name")), "name": s.get("name"), "date": s.get("date"),
            "statement": s.get("statement") or "", "algorithm": s.get("algorithm"),
            "key_fingerprint": s.get("key_fingerprint"), "sha256": doc.get("sha256", "")}


# ---------------------------------------------------------------- plot data

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


NCCL_TESTS_REF = re.compile(r"nccl-tests (?P<ver>[\d.]+)[^:]*:\s*(?P<bw>[\d.]+) GB/s at "
                            r"(?P<size>[\d.]+) (?P<unit>KiB|MiB|GiB)")
BENCH_REF = re.compile(r"(?P<bw>[\d,.]+) GB/s (?P<op>[a-z_]+) (?P<size>[\d.]+) "
                       r"(?P<unit>KiB|MiB|GiB) \(torch")
_UNIT = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def provenance_references(text: str, op: str) -> dict[str, tuple[float, float, str]]:
    """Reference points quoted in a limit's provenance: {"nccl-tests"|"bench": (size, GB/s, note)}.

    Only numbers the profile's author wrote down; an op the text does not name
    explicitly (e.g. one reference borrowed for another op) yields nothing.
    """
    out = {}
    m = NCCL_TESTS_REF.search(text)
    if m:
        out["nccl-tests"] = (float(m["size"]) * _UNIT[m["unit"]], float(m["bw"]),
                             f"nccl-tests {m['ver']}")
    for m in BENCH_REF.finditer(text):
        if m["op"] == op:
            out["bench"] = (float(m["size"]) * _UNIT[m["unit"]],
                            float(m["bw"].replace(",", "")), "bench")
    return out


def busbw_figure(doc: dict[str, Any]) -> Figure | None:
    ms = [m for m in doc.get("measurements", []) if m["name"] == "nccl.busbw"
          and _num(m["labels"].get("size_bytes")) is not None and _num(m["value"]) is not None]
    if not ms:
        return None
    ops = list(dict.fromkeys(m["labels"].get("op", "all") for m in ms))
    unit = ms[0].get("unit") or "GB/s"
    panels = []
    for op in ops:
        # issue 15: one line per mode (in place / out of place), never one zig-zag line
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
            if "size_bytes" in tl and _num(tl["size_bytes"]) is not None:
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


def node_figures(doc: dict[str, Any]) -> list[Figure]:
    return [f for f in (busbw_figure(doc), burnin_figure(doc), per_gpu_figure(doc),
                        loss_figure(doc)) if f]


# ---------------------------------------------------------------- rack

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
            "failures": [{**f, "component": component_of(f, (d or {}).get("inventory") or {})}
                         for f in e.get("failures") or []],
            "problems": [naming.clean(p) for p in e.get("problems") or []],
            "hostname": (d or {}).get("hostname"),
            "limits": naming.limits_line(e.get("limits")) if e.get("limits") else "",
        })
    rows.sort(key=lambda r: (order.get(r["outcome"], 1), r["node"]))
    return rows


# --- rack-level step (rackready.rack_checks) ---

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

# --- end rack-level step ---


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
    if rack.get("outcome_reason"):
        return naming.clean(rack["outcome_reason"])
    nodes = rack.get("nodes", [])
    bad = [e["node"] for e in nodes if e.get("outcome") == rack.get("outcome")]
    if rack.get("outcome") == "PASS":
        return f"all {len(nodes)} nodes passed"
    word = {"FAIL": "failed", "INCOMPLETE": "did not finish", "PARTIAL": "ran part of the suite"}
    return (f"{len(bad)} of {len(nodes)} node{'s' * (len(nodes) != 1)} "
            f"{word.get(rack.get('outcome', ''), 'did not pass')}: {', '.join(bad)}")


def css_string(text: str) -> str:
    """A CSS string literal body: quotes, backslashes and non-ASCII as escapes."""
    return "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\<>' else f"\\{ord(ch):x} "
                   for ch in naming.clean(text))
