"""Where one training step's GPU memory peaks: the reference job or torchtitan, one rank.

    python3 -m torch.distributed.run --standalone --nproc-per-node 1 bench/mem_profile.py \\
        --prog ours --out DIR [--step 3] -- --shape llama3-1b --seq 8192 --steps 4 --compile ...
    (cd TORCHTITAN && PYTHONPATH=.:DEPS python3 -m torch.distributed.run ... \\
        REPO/bench/mem_profile.py --prog titan --out DIR -- --job.config_file ... \\
        --training.steps 4)
    python3 bench/mem_profile.py --probe-norm     (what each RMSNorm saves for backward, CUDA)

Records the caching allocator's history (torch.cuda.memory._record_memory_history, Python
frames) from before the model is built. Every step, in MiB: peak allocated, peak reserved, the
requested bytes (before the allocator's rounding), the free bytes inside mapped segments and
each pool's share (the small pool maps 2 MiB pages, the large one 20 MiB), written to
DIR/steps.jsonl. At --step K: the live blocks at the start of the step (a
snapshot) replayed through the step's trace to the moment allocated memory peaks; the blocks
live then are grouped by the first frame outside torch and written to DIR/peak.txt, largest
first, with the allocation that reached the peak. The A/B of the job's two memory fixes:
--formula-norm runs its final norm as the upcast formula of llama.RMSNorm, not torch's fused
kernel; --rope-per-step makes the rotary tables as two tensors in every forward.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

GiB = 1 << 30
MiB = 1 << 20
REPO = Path(__file__).resolve().parent.parent


def _stats() -> dict[str, float]:
    s = torch.cuda.memory_stats()
    keys = {
        "alloc_peak": "allocated_bytes.all.peak",
        "alloc_now": "allocated_bytes.all.current",
        "reserved_peak": "reserved_bytes.all.peak",
        "reserved_now": "reserved_bytes.all.current",
        "requested_peak": "requested_bytes.all.peak",
        "inactive_split_now": "inactive_split_bytes.all.current",
        "inactive_split_peak": "inactive_split_bytes.all.peak",
        "reserved_small_now": "reserved_bytes.small_pool.current",
        "reserved_large_now": "reserved_bytes.large_pool.current",
        "alloc_small_peak": "allocated_bytes.small_pool.peak",
        "alloc_large_peak": "allocated_bytes.large_pool.peak",
    }
    out: dict[str, float] = {k: round(s.get(v, 0) / MiB, 1) for k, v in keys.items()}
    out["segments"] = s.get("segment.all.current", 0)
    out["alloc_retries"] = s.get("num_alloc_retries", 0)
    return out


def _where(frames: list[dict[str, Any]]) -> str:
    """The innermost frames outside torch's own files (and this one), innermost first."""
    keep = []
    for f in frames:
        name = f.get("filename", "")
        if "/torch/" in name and "torchinductor" not in name or name.endswith("mem_profile.py"):
            continue
        keep.append(f"{Path(name).name}:{f.get('line')}:{f.get('name')}")
        if len(keep) == 3:
            break
    if not keep and frames:
        f = frames[0]
        keep.append(f"{Path(f.get('filename', '')).name}:{f.get('line')}:{f.get('name')}")
    return " < ".join(keep) or "?"


def _live_blocks(snap: dict[str, Any]) -> dict[int, tuple[int, str]]:
    live = {}
    for seg in snap["segments"]:
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                live[addr] = (b["size"], _where(b.get("frames", [])))
            addr += b["size"]
    return live


def _peak_report(before: dict[str, Any], after: dict[str, Any], step: int) -> str:
    """Replay the step's trace on the blocks live at its start; the live set at the peak."""
    live = _live_blocks(before)
    start = len(before["device_traces"][0])
    trace = after["device_traces"][0][start:]
    total = sum(s for s, _ in live.values())
    peak, peak_live, peak_event = total, dict(live), "(step start)"
    mapped = sum(seg["total_size"] for seg in before["segments"])
    mapped_peak = mapped
    for ev in trace:
        act = ev["action"]
        if act == "alloc":
            live[ev["addr"]] = (ev["size"], _where(ev.get("frames", [])))
            total += ev["size"]
            if total > peak:
                peak, peak_live = total, dict(live)
                peak_event = f"{ev['size'] / MiB:.1f} MiB at {_where(ev.get('frames', []))}"
        elif act == "free_completed" and ev["addr"] in live:
            total -= live.pop(ev["addr"])[0]
        elif act in ("segment_map", "segment_alloc"):
            mapped += ev["size"]
            mapped_peak = max(mapped_peak, mapped)
        elif act in ("segment_unmap", "segment_free"):
            mapped -= ev["size"]
    groups: dict[str, list[int]] = defaultdict(list)
    for size, where in peak_live.values():
        groups[where].append(size)
    lines = [
        f"step {step}: peak allocated {peak / GiB:.4f} GiB in {len(peak_live)} blocks; "
        f"mapped at step start {sum(s['total_size'] for s in before['segments']) / GiB:.4f} "
        f"GiB, peak mapped in step {mapped_peak / GiB:.4f} GiB; trace events {len(trace)}",
        f"reached by: {peak_event}",
        "",
        "| MiB | blocks | sizes (MiB) | allocated at |",
        "| ---: | ---: | --- | --- |",
    ]
    for where, sizes in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        count: dict[float, int] = defaultdict(int)
        for s in sizes:
            count[round(s / MiB, 2)] += 1
        top = sorted(count.items(), key=lambda kv: -kv[0] * kv[1])[:8]
        uniq = ", ".join(f"{m}x{n}" for m, n in top)
        lines.append(f"| {sum(sizes) / MiB:.2f} | {len(sizes)} | {uniq} | {where} |")
    return "\n".join(lines) + "\n"


