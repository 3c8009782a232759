"""Provisioning fan-out on the lab: wall time for 4 nodes against 1, each from fresh.

    sudo .venv/bin/python bench/provision_fanout.py [--nodes 4] [--out bench/results/x.md]

Target (issue 3): 4 nodes take at most 1.5x the time of 1. Each size boots a
fresh lab (lab.down, lab.up --nodes N) so every node starts unprovisioned;
only the provisioning run itself is timed. Results: a markdown table with the
machine, versions, date and command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rackready.lab import lab  # noqa: E402
from rackready.provision import run_playbook  # noqa: E402


def timed_converge(nodes: int) -> tuple[float, dict[str, int], int]:
    lab.down(progress=lambda m: None)
    lab.up(nodes, progress=lambda m: None)
    t0 = time.monotonic()
    result = run_playbook("lab", quiet=True)
    wall = time.monotonic() - t0
    return wall, result.changed(), result.rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4, help="fan-out size compared with 1")
    ap.add_argument("--out", type=Path, default=None, help="append the table to this file")
    args = ap.parse_args()
    rows = []
    for n in (1, args.nodes):
        wall, changed, rc = timed_converge(n)
        rows.append((n, wall, rc, changed))
        print(f"{n} node(s): {wall:.1f}s rc={rc} changed={changed}", flush=True)
    lab.down(progress=lambda m: None)
    ratio = rows[1][1] / rows[0][1]
    import ansible

    table = [
        f"## Provisioning fan-out, {dt.date.today().isoformat()}",
        "",
        f"machine: {platform.node()} {os.cpu_count()} cores, {platform.platform()}; "
        f"ansible-core {ansible.__version__}",
        f"command: `{' '.join(sys.argv)}`",
        "",
        "| nodes | converge wall (s) | rc |",
        "| ---: | ---: | ---: |",
        *[f"| {n} | {w:.1f} | {rc} |" for n, w, rc, _ in rows],
        "",
        f"ratio {args.nodes} vs 1: **{ratio:.2f}** (target <= 1.5)",
        "",
    ]
    text = "\n".join(table)
    print(text)
    if args.out:
        with args.out.open("a") as f:
            f.write(text + "\n")
    return 0 if all(r[2] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
