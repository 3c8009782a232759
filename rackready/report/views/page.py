"""What a report page says in words: banners, the reason line, identity, BMC, sign-off,
references (pure functions of a report document; nothing here decides)."""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

from rackready.report import naming

OUTCOMES = ("PASS", "FAIL", "PARTIAL", "INCOMPLETE")

BANNERS = {
    "PARTIAL": "PARTIAL \u2014 only part of the acceptance suite was run; not a full acceptance",
    "INCOMPLETE": "INCOMPLETE \u2014 the run did not finish; no verdict can pass",
}

SIM_BANNER = "SIMULATED \u2014 lab run on simulated hardware; not a hardware acceptance"


def _num(v: Any) -> float | None:
    """v as a finite float, else None: a label "nan" or "1e400", a 400-digit integer."""
    if isinstance(v, bool) or v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def _gpu_sort(g: str) -> tuple[bool, int, str]:
    return (not g.isdigit(), int(g) if g.isdigit() else 0, g)


def banners(doc: dict[str, Any]) -> list[str]:
    """Lines repeated on every page: simulated hardware, partial or unfinished runs."""
    out = [SIM_BANNER] if doc.get("simulated") else []
    if doc.get("outcome") in BANNERS:
        out.append(BANNERS[doc["outcome"]])
    return out


def outcome_reason(doc: dict[str, Any]) -> str:
    """One line under the verdict: the judge's reason (rackready.decide.outcome)."""
    return naming.clean(doc.get("outcome_reason") or "")


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


def signoff(doc: dict[str, Any]) -> dict[str, Any]:
    s = doc.get("signoff") or {}
    return {"signed": bool(s.get("name")), "name": s.get("name"), "date": s.get("date"),
            "statement": s.get("statement") or "", "algorithm": s.get("algorithm"),
            "key_fingerprint": s.get("key_fingerprint"), "sha256": doc.get("sha256", "")}


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


def css_string(text: str) -> str:
    """A CSS string literal body: quotes, backslashes and non-ASCII as escapes."""
    return "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\<>' else f"\\{ord(ch):x} "
                   for ch in naming.clean(text))
