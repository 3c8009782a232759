"""Side-by-side table of one bench run: ours against the references (same machine, same run
where possible; the fixtures' nccl-tests numbers where nccl-tests could not be built there).

    python3 bench/summarize.py OUT   -> OUT/results.json, OUT/table.md, table on stdout
"""

import json
import statistics
import sys
from pathlib import Path

# nccl-tests 2.19.6, same kind of machine (tests/fixtures/hgx-h200-2gpu): oop busbw GB/s
NCCL_TESTS_REF = {
    "all_reduce": {67108864: 272.17, 268435456: 302.71, 1073741824: 332.92, 4294967296: 348.68},
}
REF_FILES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")


def load(out: Path) -> list[dict]:
    rows = []
    for f in sorted(out.rglob("*.jsonl")):
        for line in f.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                rec["src"] = f.parent.name
                rows.append(rec)
    return rows


def nccl_ref(fixtures: Path) -> dict[tuple[str, int], float]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from validation.workloads.busbw import parse_nccl_tests

    ref = {}
    for op in REF_FILES:
        p = fixtures / f"nccl-tests-{op}.txt"
        if p.exists():
            for r in parse_nccl_tests(p.read_text()):
                ref[(op, r.size_bytes)] = r.oop_busbw
    return ref


def main() -> None:
    out = Path(sys.argv[1])
    fixtures = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("bench/fixtures")
    rows = load(out)
    ref = nccl_ref(fixtures)
    lines = ["| what | ours | reference | ratio | target |", "| --- | --- | --- | --- | --- |"]
    res: dict = {"rows": []}

    def add(what: str, ours: float, refv: float | None, target: str) -> None:
        ratio = ours / refv if refv else None
        lines.append(
            f"| {what} | {ours:.4g} | {refv if refv is not None else '-'} | "
            f"{f'{ratio:.3f}' if ratio else '-'} | {target} |"
        )
        res["rows"].append(
            {"what": what, "ours": ours, "ref": refv, "ratio": ratio, "target": target}
        )

    for r in rows:
        lab = r["labels"]
        if (
            r["name"] == "nccl.busbw"
            and lab.get("impl") == "torch"
            and int(lab["size_bytes"]) >= 64 << 20
        ):
            key = (lab["op"], int(lab["size_bytes"]))
            add(
                f"busbw {lab['op']} {int(lab['size_bytes']) >> 20} MiB (GB/s)",
                r["value"],
                ref.get(key),
                ">= 0.98 of nccl-tests (fixture, same machine kind)",
            )
        if r["name"] == "nccl.correct" and r["value"] is not True:
            add(f"WRONG RESULT {lab['op']} {lab['size_bytes']}", 0.0, None, "correct")
    bare = {r["labels"]["gpu"]: r["value"] for r in rows if r["name"] == "bare.gemm_tflops"}
    for r in rows:
        lab = r["labels"]
        if r["name"] == "gemm.tflops":
            add(
                f"burn-in {lab['dtype']} TFLOP/s gpu{lab['gpu']} n={lab.get('n')}",
                r["value"],
                bare.get(lab["gpu"]) if lab["dtype"] == "bf16" else None,
                ">= 0.98 of bare matmul loop",
            )
        elif r["name"] in ("gemm.power_fraction", "gemm.power_fraction_median"):
            add(f"{r['name']} gpu{lab['gpu']} {lab['dtype']}", r["value"], None, ">= 0.97")
        elif r["name"] in ("gemm.sdc_mismatches", "hbm.pattern_errors"):
            add(f"{r['name']} gpu{lab['gpu']}", r["value"], None, "== 0")
        elif r["name"] == "gemm.clock_event_reasons":
            add(f"clock event reasons gpu{lab['gpu']} (bitmask)", r["value"], None, "info")
        elif r["name"] == "hbm.bandwidth":
            add(
                f"HBM copy GB/s gpu{lab['gpu']}",
                r["value"],
                4290.0,
                ">= 0.95 of d2d copy 4.29 TB/s",
            )
        elif r["name"] in ("host.h2d_bandwidth", "host.d2h_bandwidth"):
            add(f"{r['name']} gpu{lab['gpu']}", r["value"], 55.2, ">= 0.95 of 55.2")
        elif r["name"] in ("host.bidir_bandwidth", "p2p.bandwidth", "nccl.pair_busbw"):
            add(f"{r['name']} {lab}", r["value"], None, "info")
        elif r["name"] in (
            "fsdp.tokens_per_s_per_gpu",
            "fsdp.mfu",
            "fsdp.peak_memory_gib",
            "fsdp.step_time_spread",
            "fsdp.ckpt_resume_max_abs_diff",
            "fsdp.ckpt_write_gbps",
            "fsdp.ckpt_read_gbps",
        ):
            add(f"{r['name']} [{r['src']}]", r["value"], None, "see issue 6")
    for src in sorted({r["src"] for r in rows if r["name"] == "fsdp.loss"}):
        ls = [r for r in rows if r["name"] == "fsdp.loss" and r["src"] == src]
        ls.sort(key=lambda r: int(r["labels"]["step"]))
        add(f"loss first/last [{src}]", ls[0]["value"], ls[-1]["value"], "falls")
    tps = {r["src"]: r["value"] for r in rows if r["name"] == "fsdp.tokens_per_s_per_gpu"}
    if "scale1" in tps and "scale2" in tps:
        add("scaling: tok/s/GPU at 2 GPUs over 1 GPU", tps["scale2"], tps["scale1"], ">= 0.95")
    res["median_bare"] = statistics.median(bare.values()) if bare else None
    (out / "results.json").write_text(json.dumps(res, indent=1))
    table = "\n".join(lines)
    (out / "table.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
