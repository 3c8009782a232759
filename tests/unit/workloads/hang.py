"""Testing only: a workload that forms (or joins) the process group, records its pid and a
child's pid, then hangs; the launcher's deadline must kill all of it."""

from __future__ import annotations

import subprocess
import time

from validation.workloads.common import base_parser, init, run_main


def main(argv: list[str] | None = None) -> int:
    p = base_parser("hang")
    a = p.parse_args(argv)
    d = init(a.device)
    a.out.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen(["sleep", "600"])  # a grandchild of torchrun, in its session
    import os

    (a.out / f"pids.rank{d.rank}").write_text(f"{os.getpid()} {child.pid}\n")
    while True:
        time.sleep(1)


if __name__ == "__main__":
    raise SystemExit(run_main(main))
