"""The reference FSDP2 training job: a Llama-style decoder on deterministic data.

    torchrun --nproc-per-node N [--nnodes M --rdzv-endpoint HOST:PORT] \\
        -m validation.workloads.fsdp_train --out DIR --shape llama3-8b --steps 20

fully_shard as torchtitan v0.2.2 groups it (embedding, each block, norm with
output, root) with MixedPrecisionPolicy(bf16 params, fp32 reduce); on a single CUDA
rank, as torchtitan there, no FSDP: the fp32 module under bf16 autocast, its final
norm through torch's fused RMSNorm; attention through SDPA with torchtitan's backend
order and grouped-query heads unexpanded;
Python's collector run every 50 steps, not at random; torchtitan's recipe
otherwise: AdamW, gradient clipping at total
norm 1.0, linear warm-up then linear decay, activation checkpointing none /
full / selective (per-op or every Kth block), --compile compiling each block
and the loss (torchtitan's compile components "model" and "loss"), the next
batch built while the GPU runs the step. Measures tokens/s/GPU, MFU
(torchtitan's FLOP count over the peak given with --peak-tflops), step-time
spread across ranks, peak memory, the loss at every step (with the gradient
norm and learning rate) and the mean loss per window of --loss-window steps:
a healthy job falls at every window. With --ckpt-step K it saves with
torch.distributed.checkpoint at step K, trains on to the end (the
uninterrupted run), then restores into a fresh model and optimizer, replays
steps K+1.. and reports the largest loss difference.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from validation.workloads import synthetic
from validation.workloads.common import (
    Dist,
    Sink,
    UsageError,
    base_parser,
    emit_binding,
    exit_process,
    finish,
    init,
    run_main,
)
from validation.workloads.golden import loss_windows, window_rise
from validation.workloads.llama import SHAPES, Block, Llama, flops_per_token, init_weights

GiB = 1 << 30
# torchtitan's llama3 recipes peak at 3e-4; the tiny CPU model (dim 64) learns
# visibly within a lab run's 16 steps only with a larger step
# Peak learning rate per shape. On 2x H200 the llama3 shapes at torchtitan's 3e-4 learned the
# synthetic chains within 4 steps and then spiked (1b: grad norm 40 at step 9, loss 1.9 -> 4.5;
# bench/results/h200x2-2026-11-30-issue15.md); 5e-5 keeps the short job's curve falling.
PEAK_LR = {"tiny": 3e-3, "llama3-1b": 5e-5, "llama3-8b": 5e-5}


AC_HELP = "activation checkpointing: none, full, selective (= selective:op), selective:K, every:K"


def parse_ac(spec: str, n_layers: int) -> list[str]:
    """--ac -> per-block recompute mode ("" none, "full", "op").

    As torchtitan's activation_checkpoint: 'none', 'full', 'selective' (its default,
    selective_ac_option 'op': per-op policy in every block) or 'selective:K' (every Kth
    block fully recomputed; 'every:K' says the same)."""
    if spec == "none":
        return [""] * n_layers
    if spec == "full":
        return ["full"] * n_layers
    if spec in ("selective", "selective:op"):
        return ["op"] * n_layers
    if spec.startswith(("every:", "selective:")):
        try:
            k = int(spec.split(":", 1)[1])
        except ValueError:
            k = 0
        if k >= 1:
            return ["full" if i % k == 0 else "" for i in range(n_layers)]
    raise UsageError(f"bad --ac {spec!r}: none, full, selective, selective:op or selective:K")


def build(d: Dist, a, seed: int) -> tuple[Llama, torch.optim.Optimizer]:
    shape = SHAPES[a.shape]
    with torch.device("meta"):
        model = Llama(shape)
    for blk, ac in zip(model.layers, parse_ac(a.ac, shape.n_layers), strict=True):
        assert isinstance(blk, Block)  # nn.ModuleList hands out plain Modules
        blk.recompute = ac
    # One CUDA rank trains as torchtitan does there: no FSDP (one rank has nothing to
    # shard), the plain fp32 module under bf16 autocast (train_step; its
    # dist_utils.maybe_enable_amp). Otherwise torchtitan v0.2.2's FSDP grouping: the
    # embedding alone (its all-gather is the only one not hidden behind compute), each
    # block, then norm and output together, kept gathered after forward because backward
    # starts with them; their gradients' reduce-scatter then overlaps the blocks' backward
    # instead of trailing the step in the root's group
    shard = not single_device_amp(d, a)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if shard:
        fully_shard(model.tok_embeddings, mp_policy=mp)
    for blk in model.layers:
        if a.compile:
            blk.compile()
        if shard:
            fully_shard(blk, mp_policy=mp)
    if shard:
        fully_shard([model.norm, model.output], mp_policy=mp, reshard_after_forward=False)
        fully_shard(model, mp_policy=mp)
    # On one device the final norm (eager, outside the compiled blocks) runs fused, as
    # torchtitan's nn.RMSNorm does: its input is the fp32 residual stream there, so the
    # function is the same, and bench/mem_profile.py showed the formula's saved fp32 copy
    # (64 MiB) live at the step's peak, the loss backward, where torchtitan has none
    model.norm.fused = not shard
    model.to_empty(device=d.device)
    init_weights(model, seed, d.rank)
    kw = {"fused": True} if d.is_cuda else {"foreach": True}
    opt = torch.optim.AdamW(
        model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8, **kw
    )
    return model, opt


def single_device_amp(d: Dist, a) -> bool:
    """One CUDA rank trains as torchtitan does on one device (--one-device amp, the
    default): FSDP2 over a single rank shards nothing and costs 4-5 % of the speed and
    3.7-4.8 GiB more reserved memory on llama3-1b (bench/results/h200-2026-12-02-one-device.md)."""
    return getattr(a, "one_device", "amp") == "amp" and d.world == 1 and d.is_cuda


def lr_at(step: int, peak: float, warmup: int, total: int, min_factor: float = 0.0) -> float:
    """torchtitan v0.2.2's linear warm-up then linear decay (lr_scheduler defaults:
    decay_ratio None = decay over every step after warm-up, min_lr_factor 0); step is
    1-based, so step 1 runs at peak/warmup and the last step stays above the floor."""
    c = step - 1  # LambdaLR's 0-based count
    warmup = min(max(0, warmup), total)
    decay = total - warmup
    if c < warmup:
        f = (c + 1) / warmup
    elif c < warmup + 1 or decay == 0:  # one stable step (torchtitan's "virtual last step")
        f = 1.0
    else:
        f = 1 - (c + 1 - (warmup + 1)) / decay
        f = min_factor + (1 - min_factor) * f
    return peak * f


def cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())


def loss_fn_for(a) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """torchtitan compiles the loss with the model (compile.components model and loss): the
    fp32 upcast and the softmax fuse, and the fp32 logits are never held for backward."""
    return torch.compile(cross_entropy) if a.compile else cross_entropy


def next_batch(d: Dist, a, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step's batch on the device; built on the CPU while the GPU still runs the step before
    (as a data loader prefetches), so its Python never stands between two steps."""
    x, y = synthetic.batch(a.seed, step, d.rank, a.batch, a.seq, SHAPES[a.shape].vocab)
    if d.is_cuda:
        x, y = x.pin_memory(), y.pin_memory()
    return x.to(d.device, non_blocking=True), y.to(d.device, non_blocking=True)


