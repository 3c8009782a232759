"""Where a validation run's wall time went: one row per check, against its budget share.

    python3 bench/walltime.py RESULT.json[.gz] [--gpus N]   -> a Markdown table on stdout

Reads a node's result.json (each check's `duration_s`, the run's started/finished) and the
level's shares in validation/budgets.yml; N defaults to the GPU count in the result's
inventory. Time outside the checks (the start-of-run counters, the worker group's stop)
shows as its own row.

A share is the check's slice of the level's budget in validation/budgets.yml: a plan, from
which the check's timeout derives (share x factor + margin), not a limit; "over" marks a
check whose share wants measuring again, not a failure. "—": the level gives the check no
share (not one of the level's checks, e.g. listed as skipped there, or run with --only).
"""

from __future__ import annotations

import gzip
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from validation import budgets  # noqa: E402


def load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return dict(json.load(fh))


def rows(result: dict[str, Any], gpus: int) -> list[dict[str, Any]]:
    level = str(result["level"])
    out = []
    for c in result["checks"]:
        share = budgets.share_s(level, c["check"], gpus)
        out.append({"check": c["check"], "status": c["status"],
                    "wall_s": float(c.get("duration_s") or 0.0), "share_s": share})
    return out


def table(result: dict[str, Any], gpus: int | None = None) -> str:
    gpus = gpus or len((result.get("inventory") or {}).get("gpus") or {}) or 8
    level = str(result["level"])
    rs = rows(result, gpus)
    wall = (datetime.fromisoformat(result["finished"])
            - datetime.fromisoformat(result["started"])).total_seconds()
    in_checks = sum(r["wall_s"] for r in rs)
    budget = budgets.level_budget_s(level, gpus)
    lines = [f"Wall time of {result.get('node', '?')} at level {level} on {gpus} GPUs: "
             f"{wall:.1f} s (budget {budget:g} s)", "",
             "share: the check's slice of the level's budget (validation/budgets.yml), a plan "
             "its timeout derives from; over: beyond that plan, not a failure; —: no share at "
             "this level.", "",
             "| check | status | wall s | share s | over |", "| --- | --- | ---: | ---: | --- |"]
    for r in sorted(rs, key=lambda r: -r["wall_s"]):
        share = r["share_s"]
        over = "" if share is None or r["wall_s"] <= share else f"+{r['wall_s'] - share:.1f}"
        lines.append(f"| {r['check']} | {r['status']} | {r['wall_s']:.1f} | "
                     f"{'—' if share is None else f'{share:g}'} | {over} |")
    lines.append(f"| (outside the checks) | | {wall - in_checks:.1f} | | |")
    lines.append(f"| **total** | | **{wall:.1f}** | {budget:g} | "
                 f"{'' if wall <= budget else f'+{wall - budget:.1f}'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("usage: walltime.py RESULT.json[.gz] [--gpus N]", file=sys.stderr)
        return 2
    gpus = None
    if "--gpus" in argv:
        try:
            gpus = int(argv[argv.index("--gpus") + 1])
        except (IndexError, ValueError):
            print("error: --gpus needs a number", file=sys.stderr)
            return 2
    try:
        result = load(Path(argv[0]))
        sys.stdout.write(table(result, gpus))
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {argv[0]}: not a readable result.json ({e})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