class Recorder:
    def __init__(self, out: Path, step: int) -> None:
        self.out, self.dump_step, self.step = out, step, 0
        out.mkdir(parents=True, exist_ok=True)
        self.started = False

    def start(self) -> None:
        if not self.started:
            torch.cuda.memory._record_memory_history(max_entries=4_000_000, stacks="python")
            self.started = True

    def wrap(self, fn):
        def step(*args, **kwargs):
            self.step += 1
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory._snapshot() if self.step == self.dump_step else None
            r = fn(*args, **kwargs)
            torch.cuda.synchronize()
            rec = {"step": self.step, **_stats()}
            with open(self.out / "steps.jsonl", "a") as f:
                f.write(json.dumps(rec) + "\n")
            print("mem_profile", json.dumps(rec), flush=True)
            if before is not None:
                after = torch.cuda.memory._snapshot()
                rep = _peak_report(before, after, self.step)
                (self.out / "peak.txt").write_text(rep)
                print(rep, flush=True)
            return r

        return step


def run_ours(rec: Recorder, argv: list[str], formula_norm: bool, rope_per_step: bool) -> int:
    sys.path.insert(0, str(REPO))
    from validation.workloads import fsdp_train as ft
    from validation.workloads import llama

    if rope_per_step:  # two tables made in every forward, as the job did before

        def rope(self, n, device):
            s = self.shape
            return llama.rope_tables(s.dim // s.n_heads, n, s.rope_theta, device)

        llama.Llama.rope = rope

    init, build = ft.init, ft.build

    def init_then_record(*args, **kwargs):
        d = init(*args, **kwargs)
        rec.start()
        return d

    def build_formula_norm(*args, **kwargs):
        model, opt = build(*args, **kwargs)
        model.norm.fused = False
        return model, opt

    ft.init = init_then_record
    if formula_norm:
        ft.build = build_formula_norm
    ft.train_step = rec.wrap(ft.train_step)
    return ft.run_main(ft.main, argv)


def run_titan(rec: Recorder, argv: list[str]) -> int:
    # torchtitan's ConfigManager.parse_args takes sys.argv[1:] as its default, bound at import
    sys.argv = [sys.argv[0], *argv]
    sys.path.insert(0, str(REPO / "bench" / "titan_shims"))
    import titan_1b  # noqa: F401  (the "1B" flavor)
    from torchtitan.train import Trainer, main

    orig_init = Trainer.__init__

    def init(self, *args, **kwargs):
        rec.start()
        orig_init(self, *args, **kwargs)

    Trainer.__init__ = init
    Trainer.train_step = rec.wrap(Trainer.train_step)
    main(Trainer)
    return 0


def probe_norm() -> None:
    """Bytes each RMSNorm saves for backward on fp32 input (1 x 8192 x 2048), on CUDA."""
    sys.path.insert(0, str(REPO))
    from validation.workloads.llama import RMSNorm

    x = torch.randn(1, 8192, 2048, device="cuda", requires_grad=True)
    mods = {"ours": RMSNorm(2048, 1e-5), "nn.RMSNorm": torch.nn.RMSNorm(2048, 1e-5)}
    for name, mod in mods.items():
        mod = mod.cuda()
        saved: list[torch.Tensor] = []

        def pack(t: torch.Tensor, saved: list[torch.Tensor] = saved) -> torch.Tensor:
            saved.append(t)
            return t

        hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        with hooks, torch.autocast("cuda", dtype=torch.bfloat16):
            y = mod(x)
        mine = (x.untyped_storage().data_ptr(), mod.weight.untyped_storage().data_ptr())
        extra = sum(t.numel() * t.element_size() for t in saved
                    if t.untyped_storage().data_ptr() not in mine)
        kinds = [(tuple(t.shape), str(t.dtype)) for t in saved]
        print(f"probe-norm {name}: out {y.dtype}, saved {kinds}, "
              f"beyond input and weight {extra / MiB:.2f} MiB", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prog", choices=("ours", "titan"))
    p.add_argument("--out", type=Path)
    p.add_argument("--step", type=int, default=3, help="the step whose peak is broken down")
    p.add_argument("--formula-norm", action="store_true")
    p.add_argument("--rope-per-step", action="store_true")
    p.add_argument("--probe-norm", action="store_true")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    a = p.parse_args()
    if a.probe_norm:
        probe_norm()
        return 0
    rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    rec = Recorder(a.out, a.step)
    if a.prog == "ours":
        return run_ours(rec, rest, a.formula_norm, a.rope_per_step)
    return run_titan(rec, rest)


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    import os

    os._exit(rc)
