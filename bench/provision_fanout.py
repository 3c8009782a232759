"""Provisioning fan-out on the lab: wall time for 4 nodes against 1, each from fresh.

    sudo .venv/bin/python bench/provision_fanout.py [--nodes 4] [--out bench/results/x.md]

Target: 4 nodes take at most 1.5x the time of 1. Each size boots a
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

from rackready.steps.provision import run_playbook  # noqa: E402
from rackready_lab import lab  # noqa: E402


def busy_cpu_seconds() -> float:
    """CPU time spent by everything on this machine (controller and lab nodes share it)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def timed_converge(nodes: int) -> tuple[float, float, dict[str, int], int]:
    lab.down(progress=lambda m: None)
    lab.up(nodes, progress=lambda m: None)
    t0, c0 = time.monotonic(), busy_cpu_seconds()
    result = run_playbook("lab", quiet=True)
    wall, busy = time.monotonic() - t0, busy_cpu_seconds() - c0
    return wall, busy, result.changed(), result.rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4, help="fan-out size compared with 1")
    ap.add_argument("--out", type=Path, default=None, help="append the table to this file")
    args = ap.parse_args()
    rows = []
    for n in (1, args.nodes):
        wall, busy, changed, rc = timed_converge(n)
        rows.append((n, wall, busy, rc))
        print(f"{n} node(s): {wall:.1f}s busy={busy:.0f} CPU-s rc={rc} changed={changed}",
              flush=True)
    lab.down(progress=lambda m: None)
    ratio = rows[1][1] / rows[0][1]
    cores = os.cpu_count() or 1
    import ansible

    table = [
        f"## Provisioning fan-out, {dt.date.today().isoformat()}",
        "",
        f"machine: {platform.node()} {os.cpu_count()} cores, {platform.platform()}; "
        f"ansible-core {ansible.__version__}",
        f"command: `{' '.join(sys.argv)}`",
        "",
        "| nodes | converge wall (s) | busy CPU (s) | CPU floor: busy / cores (s) | rc |",
        "| ---: | ---: | ---: | ---: | ---: |",
        *[f"| {n} | {w:.1f} | {b:.0f} | {b / cores:.0f} | {rc} |" for n, w, b, rc in rows],
        "",
        f"ratio {args.nodes} vs 1: **{ratio:.2f}** (target <= 1.5)",
        "",
        "The lab's nodes and the controller share this machine's cores: when the wall",
        "time of the larger run is close to its CPU floor, the cores are the limit.",
        "",
    ]
    text = "\n".join(table)
    print(text)
    ok = all(r[3] == 0 for r in rows)
    if args.out and ok:  # a failed converge is no measurement
        with args.out.open("a") as f:
            f.write(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
