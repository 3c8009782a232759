"""nccl-tests stand-in (`<op>_perf`, single process, -g N): nccl-tests 2.19's output format,
figures scaled from the real 2x H200 captures (captures/nccl-tests-<op>.txt).

busbw per size is the capture's (nearest size, log scale): NVSwitch keeps busbw roughly
flat with the GPU count; algbw, time and count follow the size and N as nccl-tests computes
them. broadcast has no capture: sendrecv's figures (both move the buffer once) scaled by the
broadcast/sendrecv busbw ratio torch.distributed measured on the same 2x H200 (bench results
2026-11-30: 327.4/252.9 at 64 MiB, 356.0/301.7, 367.3/358.6, 370.8/364.4 at 4 GiB).
A NVLink down anywhere halves busbw; a missing fabric manager on NVSwitch fails as NCCL does.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from .common import ToolError, load_state, read_capture, run, visible_gpus

USAGE = ("USAGE: <op>_perf [-t nthreads] [-g ngpus] [-b minbytes] [-e maxbytes] [-f factor] "
         "[-d datatype] [-w warmup] [-n iters] [-c check]")
OPS = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv")
DTYPE_BYTES = {"bfloat16": 2, "half": 2, "float": 4, "double": 8, "int8": 1, "int32": 4}
# size -> broadcast/sendrecv busbw, torch.distributed on 2x H200 (see the docstring)
BROADCAST_OVER_SENDRECV = {1 << 26: 327.4 / 252.9, 1 << 28: 356.0 / 301.7,
                           1 << 30: 367.3 / 358.6, 1 << 32: 370.8 / 364.4}
SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' PERFORMANCE.md: busbw = algbw x factor."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    return 1.0


def _bytes(text: str) -> int:
    t = text.strip().upper()
    unit = t[-1] if t[-1:] in SUFFIX and not t[-1].isdigit() else ""
    try:
        return int(float(t[: len(t) - len(unit)]) * SUFFIX[unit])
    except ValueError:
        raise ToolError(f"invalid size {text!r}\n{USAGE}", 1) from None


def _capture_rows(op: str) -> tuple[list[str], list[list[str]]]:
    text = read_capture(f"nccl-tests-{'sendrecv' if op == 'broadcast' else op}.txt")
    head = [ln for ln in text.splitlines() if ln.startswith("#")]
    rows = [ln.split() for ln in text.splitlines() if ln[:1] == " " and ln.split()[0].isdigit()]
    return head, rows


def _opts(argv: list[str]) -> dict[str, str]:
    opts = {"-g": "1", "-b": "32M", "-e": "32M", "-f": "2", "-d": "float", "-w": "5",
            "-n": "20", "-t": "1", "-c": "1"}
    it = iter(argv)
    for a in it:
        if a not in opts:
            raise ToolError(f"invalid option {a}\n{USAGE}", 1)
        try:
            opts[a] = next(it)
        except StopIteration:
            raise ToolError(USAGE, 1) from None
    return opts


def report(state: dict[str, Any], op: str, opts: dict[str, str]) -> str:
    gpus = visible_gpus(state)
    n = int(opts["-g"])
    if n < 1 or n > len(gpus):
        raise ToolError(f"Error: {n} GPUs requested, {len(gpus)} visible (invalid device "
                        "ordinal)", 1)
    if state["nvswitches"] and not state["services"]["nvidia-fabricmanager"]["running"]:
        raise ToolError("NCCL WARN Cuda failure 'system not yet initialized' "
                        "(the fabric manager is not running)", 1)
    dtype = opts["-d"]
    if dtype not in DTYPE_BYTES:
        raise ToolError(f"invalid type {dtype}\n{USAGE}", 1)
    lo, hi, f = _bytes(opts["-b"]), _bytes(opts["-e"]), int(opts["-f"])
    head, rows = _capture_rows(op)
    slow = 0.5 if any(not link["up"] for g in gpus[:n] for link in g["nvlinks"]) else 1.0
    note = " (sendrecv x broadcast/sendrecv, bench)" if op == "broadcast" else ""
    out = [head[0], "# hwsim stand-in (SIMULATED): busbw from a real 2x H200 nccl-tests "
                    f"capture{note}",
           f"# Collective test starting: {op}_perf",
           f"# nThread {opts['-t']} nGpus {n} minBytes {lo} maxBytes {hi} step: {f}(factor) "
           f"warmup iters: {opts['-w']} iters: {opts['-n']} agg iters: 1 validation: "
           f"{opts['-c']} graph: 0 unalign: 0", "#", "# Using devices"]
    for r, g in enumerate(gpus[:n]):
        out.append(f"#  Rank {r:>2} Group  0 Pid   4242 on {state['node']:>10} device {r:>2} "
                   f"[{g['bdf']}] {g['name']}")
    out.append("#")
    out += [h for h in head if "out-of-place" in h or "size" in h or "(B)" in h]
    size = lo
    bus_all = []
    while size <= hi:
        ref = min(rows, key=lambda row: abs(math.log(int(row[0]) / size)))
        count = size // DTYPE_BYTES[dtype] // (n if op in ("all_gather", "reduce_scatter",
                                                            "alltoall") else 1)
        redop = "none" if op == "broadcast" else ref[3]
        root = "0" if op == "broadcast" else ref[4]
        scale = slow
        if op == "broadcast":
            scale *= BROADCAST_OVER_SENDRECV[min(BROADCAST_OVER_SENDRECV,
                                                 key=lambda b: abs(math.log(b / size)))]
        cells = []
        for busbw_s, wrong in ((ref[7], ref[8]), (ref[11], ref[12])):
            busbw = float(busbw_s) * scale
            algbw = busbw / busbw_factor(op, n)
            cells.append(f"{size / (algbw * 1e3):8.2f} {algbw:7.2f} {busbw:7.2f} {wrong:>7}")
        bus_all.append(float(ref[7]) * scale)
        out.append(f"{size:>12} {count:>13} {dtype:>9} {redop:>7} {root:>7} "
                   f"{cells[0]} {cells[1]}")
        if f < 2:
            break
        size *= f
    out += ["# Out of bounds values : 0 OK",
            f"# Avg bus bandwidth    : {sum(bus_all) / max(1, len(bus_all)):.3f} ", "#",
            f"# Collective test concluded: {op}_perf", "#", ""]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in OPS:
        raise ToolError(USAGE, 1)
    op, opts = argv[0], _opts(argv[1:])
    state = load_state()
    sys.stdout.write(report(state, op, opts))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
