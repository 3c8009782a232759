"""Which reference-job shape fits this node: a memory estimate per GPU, decided before the
job starts (pure, no torch), so a shape too large for the node is a planning decision with
its reason, never an out-of-memory crash.

Estimate per GPU, bytes, for fsdp_train's job (FSDP2, bf16 compute, fp32 reduce, AdamW):
- sharded state: fp32 parameters, fp32 gradients and AdamW's two fp32 moments, 16 bytes
  per parameter over the world size;
- the gathered working set: embedding and output in bf16 (the output stays gathered between
  forward and backward), and two blocks' bf16 parameters with their fp32 gradients
  (the one computing and the one prefetched);
- activations saved for backward, per token and per block, ACT_BYTES_PER_DIM x dim
  (activation checkpointing none; "full" keeps only each block's input and one block's
  recompute; other modes are estimated as none, an upper bound);
- the logits' peak: bf16 logits, their fp32 copy, log-softmax and its gradient,
  LOGIT_BYTES per token per vocabulary entry.

Calibrated on one and two H200s, eager, seq 8192, batch 1, AC none
(bench/results/h200x2-2026-11-30.md, peak allocated): llama3-8b on 2 GPUs 111.4 GiB
(estimate 112.0), llama3-1b on 1 GPU 43.8 GiB (estimate 43.3), llama3-1b on 2 GPUs 35.4 GiB
(estimate 32.1: the second rank's NCCL buffers and gathers are not modelled). HEADROOM
covers that error and the CUDA context, cuBLAS workspace and allocator fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from validation.workloads.shapes import SHAPES, Shape, count_params

GiB = 1 << 30
# bytes saved for backward per token, per block, per unit of the model width (AC none, eager):
# 37.4 fitted to llama3-8b on 2x H200 (111.4 GiB peak less the modelled state, working set
# and logits), 40 from llama3-1b on 1x H200; the larger, rounded
ACT_BYTES_PER_DIM = 38
LOGIT_BYTES = 10  # bf16 logits 2 + fp32 copy 4 + log-softmax output 4 (its gradient reuses)
# share of a GPU's memory left free: the estimate came out 9% under the 1b two-GPU peak,
# the largest miss of the three
HEADROOM = 0.10


@dataclass(frozen=True)
class Estimate:
    """Bytes per GPU of one shape on one world size."""
    shape: str
    world: int
    state: int
    working: int
    activations: int
    logits: int

    @property
    def total(self) -> int:
        return self.state + self.working + self.activations + self.logits


def _block_params(s: Shape) -> int:
    n, emb = count_params(s)
    return (n - 2 * emb - s.dim) // s.n_layers


def estimate(shape: str, world: int, seq: int, batch: int = 1, ac: str = "none") -> Estimate:
    """Peak GPU memory per rank of the reference job (see the module's docstring)."""
    s = SHAPES[shape]
    n, emb = count_params(s)
    tokens = seq * batch
    per_block = ACT_BYTES_PER_DIM * s.dim * tokens
    # "full" recomputes every block: each keeps its bf16 input, one block's is rebuilt at a time
    acts = (s.n_layers * 2 * s.dim * tokens + per_block if ac == "full"
            else s.n_layers * per_block)
    return Estimate(
        shape=shape, world=world,
        state=16 * n // max(1, world),
        working=2 * (2 * emb) + 2 * _block_params(s) * (2 + 4),
        activations=acts,
        logits=LOGIT_BYTES * s.vocab * tokens,
    )


@dataclass(frozen=True)
class Plan:
    """The shape chosen (None: none fits), every candidate's estimate, and why."""
    chosen: dict[str, Any] | None
    estimates: list[tuple[dict[str, Any], Estimate, bool]]
    gpu_bytes: int
    usable_bytes: int
    reason: str


def gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB"


def plan(candidates: list[dict[str, Any]], world: int, gpu_bytes: int,
         headroom: float = HEADROOM) -> Plan:
    """The first candidate (largest first) whose estimate fits a GPU less the headroom."""
    usable = int(gpu_bytes * (1 - headroom))
    rows = []
    for c in candidates:
        est = estimate(str(c["shape"]), world, int(c.get("seq", 8192)), int(c.get("batch", 1)),
                       str(c.get("ac", "none")))
        rows.append((c, est, est.total <= usable))
    where = (f"{world} GPU{'s' if world != 1 else ''} of {gib(gpu_bytes)} "
             f"({gib(usable)} usable, {headroom:.0%} headroom)")
    too_big = [f"{c['shape']} needs ~{gib(e.total)} per GPU" for c, e, ok in rows if not ok]
    chosen = next(((c, e) for c, e, ok in rows if ok), None)
    if chosen is None:
        reason = f"no configured shape fits in GPU memory on {where}: {'; '.join(too_big)}"
        return Plan(None, rows, gpu_bytes, usable, reason)
    c, e = chosen
    reason = f"{c['shape']} fits on {where}: ~{gib(e.total)} per GPU"
    if too_big:
        reason += f" (larger shapes do not: {'; '.join(too_big)})"
    return Plan(c, rows, gpu_bytes, usable, reason)
