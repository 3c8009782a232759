"""Run the reference job and store its loss curve as the golden curve of its shape,
world size and dtype (validation/golden/<shape>.w<world>.bf16.json, one curve per config).

    python3 bench/make_golden.py --nproc 2 --runs 2 --tolerance 0.05 -- \\
        --shape llama3-8b --seq 8192 --steps 30 --compile
    python3 bench/make_golden.py --device cpu --nproc 2 --runs 3 --tolerance 0.002 -- \\
        --shape tiny --seq 128 --steps 16

Everything after `--` goes to validation.workloads.fsdp_train unchanged. With
--runs N the job runs N times; the curve stored is the first run's, and the
provenance states the largest step-by-step spread between runs (the tolerance
must sit above it: bf16 GPU kernels are not bitwise deterministic).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from validation.workloads.golden import (  # noqa: E402
    GOLDEN_DIR,
    Golden,
    GoldenError,
    add_curve,
    compare_curve,
    curve_from_measurements,
    dump_golden_file,
    golden_name,
    load_golden_file,
    run_config,
)


def run_once(nproc: int, device: str, job: list[str], out: Path) -> list[dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(nproc), "-m", "validation.workloads.fsdp_train",
           "--device", device, "--out", str(out), *job]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    rank0 = out / "fsdp_train.rank0.jsonl"
    if not rank0.is_file():  # a torch abort at exit after the results were written is harmless
        sys.exit(f"error: the reference job failed (rc {p.returncode}): {p.stderr[-800:]}")
    return [json.loads(line) for line in rank0.read_text().splitlines() if line.strip()]


def machine() -> str:
    try:
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, check=False, timeout=30).stdout
        gpu = ", ".join(sorted(set(gpus.split("\n")) - {""}))
    except (OSError, subprocess.TimeoutExpired):
        gpu = ""
    import torch

    return (f"{platform.node()} {gpu or 'CPU ' + platform.machine()}, torch {torch.__version__}"
            + (f", NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}"
               if torch.cuda.is_available() else ""))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, required=True, help="world size (GPUs or CPU ranks)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--runs", type=int, default=2, help="runs to measure the run-to-run spread")
    p.add_argument("--tolerance", type=float, required=True, help="stated |loss - golden| limit")
    p.add_argument("--dir", type=Path, default=GOLDEN_DIR, help="where golden files live")
    p.add_argument("--check", action="store_true",
                   help="compare with the stored curve instead of writing (exit 1 if off)")
    p.add_argument("job", nargs=argparse.REMAINDER, help="-- then fsdp_train's arguments")
    a = p.parse_args()
    job = a.job[1:] if a.job[:1] == ["--"] else a.job
    if a.runs < 1 or a.tolerance <= 0 or a.nproc < 1:
        print("error: --runs and --nproc must be positive, --tolerance above 0", file=sys.stderr)
        return 2
    curves, cfg = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):
            ms = run_once(a.nproc, a.device, job, Path(tmp) / f"r{i}")
            curves.append(curve_from_measurements(ms))
            cfg = run_config(ms)
    spread = max((compare_curve(c, curves[0]).deviation for c in curves[1:]), default=0.0)
    if spread > a.tolerance:
        print(f"error: runs differ by {spread:.4g} > tolerance {a.tolerance}", file=sys.stderr)
        return 1
    shape, world, dtype = cfg["shape"], int(cfg["world"]), cfg.get("dtype", "bf16")
    config = {k: cfg[k] for k in ("seq", "steps", "seed", "batch", "lr", "warmup", "max_norm",
                                  "min_lr_factor") if k in cfg}
    try:
        stored = load_golden_file(shape, world, dtype, a.dir)
    except GoldenError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.check:
        match = [g for g in stored if not compare_curve(curves[0], g.loss).missing
                 and all(str(g.config.get(k)) == str(v) for k, v in config.items())]
        if not match:
            print(f"no stored curve for {shape} w{world} {config}")
            return 1
        dev = compare_curve(curves[0], match[0].loss)
        print(f"{shape} w{world}: deviation {dev.deviation:.4g} at step {dev.worst_step} "
              f"(tolerance {match[0].tolerance}); run-to-run spread {spread:.4g}")
        return 0 if dev.within(match[0].tolerance) else 1
    today = datetime.date.today().isoformat()
    prov = (f"{machine()}; {today}; bench/make_golden.py --nproc {a.nproc} --device "
            f"{a.device} --runs {a.runs} -- {' '.join(job)}; largest run-to-run spread "
            f"{spread:.3g} over {a.runs} run(s)")
    new = Golden(shape, world, dtype, config, a.tolerance, prov, curves[0])
    a.dir.mkdir(parents=True, exist_ok=True)
    path = a.dir / golden_name(shape, world, dtype)
    text = json.dumps(dump_golden_file(add_curve(stored, new)), indent=1) + "\n"
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}: "
          f"{len(new.loss)} steps, spread {spread:.3g}, tolerance {a.tolerance}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
