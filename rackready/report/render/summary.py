"""The terminal summary: one row per node, failed checks with the component named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rackready.report.build import build_documents
from rackready.report.naming import limits_line
from rackready.sanitize import strip_control


def _failed(doc: dict[str, Any]) -> list[str]:
    out = []
    for v in doc["verdicts"]:
        if v["outcome"] in ("fail", "below_expected"):
            where = v.get("component") or ""
            mark = " (below expected, provisional)" if v["outcome"] == "below_expected" else ""
            out.append(strip_control(f"{v['check']}/{v['metric']}"
                                     + (f" on {where}" if where else "") + mark))
    if doc["outcome"] in ("INCOMPLETE", "PARTIAL"):
        out.insert(0, strip_control(doc["outcome_reason"] or "; ".join(doc["problems"])))
    return out


def summary_table(rack: dict[str, Any], node_docs: list[dict[str, Any]]) -> str:
    rows = [(d["node"], d["outcome"], _failed(d)) for d in node_docs]
    w_node = max(len("NODE"), *(len(r[0]) for r in rows))
    lines = []
    if rack["simulated"]:
        lines.append("SIMULATED run (lab hardware): not a hardware acceptance")
    lines.append(f"run {rack['run_id']}: {rack['outcome']}  "
                 f"({rack['counts']['PASS']} pass, {rack['counts']['FAIL']} fail, "
                 f"{rack['counts']['INCOMPLETE']} incomplete, "
                 f"{rack['counts']['PARTIAL']} partial)")
    if rack["partial"]:
        lines.append("PARTIAL run (narrowed scope): not an acceptance")
    lines.append(f"{'NODE':<{w_node}}  {'OUTCOME':<10}  FAILED OR BELOW EXPECTED")
    for node, outcome, failed in rows:
        lines.append(f"{strip_control(node):<{w_node}}  {outcome:<10}  "
                     f"{failed[0] if failed else '-'}")
        lines += [f"{'':<{w_node}}  {'':<10}  {f}" for f in failed[1:]]
    for d in node_docs:
        lines.append(f"{strip_control(d['node'])}: limits: {limits_line(d.get('limits'))}")
    return "\n".join(lines) + "\n"


def terminal_summary(run_dir: Path) -> str:
    """Plain-text table for the run, from its report documents (built in memory)."""
    rack, node_docs = build_documents(Path(run_dir))
    return summary_table(rack, node_docs)