def train_step(
    d: Dist, model: Llama, opt: torch.optim.Optimizer, a, step: int,
    batch: tuple[torch.Tensor, torch.Tensor], loss_fn: Callable[..., torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step, queued on the device: (loss summed over ranks, gradient norm before
    clipping) as device tensors; the caller reads them when it needs the numbers."""
    x, y = batch
    for g in opt.param_groups:
        g["lr"] = lr_at(step, a.lr, a.warmup, a.steps, a.min_lr_factor)
    amp = torch.autocast(d.device.type, dtype=torch.bfloat16) if single_device_amp(d, a) \
        else contextlib.nullcontext()
    with amp:
        logits = model(x)
        loss = loss_fn(logits, y)
    del logits
    loss.backward()
    # torchtitan clips the total norm over every (sharded) parameter at max_norm 1.0
    norm = torch.nn.utils.clip_grad_norm_(
        model.parameters(), a.max_norm if a.max_norm > 0 else float("inf"), foreach=True
    )
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    opt.step()
    opt.zero_grad(set_to_none=True)
    total = loss.detach().clone()
    dist.all_reduce(total)
    return total, norm


def read_step(d: Dist, total: torch.Tensor, norm: torch.Tensor) -> tuple[float, float]:
    """(loss averaged over ranks, gradient norm): one device-to-host read for both."""
    loss_sum, norm_v = torch.stack([total.float(), norm.float().to(total.device)]).tolist()
    return loss_sum / d.world, norm_v


GC_EVERY = 50  # torchtitan's training.gc_freq


@contextlib.contextmanager
def scheduled_gc() -> Iterator[Callable[[int], None]]:
    """As torchtitan: Python's collector off while training (a collection at a random
    step on one rank makes every rank wait for it), run by hand every GC_EVERY steps;
    on again after, for whatever runs next in this process (the worker group)."""
    was = gc.isenabled()
    gc.disable()
    gc.collect(1)

    def collect(step: int) -> None:
        if step % GC_EVERY == 0:
            gc.collect(1)

    try:
        yield collect
    finally:
        if was:
            gc.enable()


def _dir_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--shape", default="tiny", choices=sorted(SHAPES), help="model shape")
    p.add_argument("--seq", type=int, default=8192)
    p.add_argument("--batch", type=int, default=1, help="sequences per GPU per step")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5, help="lr warm-up steps, then linear decay")
    p.add_argument(
        "--lr", type=float, default=None,
        help="peak learning rate (default: torchtitan's 3e-4; 3e-3 for the tiny CPU shape)",
    )
    p.add_argument(
        "--min-lr-factor", type=float, default=0.0, help="decay floor as a share of the peak"
    )
    p.add_argument(
        "--max-norm", type=float, default=1.0, help="gradient clipping total norm (0: off)"
    )
    p.add_argument(
        "--loss-window", type=int, default=4, help="steps per logged loss window (mean)"
    )
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--ac", default="none", help=AC_HELP)
    p.add_argument("--compile", action="store_true", help="torch.compile each block")
    p.add_argument("--one-device", choices=("amp", "fsdp"), default="amp",
                   help="on a single CUDA rank: amp (default), the plain module under bf16 "
                   "autocast as torchtitan trains on one device, or fsdp: FSDP2 over one rank")
    p.add_argument("--timing-skip", type=int, default=3, help="first steps left out of timing")
    p.add_argument(
        "--peak-tflops", type=float, default=0.0, help="dense bf16 peak per GPU for MFU (profile)"
    )
    p.add_argument(
        "--ckpt-step", type=int, default=0, help="save at this step and check the restore (0: off)"
    )
    p.add_argument(
        "--ckpt-dir", type=Path, default=None, help="where the checkpoint goes (/raid on nodes)"
    )
    p.add_argument("--deterministic", action="store_true", help="deterministic algorithms (slower)")
    a = p.parse_args(argv)
    if a.lr is None:
        a.lr = PEAK_LR.get(a.shape, 3e-4)
    if a.steps < 1 or a.seq < 2 or a.batch < 1 or a.loss_window < 1:
        raise UsageError("--steps, --seq, --batch and --loss-window must be positive")
    if a.warmup < 0 or a.max_norm < 0 or not 0 <= a.min_lr_factor <= 1:
        raise UsageError("--warmup and --max-norm must not be negative, --min-lr-factor in 0..1")
    parse_ac(a.ac, SHAPES[a.shape].n_layers)  # a bad --ac is a usage error before any setup
    if a.ckpt_step and not 0 < a.ckpt_step < a.steps:
        raise UsageError("--ckpt-step must lie between 0 and --steps")
    if a.ckpt_step and a.ckpt_dir is None:
        raise UsageError("--ckpt-step needs --ckpt-dir")
    if a.deterministic:
        torch.use_deterministic_algorithms(True)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    d = init(a.device)
    sink = Sink(a.out, "fsdp_train", d.rank)
    emit_binding(sink, d)  # which GPU, NIC and CPUs this rank trains on
    model, opt = build(d, a, a.seed)
    shape = SHAPES[a.shape]
    losses: dict[int, float] = {}
    norms: dict[int, float] = {}
    times: list[float] = []
    ckpt_path = (
        a.ckpt_dir / f"rackready-fsdp-{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}"
        if a.ckpt_step
        else None
    )
    loss_fn = loss_fn_for(a)
    t_run = time.perf_counter()
    batch = next_batch(d, a, 1)
    with scheduled_gc() as collect:
        for step in range(1, a.steps + 1):
            collect(step)
            d.sync()
            t0 = time.perf_counter()
            queued = train_step(d, model, opt, a, step, batch, loss_fn)
            if step < a.steps:
                batch = next_batch(d, a, step + 1)
            losses[step], norms[step] = read_step(d, *queued)
            d.sync()
            if step > a.timing_skip:
                times.append(time.perf_counter() - t0)
            if ckpt_path is not None and step == a.ckpt_step:
                _save(d, sink, model, opt, ckpt_path)
    curve = {"world": d.world, "shape": a.shape, "dtype": "bf16", "seed": a.seed, "ac": a.ac}
    if d.rank == 0:
        # what the curve depends on: the golden curve of this config (validation.workloads.golden)
        sink.emit("fsdp.run_config", True, "", **curve, seq=a.seq, steps=a.steps, batch=a.batch,
                  lr=a.lr, warmup=a.warmup, max_norm=a.max_norm, min_lr_factor=a.min_lr_factor)
        for step, loss in losses.items():
            sink.emit("fsdp.loss", round(loss, 6), "", step=step, **curve)
            sink.emit("fsdp.grad_norm", round(norms[step], 6), "", step=step, **curve)
            sink.emit("fsdp.lr", lr_at(step, a.lr, a.warmup, a.steps, a.min_lr_factor), "",
                      step=step)
        wins = loss_windows(losses, a.loss_window)
        for last, mean in wins:
            sink.emit("fsdp.loss_window_mean", round(mean, 6), "", step=last,
                      window=a.loss_window, **curve)
        rise = window_rise(wins)
        if rise is not None:
            sink.emit("fsdp.loss_window_rise", round(rise, 6), "", window=a.loss_window,
                      windows=len(wins), shape=a.shape, world=d.world)
    if not times:
        times = [(time.perf_counter() - t_run) / a.steps]
    med = statistics.median(times)
    all_med = [torch.zeros(1, dtype=torch.float64, device=d.device) for _ in range(d.world)]
    dist.all_gather(all_med, torch.tensor([med], dtype=torch.float64, device=d.device))
    meds = [float(t.item()) for t in all_med]
    tps = a.batch * a.seq / med
    lab = {"shape": a.shape, "seq": a.seq, "world": d.world, "ac": a.ac, "compile": a.compile,
           "max_norm": a.max_norm}
    if d.rank == 0:
        sink.emit("fsdp.tokens_per_s_per_gpu", round(tps, 1), "tokens/s", **lab)
        sink.emit("fsdp.step_time_s", round(statistics.median(meds), 4), "s", **lab)
        sink.emit(
            "fsdp.step_time_spread",
            round((max(meds) - min(meds)) / statistics.median(meds), 4),
            "",
            **lab,
        )
        sink.emit("fsdp.flops_per_token", flops_per_token(shape, a.seq), "FLOP", **lab)
        if a.peak_tflops > 0:
            sink.emit("fsdp.peak_tflops", a.peak_tflops, "TFLOP/s", **lab)
            sink.emit(
                "fsdp.mfu",
                round(tps * flops_per_token(shape, a.seq) / (a.peak_tflops * 1e12), 4),
                "",
                **lab,
            )
    if d.is_cuda:
        sink.emit(
            "fsdp.peak_memory_gib",
            round(torch.cuda.max_memory_allocated(d.device) / GiB, 2),
            "GiB",
            gpu=d.local_rank,
            rank=d.rank,
            **lab,
        )
        # what torchtitan's "memory" reports (the caching allocator's peak reservation)
        sink.emit(
            "fsdp.peak_reserved_gib",
            round(torch.cuda.max_memory_reserved(d.device) / GiB, 2),
            "GiB",
            gpu=d.local_rank,
            rank=d.rank,
            **lab,
        )
    if ckpt_path is not None:
        del model, opt
        _restore_and_compare(d, sink, a, ckpt_path, losses)
    sink.close()
    finish()
    return 0


def _save(d: Dist, sink: Sink, model: Llama, opt: torch.optim.Optimizer, path: Path) -> None:
    if d.rank == 0:
        shutil.rmtree(path, ignore_errors=True)
    dist.barrier()
    msd, osd = get_state_dict(model, opt)
    d.sync()
    t0 = time.perf_counter()
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(path))
    dist.barrier()
    dt = time.perf_counter() - t0
    if d.rank == 0:
        size = _dir_bytes(path)
        sink.emit("fsdp.ckpt_bytes", size, "B")
        sink.emit("fsdp.ckpt_write_gbps", round(size / dt / 1e9, 3), "GB/s")


def _restore_and_compare(d: Dist, sink: Sink, a, path: Path, losses: dict[int, float]) -> None:
    # a different seed: a restore that loaded nothing cannot match by accident
    model, opt = build(d, a, a.seed + 1)
    msd, osd = get_state_dict(model, opt)
    state: dict[str, Any] = {"model": msd, "optim": osd}
    dist.barrier()
    t0 = time.perf_counter()
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    d.sync()
    dist.barrier()
    dt = time.perf_counter() - t0
    diffs = []
    loss_fn = loss_fn_for(a)
    for step in range(a.ckpt_step + 1, a.steps + 1):
        loss, _ = read_step(d, *train_step(d, model, opt, a, step, next_batch(d, a, step),
                                           loss_fn))
        diffs.append(abs(loss - losses[step]))
        if d.rank == 0:
            sink.emit("fsdp.resumed_loss", round(loss, 6), "", step=step)
    if d.rank == 0:
        sink.emit("fsdp.ckpt_read_gbps", round(_dir_bytes(path) / dt / 1e9, 3), "GB/s")
        sink.emit("fsdp.ckpt_resume_max_abs_diff", max(diffs), "", steps=len(diffs))
        sink.emit("fsdp.ckpt_resume_bitwise", max(diffs) == 0.0, "")
    dist.barrier()
    if d.rank == 0:
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    exit_process(run_main(main))
