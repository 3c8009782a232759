"""Reference for the burn-in: a bare torch.matmul loop, same shape and duration, every GPU at once.

torchrun --standalone --nproc-per-node N bench/gemm_bare.py OUT N_SIDE SECONDS
"""

import json
import os
import sys
import time

import torch

rank = int(os.environ.get("LOCAL_RANK", "0"))
out, n, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
torch.cuda.set_device(rank)
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
c = torch.empty_like(a)
for _ in range(3):
    torch.matmul(a, b, out=c)
torch.cuda.synchronize()
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
rates, t_end = [], time.monotonic() + secs
while time.monotonic() < t_end:
    e0.record()
    for _ in range(20):
        torch.matmul(a, b, out=c)
    e1.record()
    e1.synchronize()
    rates.append(20 * 2 * n**3 / (e0.elapsed_time(e1) / 1e3) / 1e12)
steady = sorted(rates[len(rates) // 6 :])  # drop the first sixth, as the burn-in drops its ramp
with open(os.path.join(out, f"gemm_bare.rank{rank}.jsonl"), "w") as f:
    f.write(
        json.dumps(
            {
                "name": "bare.gemm_tflops",
                "value": steady[len(steady) // 2],
                "unit": "TFLOP/s",
                "labels": {"gpu": str(rank), "n": str(n)},
            }
        )
        + "\n"
    )
