"""Side-by-side table of one bench run: ours against the references (same machine, same run
where possible; the real nccl-tests captures where nccl-tests could not be built there).

    python3 bench/summarize.py W [NCCL_TESTS_DIR]   -> W/results.json, W/table.md, table on stdout

W is the folder bench/run_gpu.sh gives the workloads (one sub-folder per stage). What is read
there: every `<workload>.rank<r>.jsonl`, one Measurement per line ({"name", "value", "unit",
"labels"}). Other JSON-lines files (the burn-in's own `intervals.rank<r>.jsonl`, whose figures
the burn-in already reports as measurements) and torn lines are left out and counted on stderr.
NCCL_TESTS_DIR defaults to the repository's real captures (tests/fixtures/hgx-h200-2gpu).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
NCCL_TESTS = REPO / "tests" / "fixtures" / "hgx-h200-2gpu"
REF_FILES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")
HBM_COPY_REF = 4290.0  # GB/s, d2d copy (bench/results)
HOST_REF = 55.2  # GB/s pinned H2D/D2H, PCIe Gen5 x16 (bench/results)
FSDP_FIGURES = ("fsdp.tokens_per_s_per_gpu", "fsdp.mfu", "fsdp.peak_memory_gib",
                "fsdp.step_time_spread", "fsdp.ckpt_resume_max_abs_diff", "fsdp.ckpt_write_gbps",
                "fsdp.ckpt_read_gbps")


def _measurement(rec: Any) -> bool:
    return (isinstance(rec, dict) and isinstance(rec.get("name"), str) and "value" in rec
            and isinstance(rec.get("labels", {}), dict))


def load(out: Path) -> tuple[list[dict], list[str]]:
    """Every measurement under out, with the stage folder as "src"; and what was left out."""
    rows: list[dict] = []
    left_out: list[str] = []
    for f in sorted(out.rglob("*.jsonl")):
        found = torn = 0
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                torn += 1  # a write the end of a killed workload cut short
                continue
            if not _measurement(rec):
                continue
            rows.append({**rec, "labels": rec.get("labels") or {}, "src": f.parent.name})
            found += 1
        rel = f.relative_to(out)
        if not found:
            left_out.append(f"{rel} (no measurements)")
        elif torn:
            left_out.append(f"{rel} ({torn} unreadable line{'s' * (torn > 1)})")
    return rows, left_out


def nccl_ref(folder: Path) -> dict[tuple[str, int], float]:
    """Out-of-place busbw (GB/s) per (op, size) from nccl-tests logs."""
    sys.path.insert(0, str(REPO))
    from validation.workloads.busbw import parse_nccl_tests

    ref = {}
    for op in REF_FILES:
        p = folder / f"nccl-tests-{op}.txt"
        if p.exists():
            for r in parse_nccl_tests(p.read_text()):
                ref[(op, r.size_bytes)] = r.oop_busbw
    return ref


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _num(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    return f"{v:.0f}" if abs(v) >= 1e4 else f"{v:.4g}"  # 35340, not 3.534e+04


def _labels(lab: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in lab.items())


def summarize(rows: list[dict], ref: dict[tuple[str, int], float]) -> tuple[list[str], dict]:
    lines = ["| what | ours | reference | ratio | target |", "| --- | --- | --- | --- | --- |"]
    res: dict = {"rows": []}

    def add(what: str, ours: Any, refv: float | None, target: str) -> None:
        nums = isinstance(ours, (int, float)) and not isinstance(ours, bool)
        ratio = ours / refv if refv and nums else None
        lines.append(f"| {what} | {_num(ours)} | {_num(refv) if refv is not None else '-'} | "
                     f"{f'{ratio:.3f}' if ratio is not None else '-'} | {target} |")
        res["rows"].append({"what": what, "ours": ours, "ref": refv, "ratio": ratio,
                            "target": target})

    for r in rows:
        lab, name = r["labels"], r["name"]
        size = _int(lab.get("size_bytes"))
        if name == "nccl.busbw" and lab.get("impl") == "torch" and size and size >= 64 << 20:
            add(f"busbw {lab.get('op')} {size >> 20} MiB (GB/s)", r["value"],
                ref.get((str(lab.get("op")), size)),
                ">= 0.98 of nccl-tests (real capture, same machine kind)")
        elif name == "nccl.correct" and r["value"] is not True:
            add(f"WRONG RESULT {lab.get('op')} {lab.get('size_bytes')}", r["value"], None,
                "correct")
    bare = {lab["gpu"]: r["value"] for r in rows
            if r["name"] == "bare.gemm_tflops" and "gpu" in (lab := r["labels"])}
    for r in rows:
        lab, name, gpu = r["labels"], r["name"], r["labels"].get("gpu", "?")
        if name == "gemm.tflops":
            add(f"burn-in {lab.get('dtype')} TFLOP/s gpu{gpu} n={lab.get('n')}", r["value"],
                bare.get(gpu) if lab.get("dtype") == "bf16" else None,
                ">= 0.98 of bare matmul loop" if lab.get("dtype") == "bf16" else "info")
        elif name in ("gemm.power_fraction", "gemm.power_fraction_median"):
            add(f"{name} gpu{gpu} {lab.get('dtype')}", r["value"], None, ">= 0.97")
        elif name in ("gemm.sdc_mismatches", "hbm.pattern_errors"):
            add(f"{name} gpu{gpu}", r["value"], None, "== 0")
        elif name == "gemm.clock_event_reasons":
            add(f"clock event reasons gpu{gpu} {lab.get('dtype')} (bitmask)", r["value"], None,
                "info")
        elif name == "hbm.bandwidth":
            add(f"HBM copy GB/s gpu{gpu}", r["value"], HBM_COPY_REF,
                f">= 0.95 of d2d copy {HBM_COPY_REF / 1000:g} TB/s")
        elif name in ("host.h2d_bandwidth", "host.d2h_bandwidth"):
            add(f"{name} gpu{gpu}", r["value"], HOST_REF, f">= 0.95 of {HOST_REF:g}")
        elif name in ("host.bidir_bandwidth", "p2p.bandwidth", "nccl.pair_busbw"):
            add(f"{name} {_labels(lab)}", r["value"], None, "info")
        elif name in FSDP_FIGURES:
            where = f" gpu{gpu}" if "gpu" in lab else ""  # peak memory: one row per GPU
            add(f"{name}{where} [{r['src']}]", r["value"], None, "info")
    for src in sorted({r["src"] for r in rows if r["name"] == "fsdp.loss"}):
        ls = [r for r in rows if r["name"] == "fsdp.loss" and r["src"] == src
              and _int(r["labels"].get("step")) is not None]
        if ls:
            ls.sort(key=lambda r: int(r["labels"]["step"]))
            add(f"loss first/last [{src}]", ls[0]["value"], ls[-1]["value"], "falls")
    tps = {r["src"]: r["value"] for r in rows if r["name"] == "fsdp.tokens_per_s_per_gpu"}
    if "scale1" in tps and "scale2" in tps:
        add("scaling: tok/s/GPU at 2 GPUs over 1 GPU", tps["scale2"], tps["scale1"], ">= 0.95")
    res["median_bare"] = statistics.median(bare.values()) if bare else None
    return lines, res


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print("usage: python3 bench/summarize.py W [NCCL_TESTS_DIR]", file=sys.stderr)
        return 2
    out = Path(argv[0])
    refs = Path(argv[1]) if len(argv) > 1 else NCCL_TESTS
    if not out.is_dir():
        print(f"summarize: {out} is not a folder (bench/run_gpu.sh's $OUT/w)", file=sys.stderr)
        return 2
    rows, left_out = load(out)
    if left_out:
        print(f"summarize: left out {'; '.join(left_out)}", file=sys.stderr)
    if not rows:
        print(f"summarize: no measurements under {out}; did the bench run?", file=sys.stderr)
        return 1
    lines, res = summarize(rows, nccl_ref(refs))
    (out / "results.json").write_text(json.dumps(res, indent=1))
    table = "\n".join(lines)
    (out / "table.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
