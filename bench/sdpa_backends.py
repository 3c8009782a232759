"""The reference job's attention, one layer's worth, in each way torch can run it (GPU only).

    python3 bench/sdpa_backends.py [--seq 8192] [--heads 32] [--kv-heads 8] [--head-dim 128]

Causal bf16 SDPA, forward and backward, at the llama3-8b shape by default: grouped-query
heads expanded into copies (the job's way until 2026-12) or read in place (enable_gqa),
under torch's default backend order, torchtitan's order (cuDNN, flash, math) and each
backend alone. Prints one row per variant: milliseconds (median of repeats, CUDA events,
after warm-up), TFLOP/s (causal FLOPs: forward 2*s*s*h*hd, backward 2.5x that) and the
memory the variant held at its peak above its inputs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root

from validation.workloads.common import Dist, median_time  # noqa: E402

ORDERS = {
    "torch default": None,
    "torchtitan order": [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
                         SDPBackend.MATH],
    "cudnn only": [SDPBackend.CUDNN_ATTENTION],
    "flash only": [SDPBackend.FLASH_ATTENTION],
    "efficient only": [SDPBackend.EFFICIENT_ATTENTION],
}


def step(q, k, v, gqa: bool, order) -> None:
    if not gqa and k.shape[1] != q.shape[1]:
        rep = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    kw = {"enable_gqa": True} if gqa else {}
    if order is None:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)
    else:
        with sdpa_kernel(order, set_priority=True):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)
    o.backward(torch.ones_like(o))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, default=8192)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("error: sdpa_backends needs a GPU")
    dev = torch.device("cuda")
    s, h, kvh, hd = a.seq, a.heads, a.kv_heads, a.head_dim

    def leaf(heads: int) -> torch.Tensor:
        return torch.randn(1, heads, s, hd, device=dev, dtype=torch.bfloat16,
                           requires_grad=True)

    q, k, v = leaf(h), leaf(kvh), leaf(kvh)
    fwd = 2 * s * s * h * hd  # causal: half of 4*s*s*h*hd
    flops = fwd * 3.5  # forward + backward (2.5x)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, cuDNN "
          f"{torch.backends.cudnn.version()}; seq {s}, heads {h}/{kvh} kv, head_dim {hd}")
    print("| kv heads | backends | ms fwd+bwd | TFLOP/s | peak extra GiB |")
    print("| --- | --- | ---: | ---: | ---: |")
    for gqa in (False, True):
        for name, order in ORDERS.items():
            def fn(gqa=gqa, order=order) -> None:
                q.grad = k.grad = v.grad = None
                step(q, k, v, gqa, order)
            try:
                fn()
            except RuntimeError as e:  # a backend that cannot run this shape
                print(f"| {'read in place' if gqa else 'expanded'} | {name} | - | - | - "
                      f"({str(e).splitlines()[0][:60]}) |")
                continue
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            ms = 1e3 * median_time(Dist(0, 1, 0, dev), fn, warmup=a.warmup, iters=a.iters,
                                   repeats=a.repeats)
            extra = (torch.cuda.max_memory_allocated() - base) / 2**30
            print(f"| {'read in place' if gqa else 'expanded'} | {name} | {ms:.3f} | "
                  f"{flops / ms / 1e9:.0f} | {extra:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
