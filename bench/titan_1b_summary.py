"""Both columns of bench/titan_1b_compare.sh from its logs: tokens/s (median over the steps
after the 4th) and peak reserved memory, torchtitan's from its step lines, the reference
job's from its measurements.

    python3 bench/titan_1b_summary.py OUT_DIR
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STEP = re.compile(r"step:\s*(\d+).*?memory:\s*([\d.]+)GiB.*?tps:\s*([\d,]+)")


def titan(log: Path) -> tuple[float | None, float | None]:
    rows = _STEP.findall(_ANSI.sub("", log.read_text(errors="replace"))) if log.exists() else []
    tps = [int(t.replace(",", "")) for s, _, t in rows if int(s) > 4]
    mem = [float(m) for _, m, _ in rows]
    return (statistics.median(tps) if tps else None), (max(mem) if mem else None)


def ours(jsonl: Path) -> tuple[float | None, float | None]:
    got: dict[str, float] = {}
    for line in jsonl.read_text().splitlines() if jsonl.exists() else []:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("name") in ("fsdp.tokens_per_s_per_gpu", "fsdp.peak_reserved_gib"):
            got[rec["name"]] = rec["value"]
    return got.get("fsdp.tokens_per_s_per_gpu"), got.get("fsdp.peak_reserved_gib")


def main(out: Path) -> None:
    print("| AC | torchtitan tokens/s | reference job tokens/s | ratio | torchtitan GiB "
          "| reference job GiB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for ac in ("none", "selective"):
        t_tps, t_mem = titan(out / f"titan-{ac}.log")
        o_tps, o_mem = ours(out / f"ours-{ac}.jsonl")
        ratio = f"{o_tps / t_tps:.3f}" if o_tps and t_tps else "n/a"
        print(f"| {ac} | {t_tps} | {o_tps} | {ratio} | {t_mem} | {o_mem} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
