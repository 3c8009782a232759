"""What changed between two runs of the same node (e.g. a retest after an RMA)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackready.report import naming
from rackready.report.build import build_documents
from rackready.report.document import is_number

# Labels that name a part, not a position: a replaced GPU keeps its index but not these.
IDENTITY_LABELS = ("serial", "uuid")
DEFAULT_NOISE = 0.05  # relative change below which a repeat measurement is noise


@dataclass
class NodeDiff:
    node: str
    outcome: tuple[str | None, str | None]
    verdict_changes: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    measurement_deltas: list[tuple[str, float, float, str, float]] = field(default_factory=list)
    identity_changes: list[tuple[str, Any, Any]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return (self.outcome[0] != self.outcome[1] or bool(self.verdict_changes)
                or bool(self.measurement_deltas) or bool(self.identity_changes))


@dataclass
class RunDiff:
    run_a: str
    run_b: str
    nodes: list[NodeDiff]
    notes: list[str] = field(default_factory=list)


def _key(check: str, metric: str, labels: dict[str, str]) -> str:
    kept = {k: v for k, v in labels.items() if k not in IDENTITY_LABELS}
    text = naming.labels_text(kept)
    return f"{check}/{metric}" + (f"[{text}]" if text else "")


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """{"gpus": [{"serial": "x"}]} -> {"gpus[0].serial": "x"}; GPUs keyed by their index."""
    out: dict[str, Any] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            idx = v.get("index", i) if isinstance(v, dict) else i
            out.update(flatten(v, f"{prefix}[{idx}]"))
    else:
        out[prefix] = obj
    return out


def compare_nodes(a: dict[str, Any], b: dict[str, Any], noise: float = DEFAULT_NOISE) -> NodeDiff:
    nd = NodeDiff(node=b["node"], outcome=(a["outcome"], b["outcome"]))
    va = {_key(v["check"], v["metric"], v["labels"]): v["outcome"] for v in a["verdicts"]}
    vb = {_key(v["check"], v["metric"], v["labels"]): v["outcome"] for v in b["verdicts"]}
    nd.verdict_changes = [(k, va.get(k), vb.get(k)) for k in sorted(set(va) | set(vb))
                          if va.get(k) != vb.get(k)]

    def scalars(doc: dict[str, Any]) -> dict[str, tuple[float, str]]:
        return {_key(m["check"], m["name"], m["labels"]): (float(m["value"]), m["unit"])
                for m in doc["measurements"] if not m["series"] and is_number(m["value"])}

    ma, mb = scalars(a), scalars(b)
    for k in sorted(set(ma) & set(mb)):
        (x, unit), (y, _) = ma[k], mb[k]
        scale = max(abs(x), abs(y))
        if scale and abs(y - x) > noise * scale:
            nd.measurement_deltas.append((k, x, y, unit, (y - x) / abs(x) if x else float("inf")))
    ia = flatten({"inventory": a["inventory"], "tool_versions": a["tool_versions"]})
    ib = flatten({"inventory": b["inventory"], "tool_versions": b["tool_versions"]})
    nd.identity_changes = [(k, ia.get(k), ib.get(k)) for k in sorted(set(ia) | set(ib))
                           if ia.get(k) != ib.get(k)]
    return nd


def compare_runs(run_a: Path, run_b: Path, noise: float = DEFAULT_NOISE) -> RunDiff:
    rack_a, docs_a = build_documents(Path(run_a))
    rack_b, docs_b = build_documents(Path(run_b))
    by_a = {d["node"]: d for d in docs_a}
    by_b = {d["node"]: d for d in docs_b}
    diff = RunDiff(run_a=rack_a["run_id"], run_b=rack_b["run_id"], nodes=[])
    if len(by_a) == 1 and len(by_b) == 1 and set(by_a) != set(by_b):
        diff.notes.append(f"comparing node {docs_a[0]['node']} with node {docs_b[0]['node']}")
        pairs = [(docs_a[0], docs_b[0])]
    else:
        pairs = [(by_a[n], by_b[n]) for n in sorted(set(by_a) & set(by_b))]
        for n in sorted(set(by_a) ^ set(by_b)):
            diff.notes.append(f"node {n} is only in run {'A' if n in by_a else 'B'}")
    diff.nodes = [compare_nodes(a, b, noise) for a, b in pairs]
    return diff


def _fmt(v: Any) -> str:
    return "absent" if v is None else str(v)


def format_diff(diff: RunDiff, noise: float = DEFAULT_NOISE) -> str:
    lines = [f"run A {diff.run_a} -> run B {diff.run_b}", *diff.notes]
    for nd in diff.nodes:
        a, b = nd.outcome
        lines.append(f"node {nd.node}: {a} -> {b}" if a != b else f"node {nd.node}: {b} (same)")
        if not nd.changed:
            lines.append("  no changes beyond noise")
        for path, x, y in nd.identity_changes:
            what = " (part replaced)" if path.endswith((".serial", ".uuid")) else ""
            lines.append(f"  identity  {path}: {_fmt(x)} -> {_fmt(y)}{what}")
        for k, x, y in nd.verdict_changes:
            lines.append(f"  verdict   {k}: {_fmt(x)} -> {_fmt(y)}")
        for k, x, y, unit, rel in nd.measurement_deltas:
            lines.append(f"  measured  {k}: {naming.value_text(x, unit)} -> "
                         f"{naming.value_text(y, unit)} ({rel:+.1%}, noise ±{noise:.0%})")
    return "\n".join(lines) + "\n"


def diff_runs(run_a: Path, run_b: Path, noise: float = DEFAULT_NOISE) -> str:
    """Readable diff of two runs: outcome, verdict, measurement and identity changes."""
    return format_diff(compare_runs(run_a, run_b, noise), noise)
