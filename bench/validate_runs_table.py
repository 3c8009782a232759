"""One row per validation run of bench/validate_on_gpu.sh, as the controller judges it.

    python3 bench/validate_runs_table.py RUN_DIR...   -> a Markdown table on stdout

Each RUN_DIR is one run as the bench packs it (RUN_DIR/<node>/result.json), already judged
by `invoke report --run RUN_DIR --format json` (RUN_DIR/report/node-<node>.json): the
outcome and failed verdicts are the controller's, the figures the node's measurements.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

FIGURES = (  # metric, labels that must match, format
    ("fsdp.tokens_per_s_per_gpu", {}, "{:,.0f}"),
    ("fsdp.mfu", {}, "{:.4f}"),
    ("gemm.tflops", {"dtype": "bf16"}, "{:.1f}"),
    ("gemm.tflops", {"dtype": "fp8"}, "{:.1f}"),
    ("gemm.load_sm_clock_mhz", {"dtype": "bf16"}, "{:.0f}"),
    ("hbm.bandwidth", {}, "{:.0f}"),
    ("fsdp.ckpt_write_gbps", {}, "{:.2f}"),
    ("fsdp.ckpt_read_gbps", {}, "{:.2f}"),
    ("host.h2d_bandwidth", {}, "{:.1f}"),
)


def _values(result: dict[str, Any], name: str, want: dict[str, str]) -> list[float]:
    return [float(m["value"]) for c in result["checks"] for m in c["measurements"]
            if m["name"] == name and all(m["labels"].get(k) == v for k, v in want.items())
            and isinstance(m["value"], (int, float)) and not isinstance(m["value"], bool)]


def row(run: Path) -> str:
    node = next(p for p in run.iterdir() if (p / "result.json").is_file())
    result = json.loads((node / "result.json").read_text())
    report = json.loads((run / "report" / f"node-{node.name}.json").read_text())
    failed = sorted({f"{v['check']}/{v['metric']}" for v in report["verdicts"]
                     if v["outcome"] == "fail"})
    below = sum(1 for v in report["verdicts"] if v["outcome"] == "below_expected")
    wall = sum(float(c.get("duration_s") or 0) for c in result["checks"])
    cells = []
    for name, want, fmt in FIGURES:
        vals = _values(result, name, want)
        cells.append(fmt.format(statistics.median(vals)) if vals else "—")
    return (f"| {run.name} | {result['level']} | {wall:.0f} | {report['outcome']} | "
            f"{', '.join(failed) or '—'} | {below} | " + " | ".join(cells) + " |")


def main(argv: list[str]) -> int:
    heads = ["run", "level", "checks s", "outcome", "failed verdicts", "below expected",
             *(f"{n} {'/'.join(w.values())}".strip() for n, w, _ in FIGURES)]
    print("| " + " | ".join(heads) + " |")
    print("|" + " --- |" * len(heads))
    for a in argv:
        print(row(Path(a)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
